// AVX-512 VNNI dot of Q8_0 weights with Q8_0 activations (decode: one to four activation rows per
// weight row, and tiles of four weight rows). Scalar twin: scalar::vec_dot_q8_0; tests compare the
// two. Compiled with AVX-512 F/BW/VL/VNNI flags; only reachable after dispatch has checked the CPU.
//
// Q8_0 is the attention, shared-expert and output-head type of 2-bit DeepSeek builds, so its
// single-row dot is most of a decode step's compute there. The AVX2 kernel handles one 32-value
// block per step with one float accumulator, which bounds it by the multiply-add latency; here
// two blocks share one 512-bit vpdpbusd, four blocks make a step and two accumulators alternate.
// Per-block integer sums are exact; only the order of the float terms differs from the scalar
// kernel.
//
// Where rows are short (a fine-grained expert's 256-value gate and 96-value down rows), a call and
// a horizontal sum come with every few dots, so the tile kernel takes four weight rows per call
// and sums their accumulators with one shuffle tree (sluice-moe-128, 1 thread, interleaved: one-row
// decode 2-3 % faster, drafted decode of repeated code 1.79-1.91x plain against 1.32-1.79x). Every
// output goes through the same operations in the same order whatever the tile (the tree pairs lanes
// as _mm512_reduce_add_ps does), so tiles, multi-row calls and single dots agree bit for bit, as
// ExactRows requires.
#include <cmath>
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

// _mm512_reduce_add_ps of four vectors at once, lanes paired as it pairs them (l + l⁺⁸, then + l⁺⁴,
// then + l⁺², then + l⁺¹; GCC's avx512fintrin.h), two vectors per shuffle.
__m128 sum_lanes4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __m512 c01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  const __m512 c23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  // 128-bit lane j of d holds vector j's four sums of l + l⁺⁸ + (l + 4) + (l + 4)⁺⁸.
  const __m512 d =
      _mm512_add_ps(_mm512_shuffle_f32x4(c01, c23, 0x88), _mm512_shuffle_f32x4(c01, c23, 0xDD));
  const __m512 e = _mm512_add_ps(d, _mm512_shuffle_ps(d, d, 0x4E));
  const __m512 f = _mm512_add_ps(e, _mm512_shuffle_ps(e, e, 0xB1));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), f));
}

// The integer sum of dot_one's eight lanes (exact in any order).
int sum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// out[r * NX + t] = dot of weight row r (w + r * w_stride) with activation row t (x + t *
// x_stride). Each output has two accumulators: blocks 4j and 4j + 1 feed the first, 4j + 2 and 4j
// + 3 the second; an odd pair left after the steps of four alternates between them; a last odd
// block is added to the lane sum.
template <int NW, int NX>
void q8_0_tile(int64_t n, const std::byte* w, uint64_t w_stride, const std::byte* x,
               uint64_t x_stride, float* out) {
  const int64_t nb = n / kQK;
  const BlockQ8_0* a[NW];
  const BlockQ8_0* b[NX];
  __m512 acc[NW][NX][2];
  for (int r = 0; r < NW; ++r) {
    a[r] = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride);
    for (int t = 0; t < NX; ++t) acc[r][t][0] = acc[r][t][1] = _mm512_setzero_ps();
  }
  for (int t = 0; t < NX; ++t) b[t] = reinterpret_cast<const BlockQ8_0*>(x + t * x_stride);
  int64_t i = 0;
  // Four blocks per step: their eight fp16 scales (weights', then each row's) are widened by one
  // conversion and multiplied as one vector, then permuted to the lanes of each block pair,
  // instead of eight scalar conversions and broadcasts.
  const __m512i lanes01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i lanes23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  for (; i + 4 <= nb; i += 4) {
#pragma GCC unroll 4
    for (int r = 0; r < NW; ++r) {
      prefetch_weights(a[r] + i);
      prefetch_weights(a[r] + i + 2);
      const __m512i wv0 = load_pair(a[r] + i), wv1 = load_pair(a[r] + i + 2);
      const __m512i wabs0 = _mm512_abs_epi8(wv0), wabs1 = _mm512_abs_epi8(wv1);
      const __mmask64 wneg0 = _mm512_movepi8_mask(wv0), wneg1 = _mm512_movepi8_mask(wv1);
      const __m128 dw = _mm_cvtph_ps(scales4(a[r] + i));
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_cvtph_ps(scales4(b[t] + i))));
        const __m512i s0 = dot_pair(wabs0, wneg0, load_pair(b[t] + i));
        const __m512i s1 = dot_pair(wabs1, wneg1, load_pair(b[t] + i + 2));
        acc[r][t][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes01, d), _mm512_cvtepi32_ps(s0),
                                       acc[r][t][0]);
        acc[r][t][1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes23, d), _mm512_cvtepi32_ps(s1),
                                       acc[r][t][1]);
      }
    }
  }
  int k = 0;
  for (; i + 2 <= nb; i += 2, k ^= 1) {
#pragma GCC unroll 4
    for (int r = 0; r < NW; ++r) {
      prefetch_weights(a[r] + i);
      const __m512i wv = load_pair(a[r] + i);
      const __m512i wabs = _mm512_abs_epi8(wv);
      const __mmask64 wneg = _mm512_movepi8_mask(wv);
      const float dw0 = fp16_scalar(a[r][i].d), dw1 = fp16_scalar(a[r][i + 1].d);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        const __m512i sum = dot_pair(wabs, wneg, load_pair(b[t] + i));
        // Lanes 0-7 hold block i's partial sums, lanes 8-15 block i + 1's.
        const __m512 scale =
            _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dw0 * fp16_scalar(b[t][i].d)),
                                 _mm512_set1_ps(dw1 * fp16_scalar(b[t][i + 1].d)));
        acc[r][t][k] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum), acc[r][t][k]);
      }
    }
  }
  // The lane sums, four outputs per shuffle tree where the tile has four.
  constexpr int kOut = NW * NX;
  __m512 s[kOut];
  for (int o = 0; o < kOut; ++o)
    s[o] = _mm512_add_ps(acc[o / NX][o % NX][0], acc[o / NX][o % NX][1]);
  int o = 0;
  for (; o + 4 <= kOut; o += 4)
    _mm_storeu_ps(out + o, sum_lanes4(s[o], s[o + 1], s[o + 2], s[o + 3]));
  for (; o < kOut; ++o) out[o] = _mm512_reduce_add_ps(s[o]);
  if (i < nb) {
    for (int r = 0; r < NW; ++r) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r][i].qs));
      const float dw = fp16_scalar(a[r][i].d);
      for (int t = 0; t < NX; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[t][i].qs));
        const float isum = static_cast<float>(sum_epi32(dot_one(wv, xv)));
        // Fused explicitly, so the compiler's contraction choice cannot differ between tiles.
        out[r * NX + t] = std::fma(dw * fp16_scalar(b[t][i].d), isum, out[r * NX + t]);
      }
    }
  }
}

}  // namespace

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  float out;
  q8_0_tile<1, 1>(n, static_cast<const std::byte*>(w), 0, static_cast<const std::byte*>(x), 0,
                  &out);
  return out;
}

void vec_dot_q8_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  const auto* wb = static_cast<const std::byte*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x,
                 [&](auto nx) { q8_0_tile<1, decltype(nx)::value>(n, wb, 0, xb, x_stride, out); });
}

void vec_dot_q8_0_tile(int64_t n, const void* w, uint64_t w_stride, const void* x,
                       uint64_t x_stride, int n_x, float* y, uint64_t y_stride) {
  const auto* wb = static_cast<const std::byte*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) {
    constexpr int NX = decltype(nx)::value;
    // Four weight rows keep 8·NX accumulators; at three and four activation rows that would pass
    // the 32 registers, so those tiles run as two halves of two weight rows.
    constexpr int NW = NX <= 2 ? 4 : 2;
    float out[kDotTileRows * NX];
    for (int r0 = 0; r0 < kDotTileRows; r0 += NW)
      q8_0_tile<NW, NX>(n, wb + r0 * w_stride, w_stride, xb, x_stride, out + r0 * NX);
    for (int r = 0; r < kDotTileRows; ++r)
      for (int t = 0; t < NX; ++t) y[t * y_stride + r] = out[r * NX + t];
  });
}

}  // namespace sluice::avx512
