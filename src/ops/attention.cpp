// Attention: one work item is a tile — one token and up to kMaxDotRows query heads that share a
// KV head — claimed dynamically from the pool. Each key row is read once for the tile's heads
// (the quant/attn_tiles kernels, AVX2 with a scalar twin), and each value row once, dequantized
// once when stored quantized; scores live in a per-thread buffer sized to the context. fp32
// throughout with max-subtracted softmax, as the reference engine computes it. A head's result
// does not depend on the other heads of its tile, nor on how a prefill was cut into chunks, so a
// resumed session or a pipeline stage reproduces one run exactly.
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
// Key rows whose addresses (and dequantized values) are gathered per kernel call.
constexpr int32_t kRun = 64;

// One token's query heads [h0, h0 + n_h) of KV head kvh, seeing positions [first, last].
struct Tile {
  const float* q;  // (n_h, head_dim_k)
  int32_t seq, first, last;
  int h0, n_h, kvh;
};

thread_local std::vector<float> t_scores;  // (kMaxDotRows, n_ctx)
thread_local std::vector<float> t_acc;     // (kMaxDotRows, head_dim_v)
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

  // Scaled q·k of the tile's heads for positions [k0, k1) into scores[j * stride + k − k0];
  // mx[j] gets head j's maximum (−inf if empty).
  void scores(const Tile& tl, int32_t k0, int32_t k1, float* scores, int64_t stride,
              float* mx) const {
    const std::byte* rows[kRun];
    for (int32_t a = k0; a < k1; a += kRun) {
      const int n = std::min(kRun, k1 - a);
      for (int i = 0; i < n; ++i) rows[i] = kv_.k_row(tl.seq, layer_, a + i) + tl.kvh * k_head_;
      if (tiles_.key_scores && k_pad_ == p_.head_dim_k) {
        tiles_.key_scores(p_.head_dim_k, rows, n, tl.q, p_.head_dim_k, tl.n_h, scores + (a - k0),
                          stride);
      } else {
        for (int j = 0; j < tl.n_h; ++j) {
          const float* q = query(tl.q + j * p_.head_dim_k);
          for (int i = 0; i < n; ++i) scores[j * stride + a - k0 + i] = kdot_(k_pad_, rows[i], q);
        }
      }
    }
    for (int j = 0; j < tl.n_h; ++j) {
      float m = -INFINITY;
      float* s = scores + j * stride;
      for (int32_t i = 0; i < k1 - k0; ++i) {
        s[i] *= p_.scale;
        m = std::max(m, s[i]);
      }
      mx[j] = m;
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

  // acc[j * head_dim_v + d] = Σ weights[j * stride + k − k0] · v[k][d] over [k0, k1).
  void weighted_values(const Tile& tl, int32_t k0, int32_t k1, const float* weights, int64_t stride,
                       float* acc) const {
    std::fill(acc, acc + tl.n_h * p_.head_dim_v, 0.0f);
    const float* rows[kRun];
    if (vt_ != KvType::kF32) t_rows.resize(static_cast<size_t>(kRun) * v_dim_);
    for (int32_t a = k0; a < k1; a += kRun) {
      const int n = std::min(kRun, k1 - a);
      for (int i = 0; i < n; ++i) {
        const std::byte* raw = (p_.values_in_keys ? kv_.k_row(tl.seq, layer_, a + i)
                                                  : kv_.v_row(tl.seq, layer_, a + i)) +
                               tl.kvh * v_head_;
        if (vt_ == KvType::kF32) {
          rows[i] = reinterpret_cast<const float*>(raw);
        } else {
          float* row = t_rows.data() + static_cast<size_t>(i) * v_dim_;
          kv_load_head(vt_, raw, v_dim_, row);
          rows[i] = row;
        }
      }
      tiles_.value_sums(p_.head_dim_v, rows, n, weights + (a - k0), stride, tl.n_h, acc,
                        p_.head_dim_v);
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
    pool.parallel_for(n_tiles, [&](int64_t begin, int64_t end) {
      const int64_t stride = kv.n_ctx();
      float* scores = scores_buffer(static_cast<size_t>(kMaxDotRows * stride));
      t_acc.resize(static_cast<size_t>(kMaxDotRows) * p.head_dim_v);
      for (int64_t it = begin; it < end; ++it) {
        const Tile tl = at.tile(it);
        const int32_t n = tl.last - tl.first + 1;
        float mx[kMaxDotRows], sum[kMaxDotRows];
        at.scores(tl, tl.first, tl.last + 1, scores, stride, mx);
        for (int j = 0; j < tl.n_h; ++j) {
          const float sink = at.sink(tl.h0 + j);
          mx[j] = std::max(mx[j], sink);
          sum[j] = Attender::exponentiate(scores + j * stride, n, mx[j],
                                          p.sinks ? std::exp(sink - mx[j]) : 0.0f);
        }
        at.weighted_values(tl, tl.first, tl.last + 1, scores, stride, t_acc.data());
        for (int j = 0; j < tl.n_h; ++j) {
          float* o = out_head(tl, it, j);
          const float inv = 1.0f / sum[j];
          for (int d = 0; d < p.head_dim_v; ++d) o[d] = t_acc[j * p.head_dim_v + d] * inv;
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
      at.scores(tl, k0, k1, scores, stride, seg_max.data() + it * kMaxDotRows);
      for (int j = 0; j < tl.n_h; ++j) {
        const int64_t slot = it * kMaxDotRows + j;
        seg_sum[slot] = Attender::exponentiate(scores + j * stride, k1 - k0, seg_max[slot], 0.0f);
      }
      at.weighted_values(tl, k0, k1, scores, stride,
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
