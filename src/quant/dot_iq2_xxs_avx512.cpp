// AVX-512 VNNI dot of IQ2_XXS weights with Q8_K activations, one to four activation rows per
// weight row. Scalar twin: scalar::vec_dot_iq2_xxs; tests compare the two. Compiled with AVX-512
// F/BW/VL/VNNI flags; only reachable after dispatch has checked the CPU.
//
// IQ2_XXS is the routed gate/up type of 2-bit DeepSeek builds. The AVX2 kernel builds each
// 32-value sub-block from eight scalar table loads (grid points and sign masks) and is bound by
// that; here two sub-blocks (64 values) take one vector of their eight grid points, and the signs
// become a 64-bit mask computed from the stored bits (the eighth sign of each group is the parity
// of the other seven), applied to the activations with one masked subtract. Sub-block sums are
// exact integers as in the scalar kernel; only the order of the float terms differs.
#include <cstddef>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

using namespace avx2_detail;

namespace {

// The eight 7-bit sign fields of two sub-blocks' meta words (bits 0-27 of each) as eight bytes,
// each completed with its even-parity eighth bit: bit j of byte g is set when value 8g + j of the
// pair is negative, which is the 64-bit lane mask the masked subtract takes. One pdep spreads the
// 56 stored bits over the bytes; XOR-folding leaves each byte's parity in its bit 0 (bits shifted
// in from the next byte land above bit 0 and are masked off).
uint64_t sign_mask(uint32_t meta0, uint32_t meta1) {
  const uint64_t fields =
      (meta0 & 0x0FFFFFFFu) | (static_cast<uint64_t>(meta1 & 0x0FFFFFFFu) << 28);
  const uint64_t m = _pdep_u64(fields, 0x7F7F7F7F7F7F7F7Full);
  uint64_t p = m ^ (m >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return m | ((p & 0x0101010101010101ull) << 7);
}

template <int NX>
void iq2_xxs_rows(int64_t n, const void* w, const std::byte* x, uint64_t x_stride, float* out) {
  const auto* a = static_cast<const BlockIQ2XXS*>(w);
  const auto* grid = reinterpret_cast<const long long*>(iq::kIq2xxsGrid);
  __m512 acc[NX];
  for (int t = 0; t < NX; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    prefetch_weights(a + i);
    const BlockQ8K* b[NX];
    __m512i sum[NX];
    for (int t = 0; t < NX; ++t) {
      b[t] = reinterpret_cast<const BlockQ8K*>(x + t * x_stride) + i;
      sum[t] = _mm512_setzero_si512();
    }
    for (int ib = 0; ib < 8; ib += 2) {
      // Sub-block ib: grid indices in bytes 0-3, meta (signs, scale) in bytes 4-7; ib + 1 follows.
      uint32_t q[4];
      std::memcpy(q, a[i].qs + 4 * ib, sizeof q);
      // Eight scalar table loads: on Zen 4 a 64-bit gather is microcoded and costs more than
      // the loads it replaces (bench_matmul BM_Types: the gather kernel ran at 0.57x AVX2).
      const auto* g = reinterpret_cast<const uint8_t*>(a[i].qs + 4 * ib);  // ib: 0-3, ib+1: 8-11
      const __m512i points = _mm512_set_epi64(grid[g[11]], grid[g[10]], grid[g[9]], grid[g[8]],
                                              grid[g[3]], grid[g[2]], grid[g[1]], grid[g[0]]);
      const __mmask64 neg = sign_mask(q[1], q[3]);
      // Lanes 0-7 sum sub-block ib, lanes 8-15 sub-block ib + 1: each takes its odd scale.
      const __m512i scale =
          _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(static_cast<int>(2 * (q[1] >> 28) + 1)),
                                  _mm512_set1_epi32(static_cast<int>(2 * (q[3] >> 28) + 1)));
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        const __m512i q8 = _mm512_loadu_si512(b[t]->qs + 32 * ib);
        const __m512i signed_q8 = _mm512_mask_sub_epi8(q8, neg, _mm512_setzero_si512(), q8);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), points, signed_q8);
        sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dot, scale));
      }
    }
    const float d = fp16_scalar(a[i].d);
    for (int t = 0; t < NX; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * b[t]->d), _mm512_cvtepi32_ps(sum[t]), acc[t]);
  }
  for (int t = 0; t < NX; ++t) out[t] = 0.125f * _mm512_reduce_add_ps(acc[t]);
}

}  // namespace

float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x) {
  float out;
  iq2_xxs_rows<1>(n, w, static_cast<const std::byte*>(x), 0, &out);
  return out;
}

void vec_dot_iq2_xxs_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                           float* out) {
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { iq2_xxs_rows<decltype(nx)::value>(n, w, xb, x_stride, out); });
}

}  // namespace sluice::avx512
