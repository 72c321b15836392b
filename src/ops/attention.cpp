// Attention: one (token, head) pair per work item, claimed dynamically from the pool; scores live
// in a per-thread buffer sized to the context. fp32 throughout with max-subtracted softmax, as the
// reference engine computes it. q·k goes through the dispatched F32 dot kernel (AVX2 with a scalar
// twin): a prefill of n tokens does n²/2 of them per head, which a plain scalar loop makes the
// cost of long prompts.
//
// When there are fewer pairs than the threads could use (decode, few heads) and the context is
// long, each pair's positions are also split into segments: every segment yields its own maximum,
// exp-sum and unnormalised value sum, and a merge rescales them to the common maximum (the
// flash-decoding identity). Short contexts keep the single pass, so their results are unchanged.
//
// The cache's stored types are read directly: every key type is dotted with the f32 query itself
// (keys widened to f32 inside the kernel), so only the stored rounding reaches the scores; a
// q8_0-rounded query would add its own error. The query is padded with zeros to whole blocks, as
// the stored heads are; values are dequantized per row and summed in f32.
// An f32 cache takes exactly the f32 path it always did.
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

struct Pair {
  const float* q;  // (head_dim_k)
  int32_t seq, first, last;
  int kvh;
};

thread_local std::vector<float> t_scores;
thread_local std::vector<float> t_acc;
thread_local std::vector<float> t_row;         // a dequantized value row
thread_local std::vector<float> t_qpad;  // the query padded to whole blocks

class Attender {
 public:
  Attender(const AttentionParams& p, const KvCache& kv, int layer, const float* q,
           const int32_t* seq, const int32_t* pos)
      : p_(p), kv_(kv), layer_(layer), q_(q), seq_(seq), pos_(pos),
        kt_(kv.type_k()), vt_(p.values_in_keys ? kv.type_k() : kv.type_v()),
        kdot_(f32_activation_dot(kv_storage_type(kt_))),
        k_pad_(kv_padded_dim(kt_, p.head_dim_k)),
        k_head_(kv_head_bytes(kt_, p.head_dim_k)),
        v_dim_(p.values_in_keys ? p.head_dim_k : p.head_dim_v),
        v_head_(kv_head_bytes(vt_, v_dim_)) {
    if (kv.shape(layer).head_dim_k != p.head_dim_k || kv.shape(layer).n_head != p.n_head_kv)
      fail("internal: layer {} KV cache holds {} heads of {}, attention reads {} of {}", layer,
           kv.shape(layer).n_head, kv.shape(layer).head_dim_k, p.n_head_kv, p.head_dim_k);
  }

  Pair pair(int64_t item) const {
    const int64_t t = item / p_.n_head;
    const int h = static_cast<int>(item % p_.n_head);
    const int32_t last = pos_[t];
    const int32_t first = p_.window > 0 ? std::max<int32_t>(0, last - p_.window + 1) : 0;
    return {q_ + (t * p_.n_head + h) * p_.head_dim_k, seq_[t], first, last,
            h / (p_.n_head / p_.n_head_kv)};
  }

  // The query padded to the stored head's whole blocks (itself when no padding is needed); valid
  // until the next call on this thread.
  const float* query(const Pair& pr) const {
    if (k_pad_ == p_.head_dim_k) return pr.q;
    t_qpad.assign(k_pad_, 0.0f);
    std::copy_n(pr.q, p_.head_dim_k, t_qpad.begin());
    return t_qpad.data();
  }

  // Scaled q·k for positions [k0, k1) into scores[0..); returns their maximum (−inf if empty).
  float scores(const Pair& pr, const float* q, int32_t k0, int32_t k1, float* scores) const {
    float mx = -INFINITY;
    const int n = k_pad_;
    for (int32_t k = k0; k < k1; ++k) {
      const std::byte* kr = kv_.k_row(pr.seq, layer_, k) + pr.kvh * k_head_;
      const float dot = kdot_(n, kr, q) * p_.scale;
      scores[k - k0] = dot;
      mx = std::max(mx, dot);
    }
    return mx;
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

  // acc = Σ weights[k − k0] · v[k] over [k0, k1).
  void weighted_values(const Pair& pr, int32_t k0, int32_t k1, const float* weights,
                       float* acc) const {
    std::fill(acc, acc + p_.head_dim_v, 0.0f);
    if (vt_ != KvType::kF32) t_row.resize(v_dim_);
    for (int32_t k = k0; k < k1; ++k) {
      const std::byte* raw = (p_.values_in_keys ? kv_.k_row(pr.seq, layer_, k) : kv_.v_row(pr.seq, layer_, k)) +
                             pr.kvh * v_head_;
      const float* vr = reinterpret_cast<const float*>(raw);
      if (vt_ != KvType::kF32) {
        kv_load_head(vt_, raw, v_dim_, t_row.data());
        vr = t_row.data();
      }
      const float w = weights[k - k0];
      for (int d = 0; d < p_.head_dim_v; ++d) acc[d] += w * vr[d];
    }
  }

 private:
  const AttentionParams& p_;
  const KvCache& kv_;
  int layer_;
  const float* q_;
  const int32_t* seq_;
  const int32_t* pos_;
  KvType kt_, vt_;
  VecDotFn kdot_;  // stored keys · f32 query
  int k_pad_;
  uint64_t k_head_;
  int v_dim_;  // floats per stored value head (MLA: the whole key row)
  uint64_t v_head_;
};

float* scores_buffer(size_t n) {
  if (t_scores.size() < n) t_scores.resize(n);
  return t_scores.data();
}

}  // namespace

void attention(ThreadPool& pool, const AttentionParams& p, const KvCache& kv, int layer,
               const float* q, const int32_t* seq, const int32_t* pos, int64_t n_tok, float* out) {
  const Attender at(p, kv, layer, q, seq, pos);
  const int64_t pairs = n_tok * p.n_head;
  int32_t max_span = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const Pair pr = at.pair(t * p.n_head);
    max_span = std::max(max_span, pr.last - pr.first + 1);
  }
  const int64_t want_items = kItemsPerThread * pool.size();
  const int64_t n_seg =
      pairs >= want_items || max_span < 2 * kMinSegment
          ? 1
          : std::min<int64_t>((want_items + pairs - 1) / pairs, max_span / kMinSegment);

  if (n_seg == 1) {
    pool.parallel_for(pairs, [&](int64_t begin, int64_t end) {
      float* scores = scores_buffer(static_cast<size_t>(kv.n_ctx()));
      t_acc.resize(p.head_dim_v);
      for (int64_t it = begin; it < end; ++it) {
        const Pair pr = at.pair(it);
        const int h = static_cast<int>(it % p.n_head);
        const int32_t n = pr.last - pr.first + 1;
        float mx = at.scores(pr, at.query(pr), pr.first, pr.last + 1, scores);
        const float sink = p.sinks ? p.sinks[h] : -INFINITY;
        mx = std::max(mx, sink);
        const float sum = Attender::exponentiate(scores, n, mx, p.sinks ? std::exp(sink - mx) : 0.0f);
        at.weighted_values(pr, pr.first, pr.last + 1, scores, t_acc.data());
        float* o = out + it * p.head_dim_v;
        const float inv = 1.0f / sum;
        for (int d = 0; d < p.head_dim_v; ++d) o[d] = t_acc[d] * inv;
      }
    });
    return;
  }

  // Segment s of a pair covers [first + span·s/n_seg, first + span·(s+1)/n_seg).
  const int64_t items = pairs * n_seg;
  std::vector<float> seg_max(static_cast<size_t>(items));
  std::vector<float> seg_sum(static_cast<size_t>(items));
  std::vector<float> seg_acc(static_cast<size_t>(items * p.head_dim_v));
  pool.parallel_for(items, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const Pair pr = at.pair(it / n_seg);
      const int64_t s = it % n_seg;
      const int64_t span = pr.last - pr.first + 1;
      const auto k0 = static_cast<int32_t>(pr.first + span * s / n_seg);
      const auto k1 = static_cast<int32_t>(pr.first + span * (s + 1) / n_seg);
      float* scores = scores_buffer(static_cast<size_t>(std::max<int32_t>(1, k1 - k0)));
      const float mx = at.scores(pr, at.query(pr), k0, k1, scores);
      seg_max[it] = mx;
      seg_sum[it] = Attender::exponentiate(scores, k1 - k0, mx, 0.0f);
      at.weighted_values(pr, k0, k1, scores, seg_acc.data() + it * p.head_dim_v);
    }
  });
  pool.parallel_for(pairs, [&](int64_t begin, int64_t end) {
    for (int64_t pi = begin; pi < end; ++pi) {
      const int h = static_cast<int>(pi % p.n_head);
      const float sink = p.sinks ? p.sinks[h] : -INFINITY;
      float mx = sink;
      for (int64_t s = 0; s < n_seg; ++s) mx = std::max(mx, seg_max[pi * n_seg + s]);
      float sum = p.sinks ? std::exp(sink - mx) : 0.0f;
      float* o = out + pi * p.head_dim_v;
      std::fill(o, o + p.head_dim_v, 0.0f);
      for (int64_t s = 0; s < n_seg; ++s) {
        const int64_t it = pi * n_seg + s;
        if (seg_sum[it] == 0.0f) continue;  // an empty segment (short span)
        const float scale = std::exp(seg_max[it] - mx);
        sum += seg_sum[it] * scale;
        const float* acc = seg_acc.data() + it * p.head_dim_v;
        for (int d = 0; d < p.head_dim_v; ++d) o[d] += acc[d] * scale;
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < p.head_dim_v; ++d) o[d] *= inv;
    }
  });
}

}  // namespace sluice
