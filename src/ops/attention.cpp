// Attention: one (token, head) pair per work item; scores live in a per-thread buffer sized to
// the context. fp32 throughout with max-subtracted softmax, as the reference engine computes it.
// q·k goes through the dispatched F32 dot kernel (AVX2 with a scalar twin): a prefill of n tokens
// does n²/2 of them per head, which a plain scalar loop makes the cost of long prompts.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/dispatch.h"

namespace sluice {

void attention(ThreadPool& pool, const AttentionParams& p, const KvCache& kv, int layer,
               const float* q, const int32_t* seq, const int32_t* pos, int64_t n_tok, float* out) {
  const int group = p.n_head / p.n_head_kv;
  const VecDotFn dot_f32 = dot_kernels(GgmlType::F32).vec_dot;
  const int64_t items = n_tok * p.n_head;
  pool.parallel_for(items, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<float> acc;
    if (scores.size() < static_cast<size_t>(kv.n_ctx())) scores.resize(kv.n_ctx());
    acc.resize(p.head_dim_v);
    for (int64_t it = begin; it < end; ++it) {
      const int64_t t = it / p.n_head;
      const int h = static_cast<int>(it % p.n_head);
      const int kvh = h / group;
      const float* qh = q + (t * p.n_head + h) * p.head_dim_k;
      const int32_t last = pos[t];
      const int32_t first = p.window > 0 ? std::max<int32_t>(0, last - p.window + 1) : 0;
      float mx = -INFINITY;
      for (int32_t k = first; k <= last; ++k) {
        const float* kr = kv.k(seq[t], layer, k) + kvh * p.head_dim_k;
        const float dot = dot_f32(p.head_dim_k, kr, qh) * p.scale;
        scores[k - first] = dot;
        mx = std::max(mx, dot);
      }
      const float sink = p.sinks ? p.sinks[h] : -INFINITY;
      mx = std::max(mx, sink);
      float sum = p.sinks ? std::exp(sink - mx) : 0.0f;
      for (int32_t k = first; k <= last; ++k) {
        float e = std::exp(scores[k - first] - mx);
        scores[k - first] = e;
        sum += e;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t k = first; k <= last; ++k) {
        const float* vr = p.values_in_keys ? kv.k(seq[t], layer, k) + kvh * p.head_dim_k
                                           : kv.v(seq[t], layer, k) + kvh * p.head_dim_v;
        const float w = scores[k - first];
        for (int d = 0; d < p.head_dim_v; ++d) acc[d] += w * vr[d];
      }
      float* o = out + (t * p.n_head + h) * p.head_dim_v;
      const float inv = 1.0f / sum;
      for (int d = 0; d < p.head_dim_v; ++d) o[d] = acc[d] * inv;
    }
  });
}

}  // namespace sluice
