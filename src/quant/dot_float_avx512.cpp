// AVX-512 multi-row dots of f32 and f16 weight rows with f32 activations: the router's, and any
// float matrix's, prefill. Each weight row is read (and, for f16, widened) once for up to
// kMaxDotRows activation rows, where the AVX2 set dotted it again for every token.
//
// Every row's result equals the AVX2 single-row kernel's bit for bit (VecDot tests check it), so
// a token's routing does not depend on whether it was decoded alone or prefilled in a batch: a
// 16-lane accumulator holds two of the AVX2 kernel's four 8-lane ones, each lane sees the same
// fused multiply-adds in the same order, and the reduction adds the four in the same tree.
#include <cstdint>

#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

namespace {

using avx2_detail::fp16_scalar;
using avx2_detail::hsum;
using avx2_detail::prefetch_weights;

struct F32Row {
  const float* a;
  __m512 load(int64_t i) const { return _mm512_loadu_ps(a + i); }
  __m512 load8(int64_t i) const { return _mm512_maskz_loadu_ps(0xFF, a + i); }
  float at(int64_t i) const { return a[i]; }
  void prefetch(int64_t) const {}
};

struct F16Row {
  const uint16_t* a;
  __m512 load(int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
  }
  __m512 load8(int64_t i) const {
    return _mm512_cvtph_ps(
        _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))));
  }
  float at(int64_t i) const { return fp16_scalar(a[i]); }
  void prefetch(int64_t i) const { prefetch_weights(a + i); }
};

template <class Row, int NX>
void float_rows(int64_t n, Row w, const std::byte* x, uint64_t x_stride, float* out) {
  const float* b[NX];
  for (int t = 0; t < NX; ++t) b[t] = reinterpret_cast<const float*>(x + t * x_stride);
  // lo[t] = the AVX2 kernel's acc[0] | acc[1], hi[t] = acc[2] | acc[3].
  __m512 lo[NX], hi[NX];
  for (int t = 0; t < NX; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    w.prefetch(i);
    const __m512 a0 = w.load(i), a1 = w.load(i + 16);
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      lo[t] = _mm512_fmadd_ps(a0, _mm512_loadu_ps(b[t] + i), lo[t]);
      hi[t] = _mm512_fmadd_ps(a1, _mm512_loadu_ps(b[t] + i + 16), hi[t]);
    }
  }
  // The AVX2 kernel's eight-value steps go into its acc[0]: the low half of lo.
  for (; i + 8 <= n; i += 8) {
    const __m512 a0 = w.load8(i);
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t)
      lo[t] = _mm512_mask3_fmadd_ps(a0, _mm512_maskz_loadu_ps(0xFF, b[t] + i), lo[t], 0xFF);
  }
  auto high = [](__m512 v) {  // AVX-512 F only: the upper eight floats through the f64 view
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  };
  for (int t = 0; t < NX; ++t) {
    const __m256 acc01 = _mm256_add_ps(_mm512_castps512_ps256(lo[t]), high(lo[t]));
    const __m256 acc23 = _mm256_add_ps(_mm512_castps512_ps256(hi[t]), high(hi[t]));
    float s = hsum(_mm256_add_ps(acc01, acc23));
    for (int64_t j = i; j < n; ++j) s += w.at(j) * b[t][j];
    out[t] = s;
  }
}

}  // namespace

void vec_dot_f32_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                       float* out) {
  with_row_count(n_x, [&](auto nx) {
    float_rows<F32Row, decltype(nx)::value>(n, F32Row{static_cast<const float*>(w)},
                                            static_cast<const std::byte*>(x), x_stride, out);
  });
}

void vec_dot_f16_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                       float* out) {
  with_row_count(n_x, [&](auto nx) {
    float_rows<F16Row, decltype(nx)::value>(n, F16Row{static_cast<const uint16_t*>(w)},
                                            static_cast<const std::byte*>(x), x_stride, out);
  });
}

}  // namespace sluice::avx512
