// AVX-512 VNNI dot kernels of the k-quants for decode where they beat the AVX2 ones: Q6_K (the
// output head, the largest matrix a token reads; 1.6x the AVX2 kernel's rate in bench_matmul's
// BM_Types) and Q2_K, one to four activation rows (the routed down type of 2-bit DeepSeek builds).
// The scalar twins live in dot_kquants.cpp, the AVX2 versions in dot_kquants_avx2.cpp. Compiled
// with AVX-512 F/BW/VL/VNNI; only reachable after dispatch has checked the CPU. (A Q4_K kernel
// built the same way measured no faster than the AVX2 one, so Q4_K keeps that.)
//
// A 512-bit vector holds 64 consecutive values, and vpdpwssd folds the per-group scale multiply
// and the accumulation into one instruction: per 64 weights one maddubs (unsigned weight bytes
// times signed activation bytes into 16-bit pair sums, which cannot saturate for values < 64) and
// one vpdpwssd. The scales reach their 16-bit lanes through one vpermw of the block's scales.
#include <cstddef>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

using avx2_detail::fp16_scalar;
using avx2_detail::hsum;

namespace {

__m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}

// 16-bit lanes 0..15 hold lo, lanes 16..31 hold hi: one value per 256-bit half.
__m512i halves16(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

// 16-bit lane i holds base + i / 8: the scale index of each lane's group when the 64 values are
// four 16-value groups.
__m512i quarters16(int base) {
  auto q = [](int v) {
    return static_cast<long long>(0x0001000100010001ULL * static_cast<unsigned>(v));
  };
  return _mm512_set_epi64(q(base + 3), q(base + 3), q(base + 2), q(base + 2), q(base + 1),
                          q(base + 1), q(base), q(base));
}

}  // namespace

// Q6_K: per 128-value half h, ql[64h..64h+63] holds values 0..63 of the half in its low nibbles
// and 64..127 in its high nibbles; their top two bits are bits (0, 2) and (4, 6) of qh[32h..+31],
// so one 64-byte ql load and qh broadcast to both 256-bit halves (shifted per half by vpsrlvw)
// give 64 consecutive values matching one 64-byte activation load.
float vec_dot_q6_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i low2 = _mm512_set1_epi8(0x03);
  const __m512i shift_lo = halves16(0, 2), shift_hi = halves16(4, 6);
  const __m512i idx[4] = {quarters16(0), quarters16(4), quarters16(8), quarters16(12)};
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_off = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    const float dd = b[i].d * fp16_scalar(a[i].d);
    // Values are stored +32: subtract 32 * scale * group sum once per super-block.
    acc_off = _mm256_fmadd_ps(
        _mm256_set1_ps(dd),
        _mm256_cvtepi32_ps(_mm256_madd_epi16(
            sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].bsums)))),
        acc_off);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load512(a[i].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qh + 32 * h)));
      const __m512i lo = _mm512_or_si512(
          _mm512_and_si512(ql, low4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_lo), low2), 4));
      const __m512i hi = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), low2), 4));
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(lo, load512(b[i].qs + 128 * h)),
                                 _mm512_permutexvar_epi16(idx[2 * h], sc));
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(hi, load512(b[i].qs + 128 * h + 64)),
                                 _mm512_permutexvar_epi16(idx[2 * h + 1], sc));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(sumi), acc);
  }
  return _mm512_reduce_add_ps(acc) - 32.0f * hsum(acc_off);
}

namespace {

// Q2_K: per 128-value half h, qs[32h..32h+31] holds four 2-bit values per byte: bits 2p..2p+1 of
// byte j are value 32p + j of the half. Broadcasting the half's 32 bytes to both 256-bit halves and
// shifting them by (0, 2) or (4, 6) bits gives 64 consecutive values matching one 64-byte
// activation load, as in Q6_K. Scales (low nibbles) go through vpdpwssd; the mins (high nibbles)
// meet the activation group sums once per super-block.
template <int NX>
void q2_K_rows(int64_t n, const BlockQ2K* a, const std::byte* x, uint64_t x_stride, float* out) {
  const __m512i low2 = _mm512_set1_epi8(0x03);
  const __m512i shift[2] = {halves16(0, 2), halves16(4, 6)};
  const __m512i idx[4] = {quarters16(0), quarters16(4), quarters16(8), quarters16(12)};
  __m512 acc[NX];
  __m256 acc_min[NX];
  for (int t = 0; t < NX; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQKK; ++i) {
    avx2_detail::prefetch_weights(a + i);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales));
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0x0F)));
    const __m256i mins16 =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    const float d = fp16_scalar(a[i].d), dmin = fp16_scalar(a[i].dmin);
    const BlockQ8K* b[NX];
    __m512i sumi[NX];
    for (int t = 0; t < NX; ++t) {
      b[t] = reinterpret_cast<const BlockQ8K*>(x + t * x_stride) + i;
      sumi[t] = _mm512_setzero_si512();
      acc_min[t] = _mm256_fmadd_ps(
          _mm256_set1_ps(b[t]->d * dmin),
          _mm256_cvtepi32_ps(_mm256_madd_epi16(
              mins16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[t]->bsums)))),
          acc_min[t]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i q = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 32 * (c >> 1))));
      const __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, shift[c & 1]), low2);
      const __m512i scale = _mm512_permutexvar_epi16(idx[c], sc);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t)
        sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(v, load512(b[t]->qs + 64 * c)),
                                      scale);
    }
    for (int t = 0; t < NX; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(b[t]->d * d), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
  }
  for (int t = 0; t < NX; ++t) out[t] = _mm512_reduce_add_ps(acc[t]) - hsum(acc_min[t]);
}

}  // namespace

float vec_dot_q2_K(int64_t n, const void* w, const void* x) {
  float out;
  q2_K_rows<1>(n, static_cast<const BlockQ2K*>(w), static_cast<const std::byte*>(x), 0, &out);
  return out;
}

void vec_dot_q2_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  const auto* a = static_cast<const BlockQ2K*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { q2_K_rows<decltype(nx)::value>(n, a, xb, x_stride, out); });
}

}  // namespace sluice::avx512
