// AVX-512 twins of the lattice i-quant GEMM unpackers of gemm_unpack.cpp (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): the same bytes, scales and order, which a unit test checks. The portable ones
// write each value through a byte loop with a sign branch, which costs more than the GEMM itself
// on an expert batch of a few dozen tokens; here the grid lookups of a 32-value sub-block fill
// one 256-bit vector and the 32 sign bits become an AVX-512 mask, so the unpacked byte
// 64 +- magnitude is one masked subtract (IQ1: 8 * grid value + delta + 9, two vector ops).
#include <cstring>

#include "quant/blocks.h"
#include "quant/gemm.h"
#include "quant/iq_grids.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

namespace {

using iq::kSignsIq2;

// u[0..31] = 64 + m (sign bit clear) or 64 - m (set): the offset-64 bytes of gemm.h.
inline void put_signed(__m256i magnitudes, uint32_t negative, uint8_t* u) {
  const __m256i c64 = _mm256_set1_epi8(64);
  const __m256i v = _mm256_mask_sub_epi8(_mm256_add_epi8(magnitudes, c64),
                                         static_cast<__mmask32>(negative), c64, magnitudes);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), v);
}

// The four 7-bit sign codes of an IQ2_XXS / IQ3_XXS sub-block (bits 0..27 of meta), each
// completed to 8 signs by its parity bit, as 32 sign bits.
inline uint32_t parity_signs(uint32_t meta) {
  return kSignsIq2[meta & 127] | (kSignsIq2[(meta >> 7) & 127] << 8) |
         (kSignsIq2[(meta >> 14) & 127] << 16) | (static_cast<uint32_t>(kSignsIq2[(meta >> 21) & 127]) << 24);
}

inline __m256i grid4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return _mm256_set_epi64x(static_cast<int64_t>(d), static_cast<int64_t>(c),
                           static_cast<int64_t>(b), static_cast<int64_t>(a));
}

// u[0..31] = 8 * g + (delta byte) for 32 IQ1 grid values g in -1..1 (signed bytes); delta holds
// 9 + 1 or 9 - 1 per value. The 16-bit shift leaks the low byte's top bits into the high byte's
// bottom three, which the mask clears (8g has them zero).
inline void put_iq1(__m256i grid, __m256i delta, uint8_t* u) {
  const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(grid, 3), _mm256_set1_epi8(static_cast<char>(0xF8)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), _mm256_add_epi8(g8, delta));
}

constexpr int64_t kIq1Plus = 0x0A0A0A0A0A0A0A0ALL;   // 9 + 1
constexpr int64_t kIq1Minus = 0x0808080808080808LL;  // 9 - 1

}  // namespace

void unpack_iq2_xxs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2XXS& b = static_cast<const BlockIQ2XXS*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t idx, meta;
    std::memcpy(&idx, b.qs + 4 * ib, 4);
    std::memcpy(&meta, b.qs + 4 * ib + 2, 4);
    scale[ib] = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
    const uint64_t* g = iq::kIq2xxsGrid;
    put_signed(grid4(g[idx & 0xFF], g[(idx >> 8) & 0xFF], g[(idx >> 16) & 0xFF], g[idx >> 24]),
               parity_signs(meta), u + 32 * ib);
  }
}

void unpack_iq2_xs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2XS& b = static_cast<const BlockIQ2XS*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  const uint64_t* g = iq::kIq2xsGrid;
  for (int ib = 0; ib < 8; ++ib) {
    scale[2 * ib] = d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f;
    scale[2 * ib + 1] = d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f;
    const uint16_t* q = b.qs + 4 * ib;
    const uint32_t neg = kSignsIq2[q[0] >> 9] | (kSignsIq2[q[1] >> 9] << 8) |
                         (kSignsIq2[q[2] >> 9] << 16) |
                         (static_cast<uint32_t>(kSignsIq2[q[3] >> 9]) << 24);
    put_signed(grid4(g[q[0] & 511], g[q[1] & 511], g[q[2] & 511], g[q[3] & 511]), neg,
               u + 32 * ib);
  }
}

void unpack_iq2_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2S& b = static_cast<const BlockIQ2S*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  const uint64_t* g = iq::kIq2sGrid;
  for (int ib = 0; ib < 8; ++ib) {
    scale[2 * ib] = d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f;
    scale[2 * ib + 1] = d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f;
    const uint8_t* qs = b.qs + 4 * ib;
    const int qh = b.qh[ib];
    uint32_t neg;  // IQ2_S stores all eight signs of a group explicitly
    std::memcpy(&neg, b.qs + 32 + 4 * ib, 4);
    put_signed(grid4(g[qs[0] | ((qh << 8) & 0x300)], g[qs[1] | ((qh << 6) & 0x300)],
                     g[qs[2] | ((qh << 4) & 0x300)], g[qs[3] | ((qh << 2) & 0x300)]),
               neg, u + 32 * ib);
  }
}

void unpack_iq3_xxs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ3XXS& b = static_cast<const BlockIQ3XXS*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  const uint32_t* g = iq::kIq3xxsGrid;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t meta;
    std::memcpy(&meta, b.qs + 64 + 4 * ib, 4);
    scale[ib] = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
    const uint8_t* qs = b.qs + 8 * ib;
    const __m256i mag = _mm256_set_epi32(
        static_cast<int>(g[qs[7]]), static_cast<int>(g[qs[6]]), static_cast<int>(g[qs[5]]),
        static_cast<int>(g[qs[4]]), static_cast<int>(g[qs[3]]), static_cast<int>(g[qs[2]]),
        static_cast<int>(g[qs[1]]), static_cast<int>(g[qs[0]]));
    put_signed(mag, parity_signs(meta), u + 32 * ib);
  }
}

void unpack_iq3_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ3S& b = static_cast<const BlockIQ3S*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  const uint32_t* g = iq::kIq3sGrid;
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    scale[ib] = d * static_cast<float>(1 + 2 * s);
    const uint8_t* qs = b.qs + 8 * ib;
    const int qh = b.qh[ib];
    int v[8];
    for (int k = 0; k < 8; ++k) v[k] = static_cast<int>(g[qs[k] | (((qh >> k) & 1) << 8)]);
    uint32_t neg;
    std::memcpy(&neg, b.signs + 4 * ib, 4);
    put_signed(_mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]), neg,
               u + 32 * ib);
  }
}

void unpack_iq1_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ1S& b = static_cast<const BlockIQ1S*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  const uint64_t* g = iq::kIq1sGrid;
  for (int ib = 0; ib < 8; ++ib) {
    const int qh = b.qh[ib];
    scale[ib] = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * 0.125f;
    const uint8_t* qs = b.qs + 4 * ib;
    put_iq1(grid4(g[qs[0] | ((qh << 8) & 0x700)], g[qs[1] | ((qh << 5) & 0x700)],
                  g[qs[2] | ((qh << 2) & 0x700)], g[qs[3] | ((qh >> 1) & 0x700)]),
            _mm256_set1_epi64x(qh & 0x8000 ? kIq1Minus : kIq1Plus), u + 32 * ib);
  }
}

void unpack_iq1_m(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ1M& b = static_cast<const BlockIQ1M*>(row)[unit];
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const float d = _cvtsh_ss(d_bits);
  const uint64_t* g = iq::kIq1sGrid;
  for (int ib = 0; ib < 8; ++ib) {
    const int shift = 6 * (ib % 2);
    scale[2 * ib] = d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1) * 0.125f;
    scale[2 * ib + 1] = d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1) * 0.125f;
    const uint8_t* qs = b.qs + 4 * ib;
    // One nibble of qh per group of 8: three index bits and the delta's sign.
    const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
    const int nib[4] = {h0 & 0xF, h0 >> 4, h1 & 0xF, h1 >> 4};
    put_iq1(grid4(g[qs[0] | ((nib[0] & 7) << 8)], g[qs[1] | ((nib[1] & 7) << 8)],
                  g[qs[2] | ((nib[2] & 7) << 8)], g[qs[3] | ((nib[3] & 7) << 8)]),
            _mm256_set_epi64x(nib[3] & 8 ? kIq1Minus : kIq1Plus, nib[2] & 8 ? kIq1Minus : kIq1Plus,
                              nib[1] & 8 ? kIq1Minus : kIq1Plus, nib[0] & 8 ? kIq1Minus : kIq1Plus),
            u + 32 * ib);
  }
}

}  // namespace sluice::avx512
