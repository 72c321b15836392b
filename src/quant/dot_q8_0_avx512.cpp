// AVX-512 VNNI dot of Q8_0 weights with Q8_0 activations (decode: one to four activation rows per
// weight row). Scalar twin: scalar::vec_dot_q8_0; tests compare the two. Compiled with AVX-512
// F/BW/VL/VNNI flags; only reachable after dispatch has checked the CPU.
//
// Q8_0 is the attention, shared-expert and output-head type of 2-bit DeepSeek builds, so its
// single-row dot is most of a decode step's compute there. The AVX2 kernel handles one 32-value
// block per step with one float accumulator, which bounds it by the multiply-add latency; here
// two blocks share one 512-bit vpdpbusd, four blocks make a step and two accumulators alternate.
// Per-block integer sums are exact; only the order of the float terms differs from the scalar
// kernel.
#include <cstddef>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

using namespace avx2_detail;

namespace {

// The quants of blocks b[0] and b[1]: the first in the low 256 bits, the second in the high.
__m512i load_pair(const BlockQ8_0* b) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The fp16 scales of blocks b[0..3] in the low four 16-bit lanes.
__m128i scales4(const BlockQ8_0* b) {
  return _mm_set_epi16(0, 0, 0, 0, static_cast<int16_t>(b[3].d), static_cast<int16_t>(b[2].d),
                       static_cast<int16_t>(b[1].d), static_cast<int16_t>(b[0].d));
}

// vpdpbusd multiplies unsigned by signed bytes, so the weight's sign moves onto the activation:
// |w| · (x with w's sign). |w| ≤ 128 as an unsigned byte and |x| ≤ 127, and four products per
// 32-bit lane cannot overflow.
__m512i dot_pair(__m512i wabs, __mmask64 wneg, __m512i x) {
  const __m512i xs = _mm512_mask_sub_epi8(x, wneg, _mm512_setzero_si512(), x);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, xs);
}

__m256i dot_one(__m256i w, __m256i x) {
  const __mmask32 neg = _mm256_movepi8_mask(w);
  const __m256i xs = _mm256_mask_sub_epi8(x, neg, _mm256_setzero_si256(), x);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), xs);
}

template <int NX>
void q8_0_rows(int64_t n, const void* w, const std::byte* x, uint64_t x_stride, float* out) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const int64_t nb = n / kQK;
  const BlockQ8_0* b[NX];
  __m512 acc[NX][2];
  for (int t = 0; t < NX; ++t) {
    b[t] = reinterpret_cast<const BlockQ8_0*>(x + t * x_stride);
    acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  // Four blocks per step: their eight fp16 scales (weights', then each row's) are widened by one
  // conversion and multiplied as one vector, then permuted to the lanes of each block pair,
  // instead of eight scalar conversions and broadcasts.
  const __m512i lanes01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i lanes23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  for (; i + 4 <= nb; i += 4) {
    prefetch_weights(a + i);
    prefetch_weights(a + i + 2);
    const __m512i wv0 = load_pair(a + i), wv1 = load_pair(a + i + 2);
    const __m512i wabs0 = _mm512_abs_epi8(wv0), wabs1 = _mm512_abs_epi8(wv1);
    const __mmask64 wneg0 = _mm512_movepi8_mask(wv0), wneg1 = _mm512_movepi8_mask(wv1);
    const __m128 dw = _mm_cvtph_ps(scales4(a + i));
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_cvtph_ps(scales4(b[t] + i))));
      const __m512i s0 = dot_pair(wabs0, wneg0, load_pair(b[t] + i));
      const __m512i s1 = dot_pair(wabs1, wneg1, load_pair(b[t] + i + 2));
      acc[t][0] =
          _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes01, d), _mm512_cvtepi32_ps(s0), acc[t][0]);
      acc[t][1] =
          _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes23, d), _mm512_cvtepi32_ps(s1), acc[t][1]);
    }
  }
  int k = 0;
  for (; i + 2 <= nb; i += 2, k ^= 1) {
    prefetch_weights(a + i);
    const __m512i wv = load_pair(a + i);
    const __m512i wabs = _mm512_abs_epi8(wv);
    const __mmask64 wneg = _mm512_movepi8_mask(wv);
    const float dw0 = fp16_scalar(a[i].d), dw1 = fp16_scalar(a[i + 1].d);
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      const __m512i sum = dot_pair(wabs, wneg, load_pair(b[t] + i));
      // Lanes 0-7 hold block i's partial sums, lanes 8-15 block i + 1's.
      const __m512 scale =
          _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dw0 * fp16_scalar(b[t][i].d)),
                               _mm512_set1_ps(dw1 * fp16_scalar(b[t][i + 1].d)));
      acc[t][k] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum), acc[t][k]);
    }
  }
  for (int t = 0; t < NX; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
  if (i < nb) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    const float dw = fp16_scalar(a[i].d);
    for (int t = 0; t < NX; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[t][i].qs));
      const __m256i sum = dot_one(wv, xv);
      const int isum = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(sum));
      out[t] += dw * fp16_scalar(b[t][i].d) * static_cast<float>(isum);
    }
  }
}

}  // namespace

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  float out;
  q8_0_rows<1>(n, w, static_cast<const std::byte*>(x), 0, &out);
  return out;
}

void vec_dot_q8_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { q8_0_rows<decltype(nx)::value>(n, w, xb, x_stride, out); });
}

}  // namespace sluice::avx512
