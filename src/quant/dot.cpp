// Scalar dot kernels for float weights and 32-value block types: the reference the AVX2 kernels
// are tested against and the path SLUICE_NO_SIMD runs. Integer products are summed exactly per
// block and scaled once, the same order the SIMD kernels use, so the two differ only in how the
// per-block float terms are added up.
#include <cstring>

#include "quant/dequant.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"

namespace sluice::scalar {

namespace {

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof v);
  return v;
}

int sum_q8(const BlockQ8_0& y) {
  int s = 0;
  for (int8_t q : y.qs) s += q;
  return s;
}

// Integer dot of a 4-bit-table block (low nibble = value j, high nibble = value j + 16).
int table_dot(const uint8_t* qs, const int8_t* table, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    s += table[qs[j] & 0xF] * q8[j];
    s += table[qs[j] >> 4] * q8[j + kQK / 2];
  }
  return s;
}

}  // namespace

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(a[i]) * b[i];
  return s;
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += bf16_to_fp32(a[i]) * b[i];
  return s;
}

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    s += fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d) * static_cast<float>(sumi);
  }
  return s;
}

float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
      sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + kQK / 2];
    }
    s += fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d) * static_cast<float>(sumi);
  }
  return s;
}

float vec_dot_q4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (a[i].qs[j] & 0xF) * b[i].qs[j];
      sumi += (a[i].qs[j] >> 4) * b[i].qs[j + kQK / 2];
    }
    const float dy = fp16_to_fp32(b[i].d);
    s += fp16_to_fp32(a[i].d) * dy * static_cast<float>(sumi) +
         fp16_to_fp32(a[i].m) * dy * static_cast<float>(sum_q8(b[i]));
  }
  return s;
}

float vec_dot_q5_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_qh(a[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (a[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (a[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += (lo - 16) * b[i].qs[j] + (hi - 16) * b[i].qs[j + kQK / 2];
    }
    s += fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d) * static_cast<float>(sumi);
  }
  return s;
}

float vec_dot_q5_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_qh(a[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (a[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int hi = (a[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += lo * b[i].qs[j] + hi * b[i].qs[j + kQK / 2];
    }
    const float dy = fp16_to_fp32(b[i].d);
    s += fp16_to_fp32(a[i].d) * dy * static_cast<float>(sumi) +
         fp16_to_fp32(a[i].m) * dy * static_cast<float>(sum_q8(b[i]));
  }
  return s;
}

float vec_dot_iq4_nl(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ4NL*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int sumi = table_dot(a[i].qs, iq::kValuesIq4nl.data(), b[i].qs);
    s += fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d) * static_cast<float>(sumi);
  }
  return s;
}

float vec_dot_mxfp4(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockMXFP4*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int sumi = table_dot(a[i].qs, iq::kValuesMxfp4.data(), b[i].qs);
    s += e8m0_to_fp32_half(a[i].e) * fp16_to_fp32(b[i].d) * static_cast<float>(sumi);
  }
  return s;
}

}  // namespace sluice::scalar
