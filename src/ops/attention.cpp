// Attention: a tile is one token and up to kMaxDotRows query heads that share a KV head; one work
// item, claimed dynamically from the pool, is the tiles of up to kMaxBlockTokens consecutive
// tokens of one sequence (a prefill's block) for the same heads. Keys and values are walked in
// runs of kRun rows, and each run is used by every token of the block while it sits in L1: a
// prefill reads each key and value row once per block instead of once per token (and dequantizes
// a quantized value row once per block). Within a tile each key row is read once for the tile's
// heads (the quant/attn_tiles kernels, AVX2 with a scalar twin). Scores live in a per-thread
// buffer sized to the block's span. fp32 throughout with max-subtracted softmax, as the reference
// engine computes it. A token's scores are per key and its value sums run over its keys in
// order, whatever the runs, the block or the other heads of its tile, so a head's result does not
// depend on how a prefill was cut into chunks or blocks: a resumed session or a pipeline stage
// reproduces one run exactly.
//
// When there are fewer tiles than the threads could use (decode, few KV heads) and the context is
// long, each tile's positions are also split into segments: every segment yields its own maximum,
// exp-sum and unnormalised value sum, and a merge rescales them to the common maximum (the
// flash-decoding identity). Short contexts keep the single pass, so their results are unchanged.
//
// The cache's stored types are read directly: every key type is dotted with the f32 query itself
// (keys widened to f32 inside the kernel), so only the stored rounding reaches the scores; a
// q8_0-rounded query would add its own error. Block-quantized keys (q8_0, q4_0) go through their
// per-key f32-activation dot with the query padded with zeros to whole blocks, as the stored heads
// are.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/dispatch.h"
#include "quant/types.h"

namespace sluice {

namespace {

// Fewest positions per segment: below this the merge costs more than the parallelism gains.
constexpr int32_t kMinSegment = 256;
// Work items per thread to aim for when splitting, so dynamic claiming can balance.
constexpr int64_t kItemsPerThread = 4;
// Key rows whose addresses (and dequantized values) are gathered per kernel call: 32 f32 rows of
// 128 dims are 16 KB, which stay in L1 while every token of a block uses them.
constexpr int32_t kRun = 32;
// Most tokens per work item: their queries (with kMaxDotRows heads of 128 f32 each, 2 KB a token)
// and a key run fit L1 together; more tokens would also make fewer items than threads can balance.
constexpr int64_t kMaxBlockTokens = 8;
// Scores per thread are (tokens, kMaxDotRows, span) floats; long spans get smaller blocks.
constexpr int64_t kMaxBlockScores = int64_t{4} << 20;

// One token's query heads [h0, h0 + n_h) of KV head kvh, seeing positions [first, last].
struct Tile {
  const float* q;  // (n_h, head_dim_k)
  int32_t seq, first, last;
  int h0, n_h, kvh;
};

// Positions [k0, k1) a tile reads; its scores are indexed from k0.
struct Span {
  int32_t k0, k1;
};

// The smallest span holding sp[0..nb).
Span hull(const Span* sp, int nb) {
  Span h = sp[0];
  for (int b = 1; b < nb; ++b) h = {std::min(h.k0, sp[b].k0), std::max(h.k1, sp[b].k1)};
  return h;
}

thread_local std::vector<float> t_scores;  // (block tokens, kMaxDotRows, span)
thread_local std::vector<float> t_acc;     // (block tokens, kMaxDotRows, head_dim_v)
thread_local std::vector<float> t_rows;    // (kRun, v_dim) dequantized value rows
thread_local std::vector<float> t_qpad;    // one query padded to whole blocks

class Attender {
 public:
  Attender(const AttentionParams& p, const KvCache& kv, int layer, const float* q,
           const int32_t* seq, const int32_t* pos)
      : p_(p),
        kv_(kv),
        layer_(layer),
        q_(q),
        seq_(seq),
        pos_(pos),
        kt_(kv.type_k()),
        vt_(p.values_in_keys ? kv.type_k() : kv.type_v()),
        tiles_(attention_tiles(kv_storage_type(kt_))),
        kdot_(f32_activation_dot(kv_storage_type(kt_))),
        k_pad_(kv_padded_dim(kt_, p.head_dim_k)),
        k_head_(kv_head_bytes(kt_, p.head_dim_k)),
        v_dim_(p.values_in_keys ? p.head_dim_k : p.head_dim_v),
        v_head_(kv_head_bytes(vt_, v_dim_)),
        n_rep_(p.n_head / p.n_head_kv),
        chunks_((n_rep_ + kMaxDotRows - 1) / kMaxDotRows) {
    if (kv.shape(layer).head_dim_k != p.head_dim_k || kv.shape(layer).n_head != p.n_head_kv)
      fail("internal: layer {} KV cache holds {} heads of {}, attention reads {} of {}", layer,
           kv.shape(layer).n_head, kv.shape(layer).head_dim_k, p.n_head_kv, p.head_dim_k);
  }

  int64_t tiles_per_token() const { return static_cast<int64_t>(p_.n_head_kv) * chunks_; }

  Tile tile(int64_t item) const {
    const int64_t t = item / tiles_per_token();
    const int r = static_cast<int>(item % tiles_per_token());
    const int kvh = r / chunks_, c = r % chunks_;
    const int h0 = kvh * n_rep_ + c * kMaxDotRows;
    const int32_t last = pos_[t];
    const int32_t first = p_.window > 0 ? std::max<int32_t>(0, last - p_.window + 1) : 0;
    return {q_ + (t * p_.n_head + h0) * p_.head_dim_k,       seq_[t], first, last, h0,
            std::min(kMaxDotRows, n_rep_ - c * kMaxDotRows), kvh};
  }

  // Scaled q·k of the heads of tiles tl[0..nb), which share a sequence and KV head, for positions
  // sp[b] into scores[(b * kMaxDotRows + j) * stride + k − sp[b].k0]; mx[b * kMaxDotRows + j]
  // gets the head's maximum (−inf if empty).
  void scores(const Tile* tl, const Span* sp, int nb, float* scores, int64_t stride,
              float* mx) const {
    const int64_t tile_stride = kMaxDotRows * stride;
    const bool tiled = tiles_.key_scores && k_pad_ == p_.head_dim_k;
    const Span all = hull(sp, nb);
    const std::byte* rows[kRun];
    for (int32_t a = all.k0; a < all.k1; a += kRun) {
      const int n = std::min(kRun, all.k1 - a);
      for (int i = 0; i < n; ++i)
        rows[i] = kv_.k_row(tl[0].seq, layer_, a + i) + tl[0].kvh * k_head_;
      for (int b = 0; b < nb; ++b) {
        const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
        if (s >= e) continue;
        float* out = scores + b * tile_stride + (s - sp[b].k0);
        if (tiled) {
          tiles_.key_scores(p_.head_dim_k, rows + (s - a), e - s, tl[b].q, p_.head_dim_k,
                            tl[b].n_h, out, stride);
          continue;
        }
        for (int j = 0; j < tl[b].n_h; ++j) {
          const float* q = query(tl[b].q + j * p_.head_dim_k);
          for (int32_t k = s; k < e; ++k) out[j * stride + k - s] = kdot_(k_pad_, rows[k - a], q);
        }
      }
    }
    for (int b = 0; b < nb; ++b) {
      for (int j = 0; j < tl[b].n_h; ++j) {
        float m = -INFINITY;
        float* s = scores + b * tile_stride + j * stride;
        for (int32_t i = 0; i < sp[b].k1 - sp[b].k0; ++i) {
          s[i] *= p_.scale;
          m = std::max(m, s[i]);
        }
        mx[b * kMaxDotRows + j] = m;
      }
    }
  }

  // Turns scores into exp(score − mx) in place and returns sum0 plus their sum.
  static float exponentiate(float* scores, int32_t n, float mx, float sum0) {
    float sum = sum0;
    for (int32_t i = 0; i < n; ++i) {
      scores[i] = std::exp(scores[i] - mx);
      sum += scores[i];
    }
    return sum;
  }

  // acc[(b * kMaxDotRows + j) * head_dim_v + d] = Σ weights[(b * kMaxDotRows + j) * stride + k −
  // sp[b].k0] · v[k][d] over the positions of sp[b], for the tiles tl[0..nb) of one sequence and
  // KV head; each value row is loaded (and dequantized) once for all of them.
  void weighted_values(const Tile* tl, const Span* sp, int nb, const float* weights, int64_t stride,
                       float* acc) const {
    const int64_t tile_stride = kMaxDotRows * stride;
    const int64_t acc_stride = int64_t{kMaxDotRows} * p_.head_dim_v;
    for (int b = 0; b < nb; ++b)
      std::fill(acc + b * acc_stride, acc + b * acc_stride + tl[b].n_h * p_.head_dim_v, 0.0f);
    const Span all = hull(sp, nb);
    const float* rows[kRun];
    if (vt_ != KvType::kF32) t_rows.resize(static_cast<size_t>(kRun) * v_dim_);
    for (int32_t a = all.k0; a < all.k1; a += kRun) {
      const int n = std::min(kRun, all.k1 - a);
      for (int i = 0; i < n; ++i) {
        const std::byte* raw = (p_.values_in_keys ? kv_.k_row(tl[0].seq, layer_, a + i)
                                                  : kv_.v_row(tl[0].seq, layer_, a + i)) +
                               tl[0].kvh * v_head_;
        if (vt_ == KvType::kF32) {
          rows[i] = reinterpret_cast<const float*>(raw);
        } else {
          float* row = t_rows.data() + static_cast<size_t>(i) * v_dim_;
          kv_load_head(vt_, raw, v_dim_, row);
          rows[i] = row;
        }
      }
      for (int b = 0; b < nb; ++b) {
        const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
        if (s >= e) continue;
        tiles_.value_sums(p_.head_dim_v, rows + (s - a), e - s,
                          weights + b * tile_stride + (s - sp[b].k0), stride, tl[b].n_h,
                          acc + b * acc_stride, p_.head_dim_v);
      }
    }
  }

  float sink(int h) const { return p_.sinks ? p_.sinks[h] : -INFINITY; }

 private:
  // The query padded to the stored head's whole blocks (itself when no padding is needed); valid
  // until the next call on this thread.
  const float* query(const float* q) const {
    if (k_pad_ == p_.head_dim_k) return q;
    t_qpad.assign(k_pad_, 0.0f);
    std::copy_n(q, p_.head_dim_k, t_qpad.begin());
    return t_qpad.data();
  }

  const AttentionParams& p_;
  const KvCache& kv_;
  int layer_;
  const float* q_;
  const int32_t* seq_;
  const int32_t* pos_;
  KvType kt_, vt_;
  AttentionTiles tiles_;
  VecDotFn kdot_;  // stored keys · f32 query, for key types without a tile kernel
  int k_pad_;
  uint64_t k_head_;
  int v_dim_;  // floats per stored value head (MLA: the whole key row)
  uint64_t v_head_;
  int n_rep_;   // query heads per KV head
  int chunks_;  // tiles per KV head
};

float* scores_buffer(size_t n) {
  if (t_scores.size() < n) t_scores.resize(n);
  return t_scores.data();
}

}  // namespace

void attention(ThreadPool& pool, const AttentionParams& p, const KvCache& kv, int layer,
               const float* q, const int32_t* seq, const int32_t* pos, int64_t n_tok, float* out) {
  const Attender at(p, kv, layer, q, seq, pos);
  const int64_t n_tiles = n_tok * at.tiles_per_token();
  int32_t max_span = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const Tile tl = at.tile(t * at.tiles_per_token());
    max_span = std::max(max_span, tl.last - tl.first + 1);
  }
  const int64_t want_items = kItemsPerThread * pool.size();
  const int64_t n_seg =
      n_tiles >= want_items || max_span < 2 * kMinSegment
          ? 1
          : std::min<int64_t>((want_items + n_tiles - 1) / n_tiles, max_span / kMinSegment);
  auto out_head = [&](const Tile& tl, int64_t item, int j) {
    const int64_t t = item / at.tiles_per_token();
    return out + (t * p.n_head + tl.h0 + j) * p.head_dim_v;
  };

  if (n_seg == 1) {
    // Blocks: runs of consecutive tokens of one sequence, as many as keep the items plentiful and
    // the scores buffer bounded.
    const int64_t tpt = at.tiles_per_token();
    const int64_t by_items = std::max<int64_t>(1, n_tiles / want_items);
    const int64_t by_memory =
        std::max<int64_t>(1, kMaxBlockScores / (int64_t{kMaxDotRows} * std::max(max_span, 1)));
    const int64_t block_cap = std::min({kMaxBlockTokens, by_items, by_memory});
    std::vector<int64_t> block_start{0};
    for (int64_t t = 1; t < n_tok; ++t) {
      if (seq[t] != seq[t - 1] || t - block_start.back() == block_cap) block_start.push_back(t);
    }
    block_start.push_back(n_tok);
    const auto n_blocks = static_cast<int64_t>(block_start.size()) - 1;
    pool.parallel_for(n_blocks * tpt, [&](int64_t begin, int64_t end) {
      Tile tl[kMaxBlockTokens];
      Span sp[kMaxBlockTokens];
      float mx[kMaxBlockTokens * kMaxDotRows], sum[kMaxBlockTokens * kMaxDotRows];
      for (int64_t it = begin; it < end; ++it) {
        const int64_t t0 = block_start[it / tpt], r = it % tpt;
        const int nb = static_cast<int>(block_start[it / tpt + 1] - t0);
        for (int b = 0; b < nb; ++b) {
          tl[b] = at.tile((t0 + b) * tpt + r);
          sp[b] = {tl[b].first, tl[b].last + 1};
        }
        const Span all = hull(sp, nb);
        const int64_t stride = all.k1 - all.k0;
        float* scores = scores_buffer(static_cast<size_t>(nb * kMaxDotRows * stride));
        t_acc.resize(static_cast<size_t>(nb * kMaxDotRows) * p.head_dim_v);
        at.scores(tl, sp, nb, scores, stride, mx);
        for (int b = 0; b < nb; ++b) {
          for (int j = 0; j < tl[b].n_h; ++j) {
            const float sink = at.sink(tl[b].h0 + j);
            const int m = b * kMaxDotRows + j;
            mx[m] = std::max(mx[m], sink);
            sum[m] = Attender::exponentiate(scores + m * stride, sp[b].k1 - sp[b].k0, mx[m],
                                            p.sinks ? std::exp(sink - mx[m]) : 0.0f);
          }
        }
        at.weighted_values(tl, sp, nb, scores, stride, t_acc.data());
        for (int b = 0; b < nb; ++b) {
          for (int j = 0; j < tl[b].n_h; ++j) {
            float* o = out + ((t0 + b) * p.n_head + tl[b].h0 + j) * p.head_dim_v;
            const float* acc = t_acc.data() + (b * kMaxDotRows + j) * p.head_dim_v;
            const float inv = 1.0f / sum[b * kMaxDotRows + j];
            for (int d = 0; d < p.head_dim_v; ++d) o[d] = acc[d] * inv;
          }
        }
      }
    });
    return;
  }

  // Segment s of a tile covers [first + span·s/n_seg, first + span·(s+1)/n_seg); its per-head
  // results sit at slot (item · kMaxDotRows + j).
  const int64_t items = n_tiles * n_seg;
  std::vector<float> seg_max(static_cast<size_t>(items * kMaxDotRows));
  std::vector<float> seg_sum(static_cast<size_t>(items * kMaxDotRows));
  std::vector<float> seg_acc(static_cast<size_t>(items * kMaxDotRows * p.head_dim_v));
  pool.parallel_for(items, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const Tile tl = at.tile(it / n_seg);
      const int64_t s = it % n_seg;
      const int64_t span = tl.last - tl.first + 1;
      const auto k0 = static_cast<int32_t>(tl.first + span * s / n_seg);
      const auto k1 = static_cast<int32_t>(tl.first + span * (s + 1) / n_seg);
      const int64_t stride = std::max<int32_t>(1, k1 - k0);
      float* scores = scores_buffer(static_cast<size_t>(kMaxDotRows * stride));
      const Span sp{k0, k1};
      at.scores(&tl, &sp, 1, scores, stride, seg_max.data() + it * kMaxDotRows);
      for (int j = 0; j < tl.n_h; ++j) {
        const int64_t slot = it * kMaxDotRows + j;
        seg_sum[slot] = Attender::exponentiate(scores + j * stride, k1 - k0, seg_max[slot], 0.0f);
      }
      at.weighted_values(&tl, &sp, 1, scores, stride,
                         seg_acc.data() + it * kMaxDotRows * p.head_dim_v);
    }
  });
  pool.parallel_for(n_tiles, [&](int64_t begin, int64_t end) {
    for (int64_t ti = begin; ti < end; ++ti) {
      const Tile tl = at.tile(ti);
      for (int j = 0; j < tl.n_h; ++j) {
        const float sink = at.sink(tl.h0 + j);
        float mx = sink;
        for (int64_t s = 0; s < n_seg; ++s)
          mx = std::max(mx, seg_max[(ti * n_seg + s) * kMaxDotRows + j]);
        float sum = p.sinks ? std::exp(sink - mx) : 0.0f;
        float* o = out_head(tl, ti, j);
        std::fill(o, o + p.head_dim_v, 0.0f);
        for (int64_t s = 0; s < n_seg; ++s) {
          const int64_t slot = (ti * n_seg + s) * kMaxDotRows + j;
          if (seg_sum[slot] == 0.0f) continue;  // an empty segment (short span)
          const float scale = std::exp(seg_max[slot] - mx);
          sum += seg_sum[slot] * scale;
          const float* acc = seg_acc.data() + ((ti * n_seg + s) * kMaxDotRows + j) * p.head_dim_v;
          for (int d = 0; d < p.head_dim_v; ++d) o[d] += acc[d] * scale;
        }
        const float inv = 1.0f / sum;
        for (int d = 0; d < p.head_dim_v; ++d) o[d] *= inv;
      }
    }
  });
}

}  // namespace sluice
