// AVX2+FMA dot kernels for K-quant weights against Q8_K activations; scalar twins live in
// dot_kquants.cpp. Q4_K..Q6_K dominate decode time (every MoE expert row goes through one of them)
// and decode is bandwidth bound, so each kernel keeps a super-block to a few dozen instructions.
//
// Shared ideas: weights are unpacked to unsigned bytes (< 64) so maddubs can multiply them with
// the signed activation bytes without saturating; any constant offset (Q6_K's -32, Q3_K's -4) and
// any per-group minimum (Q2_K, Q4_K, Q5_K) is applied through the activation's 16-value sums
// instead of per value.
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "quant/kernels.h"
#include "quant/simd_avx2.h"

namespace sluice::avx2 {

using namespace avx2_detail;

namespace {

__m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// 32 unsigned weight bytes times 32 activation bytes; the first 16 products are weighted by s0,
// the last 16 by s1: 8 int32 sums.
__m256i scaled_dot2(__m256i w, const int8_t* q8, int s0, int s1) {
  const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                                          _mm_set1_epi16(static_cast<int16_t>(s0)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, load256(q8)), scales);
}

// sum over the 16 groups of scale[g] * bsums[g]; scales given as 16 int16.
int bsum_dot(__m256i scales16, const int16_t* bsums) {
  return hsum_i32(_mm256_madd_epi16(scales16, load256(bsums)));
}

// Q4_K / Q5_K scales and mins (see k_scale_min in blocks.h for the packing) as 16-bit vectors:
// the 8 scales in both 128-bit halves, ready for per-sub-block broadcast, and the 8 mins each
// repeated twice so that one madd against the 16 activation group sums yields the min term.
struct ScaleMin {
  __m256i scales;
  __m256i mins;
};
inline __attribute__((always_inline)) ScaleMin unpack_scale_min(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, sizeof u);
  const uint32_t s_lo = u[0] & 0x3f3f3f3f;
  const uint32_t m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t s_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  const __m128i s8 = _mm_set_epi32(0, 0, static_cast<int>(s_hi), static_cast<int>(s_lo));
  const __m128i m8 = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
  return {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8)),
          _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8))};
}

// 16-bit element j (0..7) of each 128-bit half, broadcast across that half.
inline __attribute__((always_inline)) __m256i broadcast16(__m256i v, int j) {
  return _mm256_shuffle_epi8(v,
                             _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j))));
}

// 32 unsigned weight bytes times 32 activation bytes, weighted by 16-bit scales: 8 int32 sums.
__m256i scaled_dot_v(__m256i w, const int8_t* q8, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, load256(q8)), scale16);
}

// Q3_K: the sixteen 6-bit scales (see q3k_scales in blocks.h), four per 32-bit word, minus 32.
__m128i unpack_q3k_scales(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, sizeof u);
  const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const __m128i s =
      _mm_setr_epi32(static_cast<int>((u[0] & m4) | ((u[2] & m2) << 4)),
                     static_cast<int>((u[1] & m4) | (((u[2] >> 2) & m2) << 4)),
                     static_cast<int>(((u[0] >> 4) & m4) | (((u[2] >> 4) & m2) << 4)),
                     static_cast<int>(((u[1] >> 4) & m4) | (((u[2] >> 6) & m2) << 4)));
  return _mm_sub_epi8(s, _mm_set1_epi8(32));
}

}  // namespace

namespace {

// Q4_K / Q5_K rows against NX activation rows at once: each weight block is unpacked once and
// dotted with every activation row, which is what makes prefill cheaper per token than decode.
// Q5_K differs only by the fifth bit of each value, taken from qh.
template <typename Block, int NX>
void q45_K_rows(int64_t n, const Block* a, const std::byte* x, uint64_t x_stride, float* out) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5K>;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  const BlockQ8K* b[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) {
    b[t] = reinterpret_cast<const BlockQ8K*>(x + t * x_stride);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const ScaleMin sm = unpack_scale_min(a[i].scales);
    const float d = fp16_scalar(a[i].d);
    const float dmin = fp16_scalar(a[i].dmin);
    __m256i sumi[NX];
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      // The min term goes straight into the accumulator, negated.
      const __m256i min_prod = _mm256_madd_epi16(sm.mins, load256(b[t][i].bsums));
      acc[t] =
          _mm256_fnmadd_ps(_mm256_set1_ps(b[t][i].d * dmin), _mm256_cvtepi32_ps(min_prod), acc[t]);
      sumi[t] = _mm256_setzero_si256();
    }
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(a[i].qh);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(a[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifthBit) {
        // Bit 2c / 2c+1 of each qh byte, moved to bit 4 (masking to bit 0 first keeps the 16-bit
        // shifts from leaking bits across bytes).
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      const __m256i s_lo = broadcast16(sm.scales, 2 * c);
      const __m256i s_hi = broadcast16(sm.scales, 2 * c + 1);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        sumi[t] = _mm256_add_epi32(sumi[t], scaled_dot_v(lo, b[t][i].qs + 64 * c, s_lo));
        sumi[t] = _mm256_add_epi32(sumi[t], scaled_dot_v(hi, b[t][i].qs + 64 * c + 32, s_hi));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(b[t][i].d * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) out[t] = hsum(acc[t]);
}

template <typename Block>
void q45_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x, float* out) {
  const auto* a = static_cast<const Block*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { q45_K_rows<Block, decltype(nx)::value>(n, a, xb, x_stride, out); });
}

}  // namespace

float vec_dot_q4_K(int64_t n, const void* w, const void* x) {
  float out;
  q45_K_rows<BlockQ4K, 1>(n, static_cast<const BlockQ4K*>(w), static_cast<const std::byte*>(x), 0,
                          &out);
  return out;
}

void vec_dot_q4_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  q45_K_multi<BlockQ4K>(n, w, x, x_stride, n_x, out);
}

float vec_dot_q5_K(int64_t n, const void* w, const void* x) {
  float out;
  q45_K_rows<BlockQ5K, 1>(n, static_cast<const BlockQ5K*>(w), static_cast<const std::byte*>(x), 0,
                          &out);
  return out;
}

void vec_dot_q5_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  q45_K_multi<BlockQ5K>(n, w, x, x_stride, n_x, out);
}

namespace {

// Q6_K rows against NX activation rows at once (see q4_K_rows).
template <int NX>
void q6_K_rows(int64_t n, const BlockQ6K* a, const std::byte* x, uint64_t x_stride, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  const BlockQ8K* b[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) {
    b[t] = reinterpret_cast<const BlockQ8K*>(x + t * x_stride);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = a[i].scales;
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    __m256i sumi[NX];
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      // Values are stored +32; subtract 32 * scale * group sum once per super-block.
      sumi[t] = _mm256_setr_epi32(-32 * bsum_dot(sc16, b[t][i].bsums), 0, 0, 0, 0, 0, 0, 0);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(a[i].ql + 64 * h);
      const __m256i ql1 = load256(a[i].ql + 64 * h + 32);
      const __m256i qh = load256(a[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4)),
      };
      const int8_t* s = sc + 8 * h;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i s2 = _mm256_set_m128i(_mm_set1_epi16(s[2 * k + 1]), _mm_set1_epi16(s[2 * k]));
#pragma GCC unroll 4
        for (int t = 0; t < NX; ++t) {
          sumi[t] =
              _mm256_add_epi32(sumi[t], scaled_dot_v(q[k], b[t][i].qs + 128 * h + 32 * k, s2));
        }
      }
    }
    const float d = fp16_scalar(a[i].d);
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(b[t][i].d * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) out[t] = hsum(acc[t]);
}

}  // namespace

float vec_dot_q6_K(int64_t n, const void* w, const void* x) {
  float out;
  q6_K_rows<1>(n, static_cast<const BlockQ6K*>(w), static_cast<const std::byte*>(x), 0, &out);
  return out;
}

void vec_dot_q6_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  const auto* a = static_cast<const BlockQ6K*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { q6_K_rows<decltype(nx)::value>(n, a, xb, x_stride, out); });
}

float vec_dot_q2_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    prefetch_weights(a + i);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales));
    const __m256i mins16 =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
    acc_min += b[i].d * fp16_scalar(a[i].dmin) * static_cast<float>(bsum_dot(mins16, b[i].bsums));
    const uint8_t* sc = a[i].scales;
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(a[i].qs + 32 * h);
      const int8_t* q8 = b[i].qs + 128 * h;
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), low2);
        const int g = 8 * h + 2 * p;
        sumi = _mm256_add_epi32(sumi, scaled_dot2(v, q8 + 32 * p, sc[g] & 0xF, sc[g + 1] & 0xF));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * fp16_scalar(a[i].d)), _mm256_cvtepi32_ps(sumi),
                          acc);
  }
  return hsum(acc) - acc_min;
}

float vec_dot_q3_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    alignas(16) int8_t sc[16];
    const __m128i sc8 = unpack_q3k_scales(a[i].scales);
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), sc8);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    // Values are computed as q + 4 * hbit (0..7); the -4 offset goes through the group sums.
    __m256i sumi = _mm256_setr_epi32(-4 * bsum_dot(sc16, b[i].bsums), 0, 0, 0, 0, 0, 0, 0);
    const __m256i hm = load256(a[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(a[i].qs + 32 * h);
      const int8_t* q8 = b[i].qs + 128 * h;
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        const __m256i hbit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + p), one);
        const __m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * p), low2),
                                          _mm256_slli_epi16(hbit, 2));
        const int g = 8 * h + 2 * p;
        sumi = _mm256_add_epi32(sumi, scaled_dot2(v, q8 + 32 * p, sc[g], sc[g + 1]));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * fp16_scalar(a[i].d)), _mm256_cvtepi32_ps(sumi),
                          acc);
  }
  return hsum(acc);
}

}  // namespace sluice::avx2
