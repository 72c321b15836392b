// GEMM unpackers (see gemm.h): one 256-value unit of a weight row into unsigned bytes in natural
// value order plus per-group scales (and biases). The bit layouts are the ones the scalar dot
// kernels document (dot_kquants.cpp, dot.cpp); the loops are plain so the compiler vectorises them.
#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/gemm.h"
#include "quant/iq_grids.h"

namespace sluice {

namespace gemm_unpack {

void q4_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float* bias) {
  const BlockQ4K& b = static_cast<const BlockQ4K*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, &sc, &m);
    scale[j] = d * sc;
    bias[j] = dmin * m;
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) u[32 * j + l] = (q[l] >> shift) & 0xF;
  }
}

void q5_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float* bias) {
  const BlockQ5K& b = static_cast<const BlockQ5K*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, &sc, &m);
    scale[j] = d * sc;
    bias[j] = dmin * m;
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l)
      u[32 * j + l] = ((q[l] >> shift) & 0xF) | (((b.qh[l] >> j) & 1) << 4);
  }
}

void q6_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockQ6K& b = static_cast<const BlockQ6K*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int g = 0; g < 16; ++g) scale[g] = d * b.scales[g];
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    uint8_t* out = u + 128 * half;
    for (int k = 0; k < 4; ++k) {
      const uint8_t* lo = ql + 32 * (k % 2);
      const int lshift = 4 * (k / 2);
      for (int l = 0; l < 32; ++l)
        out[32 * k + l] = ((lo[l] >> lshift) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4);
    }
  }
}

void q2_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float* bias) {
  const BlockQ2K& b = static_cast<const BlockQ2K*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int g = 0; g < 16; ++g) {
    scale[g] = d * (b.scales[g] & 0xF);
    bias[g] = dmin * (b.scales[g] >> 4);
  }
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int s = 0; s < 4; ++s) {
      uint8_t* out = u + 128 * half + 32 * s;
      for (int l = 0; l < 32; ++l) out[l] = (q[l] >> (2 * s)) & 3;
    }
  }
}

void q3_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockQ3K& b = static_cast<const BlockQ3K*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  int8_t sc[16];
  q3k_scales(b.scales, sc);
  for (int g = 0; g < 16; ++g) scale[g] = d * sc[g];
  // Offset 4: a clear hmask bit means -4, so the unsigned value carries the set bit as +4.
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int s = 0; s < 4; ++s) {
      const int plane = 4 * half + s;
      uint8_t* out = u + 128 * half + 32 * s;
      for (int l = 0; l < 32; ++l)
        out[l] = ((q[l] >> (2 * s)) & 3) | (((b.hmask[l] >> plane) & 1) << 2);
    }
  }
}

void iq4_xs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ4XS& b = static_cast<const BlockIQ4XS*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    scale[ib] = d * (ls - 32);
    const uint8_t* q = b.qs + 16 * ib;
    for (int l = 0; l < 16; ++l) {
      u[32 * ib + l] = static_cast<uint8_t>(iq::kValuesIq4nl[q[l] & 0xF] + 128);
      u[32 * ib + l + 16] = static_cast<uint8_t>(iq::kValuesIq4nl[q[l] >> 4] + 128);
    }
  }
}

void q8_0(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float*) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row) + unit * (kGemmUnit / kQK);
  for (int g = 0; g < n_groups; ++g) {
    scale[g] = fp16_to_fp32(b[g].d);
    for (int l = 0; l < kQK; ++l) u[kQK * g + l] = static_cast<uint8_t>(b[g].qs[l] + 128);
  }
}

void mxfp4(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float*) {
  const BlockMXFP4* b = static_cast<const BlockMXFP4*>(row) + unit * (kGemmUnit / kQK);
  for (int g = 0; g < n_groups; ++g) {
    scale[g] = e8m0_to_fp32_half(b[g].e);
    for (int l = 0; l < kQK / 2; ++l) {
      u[kQK * g + l] = static_cast<uint8_t>(iq::kValuesMxfp4[b[g].qs[l] & 0xF] + 128);
      u[kQK * g + l + 16] = static_cast<uint8_t>(iq::kValuesMxfp4[b[g].qs[l] >> 4] + 128);
    }
  }
}

namespace {

// Signed lattice value v (|v| < 64) as an unsigned byte for formats with offset 64.
inline uint8_t signed_byte(int v) {
  return static_cast<uint8_t>(v + 64);
}

// Eight IQ2 values: grid magnitudes with a sign bit per value.
inline void put_iq2(uint64_t point, uint8_t signs, uint8_t* u) {
  for (int j = 0; j < 8; ++j) {
    const int m = iq::grid_byte(point, j);
    u[j] = signed_byte((signs >> j) & 1 ? -m : m);
  }
}

// Eight IQ1 values (grid -1, 0 or +1 plus a delta of +-1/8), times 8 so they are the integers
// 8g +- 1 in -9..9: u = 8g + sign(delta) + 9 with scale dl/8 and offset 9 is exact.
inline void put_iq1(uint64_t point, bool negative_delta, uint8_t* u) {
  for (int j = 0; j < 8; ++j) {
    const int g = static_cast<int8_t>(iq::grid_byte(point, j));
    u[j] = static_cast<uint8_t>(8 * g + (negative_delta ? -1 : 1) + 9);
  }
}

}  // namespace

void iq2_xxs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2XXS& b = static_cast<const BlockIQ2XXS*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t idx, meta;
    std::memcpy(&idx, b.qs + 4 * ib, 4);
    std::memcpy(&meta, b.qs + 4 * ib + 2, 4);
    scale[ib] = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
    for (int g = 0; g < 4; ++g)
      put_iq2(iq::kIq2xxsGrid[(idx >> (8 * g)) & 0xFF], iq::kSignsIq2[(meta >> (7 * g)) & 127],
              u + 32 * ib + 8 * g);
  }
}

void iq2_xs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2XS& b = static_cast<const BlockIQ2XS*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    scale[2 * ib] = d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f;
    scale[2 * ib + 1] = d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f;
    for (int g = 0; g < 4; ++g) {
      const uint16_t q = b.qs[4 * ib + g];
      put_iq2(iq::kIq2xsGrid[q & 511], iq::kSignsIq2[q >> 9], u + 32 * ib + 8 * g);
    }
  }
}

void iq2_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ2S& b = static_cast<const BlockIQ2S*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    scale[2 * ib] = d * (0.5f + static_cast<float>(b.scales[ib] & 0xF)) * 0.25f;
    scale[2 * ib + 1] = d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f;
    for (int g = 0; g < 4; ++g) {
      const int index = b.qs[4 * ib + g] | (((b.qh[ib] >> (2 * g)) & 3) << 8);
      put_iq2(iq::kIq2sGrid[index], b.qs[32 + 4 * ib + g], u + 32 * ib + 8 * g);
    }
  }
}

void iq3_xxs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ3XXS& b = static_cast<const BlockIQ3XXS*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t meta;
    std::memcpy(&meta, b.qs + 64 + 4 * ib, 4);
    scale[ib] = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
    const uint8_t* qs = b.qs + 8 * ib;
    for (int g = 0; g < 4; ++g) {
      const uint8_t signs = iq::kSignsIq2[(meta >> (7 * g)) & 127];
      const uint64_t point =
          iq::kIq3xxsGrid[qs[2 * g]] | static_cast<uint64_t>(iq::kIq3xxsGrid[qs[2 * g + 1]]) << 32;
      put_iq2(point, signs, u + 32 * ib + 8 * g);
    }
  }
}

void iq3_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ3S& b = static_cast<const BlockIQ3S*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    scale[ib] = d * static_cast<float>(1 + 2 * s);
    const uint8_t* qs = b.qs + 8 * ib;
    const uint8_t qh = b.qh[ib];
    for (int g = 0; g < 4; ++g) {
      const uint64_t point =
          iq::kIq3sGrid[qs[2 * g] | (((qh >> (2 * g)) & 1) << 8)] |
          static_cast<uint64_t>(iq::kIq3sGrid[qs[2 * g + 1] | (((qh >> (2 * g + 1)) & 1) << 8)])
              << 32;
      put_iq2(point, b.signs[4 * ib + g], u + 32 * ib + 8 * g);
    }
  }
}

void iq1_s(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ1S& b = static_cast<const BlockIQ1S*>(row)[unit];
  const float d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = b.qh[ib];
    scale[ib] = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * 0.125f;
    for (int g = 0; g < 4; ++g) {
      const int index = b.qs[4 * ib + g] | (((qh >> (3 * g)) & 7) << 8);
      put_iq1(iq::kIq1sGrid[index], qh & 0x8000, u + 32 * ib + 8 * g);
    }
  }
}

void iq1_m(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockIQ1M& b = static_cast<const BlockIQ1M*>(row)[unit];
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const float d = fp16_to_fp32(d_bits);
  for (int ib = 0; ib < 8; ++ib) {
    const int shift = 6 * (ib % 2);
    scale[2 * ib] = d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1) * 0.125f;
    scale[2 * ib + 1] = d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1) * 0.125f;
    for (int g = 0; g < 4; ++g) {
      const uint8_t qh = b.qh[2 * ib + g / 2] >> (4 * (g % 2));
      const int index = b.qs[4 * ib + g] | ((qh & 7) << 8);
      put_iq1(iq::kIq1sGrid[index], qh & 8, u + 32 * ib + 8 * g);
    }
  }
}

}  // namespace gemm_unpack

const GemmFormat* gemm_format(GgmlType weight) {
  static constexpr GemmFormat kQ4K{GgmlType::Q8_K, 32, 0, true, gemm_unpack::q4_K};
  static constexpr GemmFormat kQ5K{GgmlType::Q8_K, 32, 0, true, gemm_unpack::q5_K};
  static constexpr GemmFormat kQ6K{GgmlType::Q8_K, 16, 32, false, gemm_unpack::q6_K};
  static constexpr GemmFormat kQ2K{GgmlType::Q8_K, 16, 0, true, gemm_unpack::q2_K};
  static constexpr GemmFormat kQ3K{GgmlType::Q8_K, 16, 4, false, gemm_unpack::q3_K};
  static constexpr GemmFormat kIq4xs{GgmlType::Q8_K, 32, 128, false, gemm_unpack::iq4_xs};
  static constexpr GemmFormat kQ8_0{GgmlType::Q8_0, 32, 128, false, gemm_unpack::q8_0};
  static constexpr GemmFormat kMxfp4{GgmlType::Q8_0, 32, 128, false, gemm_unpack::mxfp4};
  static constexpr GemmFormat kIq2xxs{GgmlType::Q8_K, 32, 64, false, gemm_unpack::iq2_xxs};
  static constexpr GemmFormat kIq2xs{GgmlType::Q8_K, 16, 64, false, gemm_unpack::iq2_xs};
  static constexpr GemmFormat kIq2s{GgmlType::Q8_K, 16, 64, false, gemm_unpack::iq2_s};
  static constexpr GemmFormat kIq3xxs{GgmlType::Q8_K, 32, 64, false, gemm_unpack::iq3_xxs};
  static constexpr GemmFormat kIq3s{GgmlType::Q8_K, 32, 64, false, gemm_unpack::iq3_s};
  static constexpr GemmFormat kIq1s{GgmlType::Q8_K, 32, 9, false, gemm_unpack::iq1_s};
  static constexpr GemmFormat kIq1m{GgmlType::Q8_K, 16, 9, false, gemm_unpack::iq1_m};
  switch (weight) {
    case GgmlType::Q4_K:
      return &kQ4K;
    case GgmlType::Q5_K:
      return &kQ5K;
    case GgmlType::Q6_K:
      return &kQ6K;
    case GgmlType::Q2_K:
      return &kQ2K;
    case GgmlType::Q3_K:
      return &kQ3K;
    case GgmlType::IQ4_XS:
      return &kIq4xs;
    case GgmlType::Q8_0:
      return &kQ8_0;
    case GgmlType::MXFP4:
      return &kMxfp4;
    case GgmlType::IQ2_XXS:
      return &kIq2xxs;
    case GgmlType::IQ2_XS:
      return &kIq2xs;
    case GgmlType::IQ2_S:
      return &kIq2s;
    case GgmlType::IQ3_XXS:
      return &kIq3xxs;
    case GgmlType::IQ3_S:
      return &kIq3s;
    case GgmlType::IQ1_S:
      return &kIq1s;
    case GgmlType::IQ1_M:
      return &kIq1m;
    default:
      return nullptr;
  }
}

}  // namespace sluice
