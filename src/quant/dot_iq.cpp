// Scalar dot kernels for the lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M) against Q8_K activations: the reference for the SIMD kernels and the SLUICE_NO_SIMD path.
// Layouts are described in dequant_iq.cpp. Each 32-value sub-block's sum of grid value × sign ×
// q8 is an exact integer, multiplied by the sub-block's odd integer scale (2s+1) and summed per
// super-block; one float multiply by d·d8 (and the type's constant: 1/8 for IQ2, 1/4 for IQ3_XXS)
// finishes the block. IQ1's ±1/8 delta is applied through the activations' sums in the same way.
#include <cstring>

#include "quant/dequant.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"

namespace sluice::scalar {

using iq::grid_byte;

namespace {

// Σ_j grid[j] · q8[j] · sign_j over one 8-value IQ2 group (sign bit set = negative).
int iq2_group(uint64_t point, uint8_t signs, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) {
    const int v = grid_byte(point, j) * q8[j];
    s += (signs >> j) & 1 ? -v : v;
  }
  return s;
}

// The same for two 4-value IQ3 points making up one group.
int iq3_group(uint32_t p1, uint32_t p2, uint8_t signs, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 4; ++j) {
    const int v1 = grid_byte(p1, j) * q8[j];
    const int v2 = grid_byte(p2, j) * q8[j + 4];
    s += (signs >> j) & 1 ? -v1 : v1;
    s += (signs >> (j + 4)) & 1 ? -v2 : v2;
  }
  return s;
}

// Σ grid[j] · q8[j] for an IQ1 point (signed bytes −1, 0, +1).
int iq1_group(uint64_t point, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += static_cast<int8_t>(grid_byte(point, j)) * q8[j];
  return s;
}

int sum8(const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += q8[j];
  return s;
}

}  // namespace

float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ2XXS*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    int bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t idx, meta;
      std::memcpy(&idx, a[i].qs + 4 * ib, 4);
      std::memcpy(&meta, a[i].qs + 4 * ib + 2, 4);
      int sumi = 0;
      for (int g = 0; g < 4; ++g, q8 += 8)
        sumi += iq2_group(iq::kIq2xxsGrid[(idx >> (8 * g)) & 0xFF],
                          iq::kSignsIq2[(meta >> (7 * g)) & 127], q8);
      bsum += sumi * static_cast<int>(2 * (meta >> 28) + 1);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d * static_cast<float>(bsum);
  }
  return 0.125f * s;
}

float vec_dot_iq2_xs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ2XS*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    int bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      int half[2] = {0, 0};
      for (int g = 0; g < 4; ++g, q8 += 8) {
        const uint16_t q = a[i].qs[4 * ib + g];
        half[g / 2] += iq2_group(iq::kIq2xsGrid[q & 511], iq::kSignsIq2[q >> 9], q8);
      }
      bsum += half[0] * (2 * (a[i].scales[ib] & 0xF) + 1) + half[1] * (2 * (a[i].scales[ib] >> 4) + 1);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d * static_cast<float>(bsum);
  }
  return 0.125f * s;
}

float vec_dot_iq2_s(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ2S*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    const uint8_t* qs = a[i].qs;
    const uint8_t* signs = a[i].qs + 32;
    int bsum = 0;
    for (int ib = 0; ib < 8; ++ib, qs += 4, signs += 4) {
      int half[2] = {0, 0};
      for (int g = 0; g < 4; ++g, q8 += 8) {
        const int index = qs[g] | (((a[i].qh[ib] >> (2 * g)) & 3) << 8);
        half[g / 2] += iq2_group(iq::kIq2sGrid[index], signs[g], q8);
      }
      bsum += half[0] * (2 * (a[i].scales[ib] & 0xF) + 1) + half[1] * (2 * (a[i].scales[ib] >> 4) + 1);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d * static_cast<float>(bsum);
  }
  return 0.125f * s;
}

float vec_dot_iq3_xxs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ3XXS*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    const uint8_t* qs = a[i].qs;
    int bsum = 0;
    for (int ib = 0; ib < 8; ++ib, qs += 8) {
      uint32_t meta;
      std::memcpy(&meta, a[i].qs + 64 + 4 * ib, 4);
      int sumi = 0;
      for (int g = 0; g < 4; ++g, q8 += 8)
        sumi += iq3_group(iq::kIq3xxsGrid[qs[2 * g]], iq::kIq3xxsGrid[qs[2 * g + 1]],
                          iq::kSignsIq2[(meta >> (7 * g)) & 127], q8);
      bsum += sumi * static_cast<int>(2 * (meta >> 28) + 1);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d * static_cast<float>(bsum);
  }
  return 0.25f * s;
}

float vec_dot_iq3_s(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ3S*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    int bsum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = a[i].qs + 8 * ib;
      const uint8_t* signs = a[i].signs + 4 * ib;
      const uint8_t qh = a[i].qh[ib];
      int sumi = 0;
      for (int g = 0; g < 4; ++g, q8 += 8)
        sumi += iq3_group(iq::kIq3sGrid[qs[2 * g] | (((qh >> (2 * g)) & 1) << 8)],
                          iq::kIq3sGrid[qs[2 * g + 1] | (((qh >> (2 * g + 1)) & 1) << 8)], signs[g],
                          q8);
      bsum += sumi * (2 * ((a[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d * static_cast<float>(bsum);
  }
  return s;
}

float vec_dot_iq1_s(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ1S*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* q8 = b[i].qs;
    int grid_sum = 0;   // Σ ls · grid · q8
    int delta_sum = 0;  // Σ ls · ±1 · q8, scaled by kIq1Delta at the end
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = a[i].qh[ib];
      const int ls = 2 * ((qh >> 12) & 7) + 1;
      int sumi = 0;
      for (int g = 0; g < 4; ++g, q8 += 8)
        sumi += iq1_group(iq::kIq1sGrid[a[i].qs[4 * ib + g] | (((qh >> (3 * g)) & 7) << 8)], q8);
      const int q8sum = b[i].bsums[2 * ib] + b[i].bsums[2 * ib + 1];
      grid_sum += ls * sumi;
      delta_sum += ls * (qh & 0x8000 ? -q8sum : q8sum);
    }
    s += fp16_to_fp32(a[i].d) * b[i].d *
         (static_cast<float>(grid_sum) + iq::kIq1Delta * static_cast<float>(delta_sum));
  }
  return s;
}

float vec_dot_iq1_m(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ1M*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, a[i].scales, sizeof sc);
    const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                  ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const int8_t* q8 = b[i].qs;
    int grid_sum = 0;
    int delta_sum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int shift = 6 * (ib % 2);
      const int ls[2] = {2 * ((sc[ib / 2] >> shift) & 7) + 1, 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1};
      for (int g = 0; g < 4; ++g, q8 += 8) {
        const uint8_t qh = a[i].qh[2 * ib + g / 2];
        const int hi_shift = 4 * (g % 2);
        const int index = a[i].qs[4 * ib + g] | (((qh >> hi_shift) & 7) << 8);
        const int q8sum = sum8(q8);
        grid_sum += ls[g / 2] * iq1_group(iq::kIq1sGrid[index], q8);
        delta_sum += ls[g / 2] * ((qh >> hi_shift) & 8 ? -q8sum : q8sum);
      }
    }
    s += fp16_to_fp32(d_bits) * b[i].d *
         (static_cast<float>(grid_sum) + iq::kIq1Delta * static_cast<float>(delta_sum));
  }
  return s;
}

}  // namespace sluice::scalar
