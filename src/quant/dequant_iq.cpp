// Scalar dequantization of the non-linear types: the lattice i-quants (IQ1..IQ3, values looked up
// in the grids of iq_grids.h) and the table-valued 4-bit types (IQ4_NL, IQ4_XS, MXFP4). Scales
// are formed in the same order as GGML's (scale expression first, value last) for bit-exactness.
//
// Layouts in words (d is a half-precision super-scale; a "group" is 8 values, a "sub-block" 32):
//   IQ2_XXS  d, 32 uint16 = per sub-block two 32-bit words: the first holds four 8-bit grid indexes
//            (kIq2xxsGrid), the second four 7-bit sign codes (kSignsIq2) in bits 0..27 and a 4-bit
//            scale s in bits 28..31; x = d*(0.5+s)/4 * grid * sign.
//   IQ2_XS   d, 32 uint16 (9-bit kIq2xsGrid index | 7-bit sign code << 9), 8 scale bytes holding
//            two 4-bit scales each (low nibble: groups 0-1 of the sub-block, high: groups 2-3).
//   IQ2_S    d, 64 bytes: 32 low 8 bits of the 10-bit kIq2sGrid indexes then 32 bytes of plain
//            8-bit signs, 8 bytes qh (2 high index bits per group), 8 scale bytes as IQ2_XS.
//   IQ3_XXS  d, 64 bytes of 8-bit kIq3xxsGrid indexes (two 4-value points per group), then per
//            sub-block a 32-bit word with four 7-bit sign codes and a 4-bit scale s on top;
//            x = d*(0.5+s)/2 * grid * sign.
//   IQ3_S    d, 64 bytes low index bits, 8 bytes qh (ninth index bit, one per 4-value point), 32
//            bytes plain signs, 4 bytes of 4-bit scales s (one per sub-block); x = d*(1+2s)*grid*sign.
//   IQ1_S    d, 32 bytes low index bits, 8 uint16 qh: per sub-block bits 0..11 the 3 high bits of
//            each group's 11-bit kIq1sGrid index, bits 12..14 scale s, bit 15 the sign of the delta;
//            x = d*(2s+1) * (grid ± kIq1Delta).
//   IQ1_M    32 bytes low index bits, 16 bytes qh (per group pair: 3 high index bits and a delta
//            sign bit per nibble), 8 bytes of four uint16 whose low 12 bits hold 3-bit scales (one
//            per 16 values) and whose top nibbles together form the half-precision d.
//   IQ4_NL   d, 16 bytes of nibbles (low: values 0..15, high: 16..31) into kValuesIq4nl; x = d*v.
//   IQ4_XS   d, scales_h (2 high bits per sub-block), 4 bytes scales_l (4 low bits per sub-block),
//            128 bytes of nibbles as IQ4_NL per sub-block; x = d*(scale-32)*v.
//   MXFP4    E8M0 exponent byte e, 16 bytes of nibbles (as IQ4_NL) into kValuesMxfp4;
//            x = 2^(e-127) * e2m1 value.
#include <cstring>

#include "quant/dequant.h"
#include "quant/dequant_families.h"
#include "quant/iq_grids.h"

namespace sluice::dequant_detail {

using iq::grid_byte;

namespace {

float sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

// Eight values of an IQ2 grid point with their signs.
void put_iq2_group(uint64_t point, uint8_t signs, float scale, float* y) {
  for (int j = 0; j < 8; ++j)
    y[j] = scale * static_cast<float>(grid_byte(point, j)) * sign_of(signs, j);
}

void put_iq1_group(uint64_t point, float scale, float delta, float* y) {
  for (int j = 0; j < 8; ++j)
    y[j] = scale * (static_cast<float>(static_cast<int8_t>(grid_byte(point, j))) + delta);
}

}  // namespace

void iq2_xxs(const BlockIQ2XXS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t idx, meta;  // memcpy: the pair of uint16 is read as two little-endian 32-bit words
      std::memcpy(&idx, x[i].qs + 4 * ib, 4);
      std::memcpy(&meta, x[i].qs + 4 * ib + 2, 4);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
      for (int g = 0; g < 4; ++g, y += 8)
        put_iq2_group(iq::kIq2xxsGrid[(idx >> (8 * g)) & 0xFF], iq::kSignsIq2[(meta >> (7 * g)) & 127],
                      db, y);
    }
  }
}

void iq2_xs(const BlockIQ2XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint16_t q = x[i].qs[4 * ib + g];
        put_iq2_group(iq::kIq2xsGrid[q & 511], iq::kSignsIq2[q >> 9], db[g / 2], y);
      }
    }
  }
}

void iq2_s(const BlockIQ2S* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* signs = x[i].qs + 32;
    for (int ib = 0; ib < 8; ++ib, qs += 4, signs += 4) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int g = 0; g < 4; ++g, y += 8) {
        const int index = qs[g] | (((x[i].qh[ib] >> (2 * g)) & 3) << 8);
        put_iq2_group(iq::kIq2sGrid[index], signs[g], db[g / 2], y);
      }
    }
  }
}

void iq3_xxs(const BlockIQ3XXS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 8) {
      uint32_t meta;
      std::memcpy(&meta, x[i].qs + 64 + 4 * ib, 4);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint8_t signs = iq::kSignsIq2[(meta >> (7 * g)) & 127];
        const uint32_t p1 = iq::kIq3xxsGrid[qs[2 * g]];
        const uint32_t p2 = iq::kIq3xxsGrid[qs[2 * g + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(grid_byte(p1, j)) * sign_of(signs, j);
          y[j + 4] = db * static_cast<float>(grid_byte(p2, j)) * sign_of(signs, j + 4);
        }
      }
    }
  }
}

void iq3_s(const BlockIQ3S* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t s = (x[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = d * static_cast<float>(1 + 2 * s);
      const uint8_t* qs = x[i].qs + 8 * ib;
      const uint8_t* signs = x[i].signs + 4 * ib;
      const uint8_t qh = x[i].qh[ib];
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint32_t p1 = iq::kIq3sGrid[qs[2 * g] | (((qh >> (2 * g)) & 1) << 8)];
        const uint32_t p2 = iq::kIq3sGrid[qs[2 * g + 1] | (((qh >> (2 * g + 1)) & 1) << 8)];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(grid_byte(p1, j)) * sign_of(signs[g], j);
          y[j + 4] = db * static_cast<float>(grid_byte(p2, j)) * sign_of(signs[g], j + 4);
        }
      }
    }
  }
}

void iq1_s(const BlockIQ1S* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = x[i].qh[ib];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -iq::kIq1Delta : iq::kIq1Delta;
      for (int g = 0; g < 4; ++g, y += 8) {
        const int index = x[i].qs[4 * ib + g] | (((qh >> (3 * g)) & 7) << 8);
        put_iq1_group(iq::kIq1sGrid[index], dl, delta, y);
      }
    }
  }
}

void iq1_m(const BlockIQ1M* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof sc);
    const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                  ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const float d = fp16_to_fp32(d_bits);
    for (int ib = 0; ib < 8; ++ib) {
      const int shift = 6 * (ib % 2);
      const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1)};
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint8_t qh = x[i].qh[2 * ib + g / 2];
        const int hi_shift = 4 * (g % 2);  // even groups use the low nibble of qh, odd the high
        const int index = x[i].qs[4 * ib + g] | (((qh >> hi_shift) & 7) << 8);
        const float delta = ((qh >> hi_shift) & 8) ? -iq::kIq1Delta : iq::kIq1Delta;
        put_iq1_group(iq::kIq1sGrid[index], dl[g / 2], delta, y);
      }
    }
  }
}

void iq4_nl(const BlockIQ4NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(iq::kValuesIq4nl[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(iq::kValuesIq4nl[x[i].qs[j] >> 4]);
    }
  }
}

void iq4_xs(const BlockIQ4XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     (((x[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(iq::kValuesIq4nl[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(iq::kValuesIq4nl[qs[j] >> 4]);
      }
    }
  }
}

void mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(iq::kValuesMxfp4[x[i].qs[j] & 0xF]) * d;
      y[j + 16] = static_cast<float>(iq::kValuesMxfp4[x[i].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace sluice::dequant_detail
