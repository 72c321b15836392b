// Scalar dequantization: the type dispatch, IEEE half / bfloat16 conversion and the legacy
// 32-value block types. Arithmetic follows the reference order (scale times integer, then plus
// min) so results match GGML bit for bit; SIMD kernels are tested against these functions.
//
// Legacy layouts (32 values per block, half-precision scale d, optional half min m):
//   Q4_0  d, 16 bytes of nibbles: byte j low nibble is value j, high nibble value j+16; x = (q-8)*d.
//   Q4_1  d, m, nibbles as Q4_0; x = q*d + m.
//   Q5_0  d, 4 bytes qh (a little-endian 32-bit word whose bit j is the fifth bit of value j),
//         nibbles as Q4_0; x = (q-16)*d.
//   Q5_1  d, m, qh, nibbles; x = q*d + m.
//   Q8_0  d, 32 signed bytes; x = q*d.
//   Q8_1  d, s (= d*sum q, only for dot products), 32 signed bytes; x = q*d.
#include "quant/dequant.h"

#include <cstring>

#include "core/error.h"
#include "quant/dequant_families.h"

namespace sluice {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    // Subnormal halves are mant * 2^-24: exact in float, so let the FPU normalise them.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -mag : mag;
  }
  if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf stays inf; NaN keeps its top payload bits and is made quiet
    return sign | 0x7C00 | (abs > 0x7F800000u ? 0x200 | ((abs >> 13) & 0x3FF) : 0);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // at or past halfway above 65504: rounds to inf
  const uint32_t e = abs >> 23;
  if (e < 113) {  // below 2^-14: a half subnormal (or zero), counted in units of 2^-24
    const uint32_t shift = 126 - e;
    if (e == 0 || shift > 24) return sign;
    const uint32_t m = (abs & 0x7FFFFF) | 0x800000;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;  // may carry into the smallest normal: fine
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t h = ((e - 112) << 10) | ((abs >> 13) & 0x3FF);
  const uint32_t rem = abs & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a mantissa carry bumps the exponent
  return sign | static_cast<uint16_t>(h);
}

float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t fp32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

namespace dequant_detail {

void q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

namespace {
uint32_t load_qh(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, sizeof qh);
  return qh;
}
}  // namespace

void q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

}  // namespace dequant_detail

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  namespace dd = dequant_detail;
  const auto traits = find_type(static_cast<uint32_t>(type));
  if (!traits) fail("dequantize_row: unknown GGML type id {}", static_cast<uint32_t>(type));
  if (n < 0 || n % traits->block_elems != 0)
    fail("dequantize_row: {} values is not a whole number of {} blocks of {}", n, traits->name,
         traits->block_elems);
  const int64_t nb = n / traits->block_elems;
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::F64: {
      const auto* p = static_cast<const unsigned char*>(src);
      for (int64_t i = 0; i < n; ++i) {
        double v;  // memcpy: callers may pass byte buffers with no 8-byte alignment promise
        std::memcpy(&v, p + i * sizeof v, sizeof v);
        dst[i] = static_cast<float>(v);
      }
      return;
    }
    case GgmlType::Q4_0: return dd::q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::Q4_1: return dd::q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case GgmlType::Q5_0: return dd::q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case GgmlType::Q5_1: return dd::q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case GgmlType::Q8_0: return dd::q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::Q8_1: return dd::q8_1(static_cast<const BlockQ8_1*>(src), dst, nb);
    case GgmlType::Q2_K: return dd::q2_k(static_cast<const BlockQ2K*>(src), dst, nb);
    case GgmlType::Q3_K: return dd::q3_k(static_cast<const BlockQ3K*>(src), dst, nb);
    case GgmlType::Q4_K: return dd::q4_k(static_cast<const BlockQ4K*>(src), dst, nb);
    case GgmlType::Q5_K: return dd::q5_k(static_cast<const BlockQ5K*>(src), dst, nb);
    case GgmlType::Q6_K: return dd::q6_k(static_cast<const BlockQ6K*>(src), dst, nb);
    case GgmlType::Q8_K: return dd::q8_k(static_cast<const BlockQ8K*>(src), dst, nb);
    case GgmlType::IQ2_XXS: return dd::iq2_xxs(static_cast<const BlockIQ2XXS*>(src), dst, nb);
    case GgmlType::IQ2_XS: return dd::iq2_xs(static_cast<const BlockIQ2XS*>(src), dst, nb);
    case GgmlType::IQ2_S: return dd::iq2_s(static_cast<const BlockIQ2S*>(src), dst, nb);
    case GgmlType::IQ3_XXS: return dd::iq3_xxs(static_cast<const BlockIQ3XXS*>(src), dst, nb);
    case GgmlType::IQ3_S: return dd::iq3_s(static_cast<const BlockIQ3S*>(src), dst, nb);
    case GgmlType::IQ1_S: return dd::iq1_s(static_cast<const BlockIQ1S*>(src), dst, nb);
    case GgmlType::IQ1_M: return dd::iq1_m(static_cast<const BlockIQ1M*>(src), dst, nb);
    case GgmlType::IQ4_NL: return dd::iq4_nl(static_cast<const BlockIQ4NL*>(src), dst, nb);
    case GgmlType::IQ4_XS: return dd::iq4_xs(static_cast<const BlockIQ4XS*>(src), dst, nb);
    case GgmlType::MXFP4: return dd::mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb);
    case GgmlType::TQ1_0: return dd::tq1_0(static_cast<const BlockTQ1_0*>(src), dst, nb);
    case GgmlType::TQ2_0: return dd::tq2_0(static_cast<const BlockTQ2_0*>(src), dst, nb);
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
      fail("dequantize_row: {} is an integer tensor type and has no dequantization",
           traits->name);
  }
  // Reached only by a type added to types.cpp without a dequantizer here (-Wswitch flags it too).
  fail("dequantize_row: no dequantizer for GGML type {}", traits->name);
}

}  // namespace sluice
