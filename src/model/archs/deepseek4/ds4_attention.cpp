// DeepSeek V4 attention; see ds4_attention.h. Order inside one call: projections for the whole
// batch; then, per sequence in position order, the compressor states and the pooled rows a token
// completes (the state machine needs order, and a query only sees blocks it has finished); then
// attention for every (token, head) in parallel, with raw keys of this batch read from the batch
// itself; last the raw keys go into the window ring.
// Cached rows are stored as the cache's key type. The indexer scores its keys in place in that
// type (quant/head_scores.h), so its cost per token is reading the stored rows once. Attention's
// keys: F32 rows are read in place (bit for bit what was computed); any other type is
// dequantized once per call for the rows this batch reads (the window and the selected or pooled
// rows, not the whole cache), and the batch's own raw keys go through the same rounding first, so
// a token sees the same key value whether it comes from the batch or, in a later step, from the
// ring.
#include "model/archs/deepseek4/ds4_attention.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kv/ds4_cache.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "quant/dispatch.h"

namespace sluice {

namespace {

// The tokens of one sequence in this batch: batch indices in position order from `start`.
struct SeqRun {
  int seq = 0;
  int start = 0;
  std::vector<int64_t> idx;
};

std::vector<SeqRun> seq_runs(const Batch& b) {
  std::vector<SeqRun> runs;
  for (int64_t t = 0; t < b.size(); ++t) {
    auto it =
        std::find_if(runs.begin(), runs.end(), [&](const SeqRun& r) { return r.seq == b.seq[t]; });
    if (it == runs.end()) {
      runs.push_back({b.seq[t], b.pos[t], {}});
      it = runs.end() - 1;
    }
    if (b.pos[t] != it->start + static_cast<int>(it->idx.size()))
      fail(
          "deepseek4: sequence {} has position {} where {} was expected (tokens must be "
          "consecutive)",
          b.seq[t], b.pos[t], it->start + static_cast<int>(it->idx.size()));
    it->idx.push_back(t);
  }
  return runs;
}

// Runs one compressor over the batch: state rows in position order, and a pooled row (RMS-normed,
// rope at the block's first position) for each block a token completes. `state_row` gives a
// token's f32 state row, `pooled_row` where block b's stored row (of `type`) goes.
template <class StateRow, class PooledRow>
void run_compressor(ForwardContext& ctx, const Ds4CompressorWeights& w,
                    const std::vector<SeqRun>& runs, int ratio, int width, float eps,
                    const TailRope& rope, const float* xn, KvType type, StateRow state_row,
                    PooledRow pooled_row) {
  const int64_t n = ctx.n_tok;
  const int cw = Ds4CacheShape::state_width(ratio) * width;
  std::vector<float> kv(n * cw), sc(n * cw);
  matmul(ctx.pool, w.kv.mat(), xn, n, kv.data());
  matmul(ctx.pool, w.gate.mat(), xn, n, sc.data());
  std::vector<const float*> prev, cur;
  std::vector<float> out(width);  // (width) the pooled row before it is stored
  for (const SeqRun& r : runs)
    for (size_t i = 0; i < r.idx.size(); ++i) {
      const int p = r.start + static_cast<int>(i);
      const int64_t t = r.idx[i];
      float* row = state_row(r.seq, p);
      std::copy_n(kv.data() + t * cw, cw, row);
      const float* ape = w.ape.data() + static_cast<int64_t>(p % ratio) * cw;
      for (int j = 0; j < cw; ++j) row[cw + j] = sc[t * cw + j] + ape[j];
      if ((p + 1) % ratio) continue;
      const int b = p / ratio;
      prev.clear();
      cur.clear();
      if (ratio == 4 && b > 0)
        for (int q = 4 * (b - 1); q < 4 * b; ++q) prev.push_back(state_row(r.seq, q));
      for (int q = ratio * b; q <= p; ++q) cur.push_back(state_row(r.seq, q));
      compress_pool(width, cw, prev.data(), static_cast<int>(prev.size()), cur.data(),
                    static_cast<int>(cur.size()), ratio == 4 ? width : 0, out.data());
      rmsnorm(out.data(), w.norm.f32(), out.data(), width, eps);
      rope.rotate(out.data(), 1, width, ratio * b);
      kv_store_head(type, out.data(), width, pooled_row(r.seq, b));
    }
}

// Dequantizes stored rows a batch reads. `keys` holds, per token, pointers to its keys: rows of
// the batch's own keys (inside [batch_begin, batch_end)) as floats, cached rows as the address of
// the stored row. For f32 those addresses are the floats already; for other types each distinct
// row is converted once into `rows` (a pooled row many tokens of a prefill select costs one
// conversion) and its pointers are redirected there.
void load_cached_rows(ThreadPool& pool, KvType type, int dim, const float* batch_begin,
                      const float* batch_end, std::vector<std::vector<const float*>>& keys,
                      std::vector<float>& rows) {
  if (type == KvType::kF32) return;
  const std::less<const float*> before;
  auto cached = [&](const float* p) { return before(p, batch_begin) || !before(p, batch_end); };
  std::vector<const float*> wanted;
  for (const auto& ks : keys)
    for (const float* p : ks)
      if (cached(p)) wanted.push_back(p);
  std::sort(wanted.begin(), wanted.end(), before);
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  rows.resize(wanted.size() * dim);
  pool.parallel_for(static_cast<int64_t>(wanted.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      kv_load_head(type, reinterpret_cast<const std::byte*>(wanted[i]), dim, rows.data() + i * dim);
  });
  pool.parallel_for(static_cast<int64_t>(keys.size()), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (const float*& p : keys[t])
        if (cached(p))
          p = rows.data() +
              (std::lower_bound(wanted.begin(), wanted.end(), p, before) - wanted.begin()) * dim;
  });
}

}  // namespace

void ds4_attention(ForwardContext& ctx, int il, const Ds4AttentionWeights& w,
                   const Ds4AttentionConfig& c, const float* xn, float* out) {
  auto* cache = dynamic_cast<Ds4KvCache*>(&ctx.kv);
  if (!cache) fail("internal: deepseek4 needs its own KV cache (Model::make_kv_cache)");
  Ds4KvCache& kv = *cache;
  const int64_t n = ctx.n_tok;
  const int H = c.n_head, D = c.head_dim, r = c.ratio;
  const int64_t q_rank = w.wq_a.ne[1];
  const std::vector<SeqRun> runs = seq_runs(ctx.batch);
  const KvType type = kv.shape().type;

  // Queries: RMS_w of the q latent, up-projection, RMS per head (no weight), rope on the tail.
  std::vector<float> cq(n * q_rank), k(n * D);
  float* q = ctx.reused(PassBuffer::kDs4Queries, static_cast<size_t>(n) * H * D);  // (n, H, D)
  matmul(ctx.pool, w.wq_a.mat(), xn, n, cq.data());
  for (int64_t t = 0; t < n; ++t)
    rmsnorm(cq.data() + t * q_rank, w.q_a_norm.f32(), cq.data() + t * q_rank, q_rank, c.eps);
  matmul(ctx.pool, w.wq_b.mat(), cq.data(), n, q);
  matmul(ctx.pool, w.wkv.mat(), xn, n, k.data());
  // Per token, on every thread: a 512-token chunk's per-head norms are 32k rows of 512.
  ctx.pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t p = ctx.batch.pos[t];
      float* qt = q + t * H * D;
      for (int h = 0; h < H; ++h) rmsnorm(qt + h * D, nullptr, qt + h * D, D, c.eps);
      c.rope->rotate(qt, H, D, p);
      float* kt = k.data() + t * D;
      rmsnorm(kt, w.kv_norm.f32(), kt, D, c.eps);
      c.rope->rotate(kt, 1, D, p);
    }
  });
  if (type != KvType::kF32) {
    std::vector<std::byte> stored(kv.shape().key_bytes());
    for (int64_t t = 0; t < n; ++t) {
      kv_store_head(type, k.data() + t * D, D, stored.data());
      kv_load_head(type, stored.data(), D, k.data() + t * D);
    }
  }

  if (r != 0)
    run_compressor(
        ctx, w.comp, runs, r, D, c.eps, *c.rope, xn, type,
        [&](int s, int p) { return kv.state_row(s, il, p); },
        [&](int s, int b) { return kv.pooled_row(s, il, b); });

  // Indexer queries and weights (ratio 4).
  const int Ih = c.idx_heads, Id = c.idx_dim;
  float* iq = nullptr;  // (n, Ih, Id)
  std::vector<float> iw;
  if (r == 4) {
    run_compressor(
        ctx, w.icomp, runs, 4, Id, c.eps, *c.rope, xn, type,
        [&](int s, int p) { return kv.index_state_row(s, il, p); },
        [&](int s, int b) { return kv.index_row(s, il, b); });
    iq = ctx.reused(PassBuffer::kDs4IndexQueries, static_cast<size_t>(n) * Ih * Id);
    iw.resize(n * Ih);
    matmul(ctx.pool, w.idx_q_b.mat(), cq.data(), n, iq);
    matmul(ctx.pool, w.idx_proj.mat(), xn, n, iw.data());
    const float s = 1.0f / std::sqrt(static_cast<float>(Id) * Ih);
    for (int64_t t = 0; t < n; ++t) {
      c.rope->rotate(iq + t * Ih * Id, Ih, Id, ctx.batch.pos[t]);
      for (int h = 0; h < Ih; ++h) iw[t * Ih + h] *= s;
    }
  }

  // Indexer keys of each sequence (ratio 4, once its blocks outnumber the top-k): the stored rows
  // of every block the run's last token sees, scored in place (no float copy of the cache).
  std::vector<std::vector<const std::byte*>> index_keys(runs.size());
  for (size_t ri = 0; r == 4 && ri < runs.size(); ++ri) {
    const SeqRun& run = runs[ri];
    const int n_blocks = (run.start + static_cast<int>(run.idx.size())) / 4;
    if (n_blocks <= c.idx_top_k) continue;
    std::vector<const std::byte*>& ik = index_keys[ri];
    ik.resize(n_blocks);
    for (int b = 0; b < n_blocks; ++b) ik[b] = kv.index_row(run.seq, il, b);
  }
  const GgmlType index_type = kv_storage_type(type);

  // Visible keys per token: the raw window (this batch's own keys from k), then pooled rows.
  // Cached rows are collected as their stored addresses; load_cached_rows makes them floats.
  auto stored = [](const std::byte* row) { return reinterpret_cast<const float*>(row); };
  std::vector<std::vector<const float*>> keys(n);
  std::vector<int64_t> seq_of(n);
  for (size_t ri = 0; ri < runs.size(); ++ri)
    for (int64_t t : runs[ri].idx) seq_of[t] = static_cast<int64_t>(ri);
  auto collect = [&](int64_t t, std::vector<float>& scores, std::vector<int32_t>& sel,
                     bool parallel_scores) {
    const SeqRun& run = runs[seq_of[t]];
    const int32_t p = ctx.batch.pos[t];
    std::vector<const float*>& ks = keys[t];
    ks.clear();
    for (int32_t j = std::max(0, p - c.window + 1); j <= p; ++j)
      ks.push_back(j >= run.start ? k.data() + run.idx[j - run.start] * D
                                  : stored(kv.window_row(run.seq, il, j)));
    if (r == 0) return;
    const int n_vis = (p + 1) / r;
    if (r == 128 || n_vis <= c.idx_top_k) {
      for (int b = 0; b < n_vis; ++b) ks.push_back(stored(kv.pooled_row(run.seq, il, b)));
      return;
    }
    const std::byte* const* ikeys = index_keys[seq_of[t]].data();
    scores.resize(n_vis);
    const float* qt = iq + t * Ih * Id;
    const float* wt = iw.data() + t * Ih;
    if (parallel_scores)
      ctx.pool.parallel_for(n_vis, [&](int64_t b0, int64_t b1) {
        indexer_scores(index_type, qt, wt, Ih, Id, ikeys, static_cast<int>(b0),
                       static_cast<int>(b1), scores.data());
      });
    else
      indexer_scores(index_type, qt, wt, Ih, Id, ikeys, 0, n_vis, scores.data());
    select_top(scores.data(), n_vis, c.idx_top_k, sel);
    for (int32_t b : sel) ks.push_back(stored(kv.pooled_row(run.seq, il, b)));
  };
  if (n == 1) {
    std::vector<float> scores;
    std::vector<int32_t> sel;
    collect(0, scores, sel, true);
  } else {
    ctx.pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> scores;
      thread_local std::vector<int32_t> sel;
      for (int64_t t = t0; t < t1; ++t) collect(t, scores, sel, false);
    });
  }
  std::vector<float> cached_rows;  // (distinct cached rows read, D) when not f32
  load_cached_rows(ctx.pool, type, D, k.data(), k.data() + n * D, keys, cached_rows);

  // One softmax per (token, head) over the keys and the sink; values are the keys. All heads share
  // the one K=V head, so a work item is kMaxTileQueries heads of a token: the attention tiles
  // (quant/dispatch.h) read each key row once for them, for the scores and again for the sums.
  // A head's result does not depend on the other heads of its item.
  float* o = ctx.reused(PassBuffer::kDs4Outputs, static_cast<size_t>(n) * H * D);  // (n, H, D)
  const AttentionTiles tiles = attention_tiles(GgmlType::F32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int n_hg = (H + kMaxTileQueries - 1) / kMaxTileQueries;
  ctx.pool.parallel_for(n * n_hg, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> sc;
    thread_local std::vector<const std::byte*> rows;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / n_hg;
      const int h0 = static_cast<int>(i % n_hg) * kMaxTileQueries;
      const int nq = std::min(kMaxTileQueries, H - h0);
      const std::vector<const float*>& ks = keys[t];
      const int nk = static_cast<int>(ks.size());
      rows.resize(nk);
      for (int j = 0; j < nk; ++j) rows[j] = reinterpret_cast<const std::byte*>(ks[j]);
      sc.resize(static_cast<size_t>(nq) * nk);
      const float* qh = q + (t * H + h0) * D;
      float* oh = o + (t * H + h0) * D;
      tiles.key_scores(D, rows.data(), nk, qh, D, nq, sc.data(), nk);
      float inv[kMaxTileQueries];
      for (int r = 0; r < nq; ++r) {
        // exp_scores normalises to the keys' largest scaled score m; the sink joins the softmax
        // through a common maximum M = max(m, sink).
        float m = 0.0f;
        float* s = sc.data() + static_cast<int64_t>(r) * nk;
        const float sum = tiles.exp_scores(s, nk, scale, &m);
        const float sink = w.sinks.f32()[h0 + r];
        const float mx = std::max(m, sink);
        const float f = std::exp(m - mx);
        inv[r] = 1.0f / (sum * f + std::exp(sink - mx));
        if (f != 1.0f)
          for (int j = 0; j < nk; ++j) s[j] *= f;
      }
      // value_sums adds to its output: the item's rows start at zero, cleared here while the
      // thread is about to use them rather than all at once beforehand.
      std::fill(oh, oh + static_cast<int64_t>(nq) * D, 0.0f);
      tiles.value_sums(D, ks.data(), nk, sc.data(), nk, nq, oh, D);
      for (int r = 0; r < nq; ++r) {
        float* orow = oh + static_cast<int64_t>(r) * D;
        for (int d = 0; d < D; ++d) orow[d] *= inv[r];
        c.rope->rotate(orow, 1, D, -ctx.batch.pos[t]);
      }
    }
  });
  ctx.dump("kqv_out", il, o, static_cast<int64_t>(H) * D);

  // Raw keys into the window ring, in position order so the newest win.
  for (const SeqRun& run : runs)
    for (size_t i = 0; i < run.idx.size(); ++i)
      kv_store_head(type, k.data() + run.idx[i] * D, D,
                    kv.window_row(run.seq, il, run.start + static_cast<int>(i)));

  // Grouped output LoRA: group g maps its H/G heads through rows g·O.. of wo_a.
  const int G = c.n_groups, O = c.o_rank;
  const int64_t gw = static_cast<int64_t>(H / G) * D;
  std::vector<float> xg(n * gw), ug(n * O), u(n * G * O);
  for (int g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t)
      std::copy_n(o + t * H * D + g * gw, gw, xg.data() + t * gw);
    const MatView a = w.wo_a.mat();
    const MatView part{a.type, a.n_in, O, a.data + static_cast<uint64_t>(g) * O * a.row_stride,
                       a.row_stride};
    matmul(ctx.pool, part, xg.data(), n, ug.data());
    for (int64_t t = 0; t < n; ++t) std::copy_n(ug.data() + t * O, O, u.data() + t * G * O + g * O);
  }
  matmul(ctx.pool, w.wo_b.mat(), u.data(), n, out);
  ctx.dump("attn_out", il, out, w.wo_b.ne[1]);
}

}  // namespace sluice
