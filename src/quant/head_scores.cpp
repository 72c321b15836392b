// Gated multi-head key scores: the scalar twin (the reference the SIMD sets reproduce bit for bit)
// and the choice of kernel per set; see head_scores.h.
#include "quant/head_scores.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/dequant.h"

namespace sluice {

namespace scalar {

namespace {

template <GgmlType T>
void head_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                 int n_head, const float* w, float* scores) {
  thread_local std::vector<float> key;
  const int64_t be = type_traits(T).block_elems;
  const int64_t padded = (dim + be - 1) / be * be;
  if (T != GgmlType::F32) key.resize(padded);
  for (int i = 0; i < n_keys; ++i) {
    const float* k = reinterpret_cast<const float*>(k_rows[i]);
    if (T != GgmlType::F32) {
      dequantize_row(T, k_rows[i], key.data(), padded);
      k = key.data();
    }
    float s = 0.0f;
    for (int h = 0; h < n_head; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * dim;
      float dot = 0.0f;
      for (int64_t d = 0; d < dim; ++d) dot = std::fma(qh[d], k[d], dot);
      s = std::fma(w[h], std::max(dot, 0.0f), s);
    }
    scores[i] = s;
  }
}

}  // namespace

HeadScoresFn head_scores_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return head_scores<GgmlType::F32>;
    case GgmlType::F16: return head_scores<GgmlType::F16>;
    case GgmlType::BF16: return head_scores<GgmlType::BF16>;
    case GgmlType::Q8_0: return head_scores<GgmlType::Q8_0>;
    case GgmlType::Q4_0: return head_scores<GgmlType::Q4_0>;
    default: return nullptr;
  }
}

}  // namespace scalar

HeadScoresFn gated_head_scores(GgmlType key_storage, Isa isa) {
  HeadScoresFn f = isa >= Isa::Avx512 ? avx512::head_scores_kernel(key_storage)
                   : isa >= Isa::Avx2 ? avx2::head_scores_kernel(key_storage)
                                      : scalar::head_scores_kernel(key_storage);
  if (!f) fail("gated head scores: keys stored as {} are not supported", type_traits(key_storage).name);
  return f;
}

}  // namespace sluice
