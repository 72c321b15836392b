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
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                   (((b.scales_h >> (2 * ib)) & 3) << 4);
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
  switch (weight) {
    case GgmlType::Q4_K: return &kQ4K;
    case GgmlType::Q5_K: return &kQ5K;
    case GgmlType::Q6_K: return &kQ6K;
    case GgmlType::Q2_K: return &kQ2K;
    case GgmlType::Q3_K: return &kQ3K;
    case GgmlType::IQ4_XS: return &kIq4xs;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::MXFP4: return &kMxfp4;
    default: return nullptr;
  }
}

}  // namespace sluice
