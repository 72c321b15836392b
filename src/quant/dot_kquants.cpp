// Scalar dot kernels for the 256-value super-block types (Q2_K..Q6_K, IQ4_XS) against Q8_K
// activations: the reference for the AVX2 kernels and the SLUICE_NO_SIMD path. Each super-block's
// integer sum is exact; K-quant minimums are applied through the activation's 16-value sums
// (min * sum(q8)), which is the same identity the SIMD kernels use.
#include "quant/dequant.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"

namespace sluice::scalar {

float vec_dot_q2_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int summs = 0;
    for (int g = 0; g < 16; ++g) summs += (a[i].scales[g] >> 4) * b[i].bsums[g];
    // Value order: two halves of 128; in each, four 2-bit planes of 32 values, each split into
    // two 16-value groups with their own scale.
    int isum = 0;
    int group = 0;
    const int8_t* q8 = b[i].qs;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = a[i].qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int k = 0; k < 2; ++k, ++group, q8 += 16) {
          int sg = 0;
          for (int l = 0; l < 16; ++l) sg += q8[l] * ((q[16 * k + l] >> shift) & 3);
          isum += (a[i].scales[group] & 0xF) * sg;
        }
      }
    }
    const float dy = b[i].d;
    s += dy * fp16_to_fp32(a[i].d) * static_cast<float>(isum) -
         dy * fp16_to_fp32(a[i].dmin) * static_cast<float>(summs);
  }
  return s;
}

float vec_dot_q3_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t scales[16];
    q3k_scales(a[i].scales, scales);
    int isum = 0;
    int group = 0;
    int plane = 0;
    const int8_t* q8 = b[i].qs;
    // Layout as Q2_K; plane p of the 8 takes its third bit from bit p of hmask (clear means -4).
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = a[i].qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, ++plane) {
        for (int k = 0; k < 2; ++k, ++group, q8 += 16) {
          int sg = 0;
          for (int l = 0; l < 16; ++l) {
            const int hi = (a[i].hmask[16 * k + l] >> plane) & 1;
            sg += q8[l] * (((q[16 * k + l] >> shift) & 3) - (hi ? 0 : 4));
          }
          isum += scales[group] * sg;
        }
      }
    }
    s += b[i].d * fp16_to_fp32(a[i].d) * static_cast<float>(isum);
  }
  return s;
}

float vec_dot_q4_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int isum = 0;
    int summs = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(j, a[i].scales, &sc, &m);
      summs += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
      // Sub-blocks 2c and 2c+1 share the 32 bytes of chunk c: low nibbles, then high nibbles.
      const uint8_t* q = a[i].qs + 32 * (j / 2);
      const int8_t* q8 = b[i].qs + 32 * j;
      const int shift = 4 * (j % 2);
      int sg = 0;
      for (int l = 0; l < 32; ++l) sg += ((q[l] >> shift) & 0xF) * q8[l];
      isum += sc * sg;
    }
    const float dy = b[i].d;
    s += dy * fp16_to_fp32(a[i].d) * static_cast<float>(isum) -
         dy * fp16_to_fp32(a[i].dmin) * static_cast<float>(summs);
  }
  return s;
}

float vec_dot_q5_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int isum = 0;
    int summs = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(j, a[i].scales, &sc, &m);
      summs += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
      // Nibbles as Q4_K; bit j of qh[l] is the fifth bit of value l of sub-block j.
      const uint8_t* q = a[i].qs + 32 * (j / 2);
      const int8_t* q8 = b[i].qs + 32 * j;
      const int shift = 4 * (j % 2);
      int sg = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((a[i].qh[l] >> j) & 1) << 4);
        sg += v * q8[l];
      }
      isum += sc * sg;
    }
    const float dy = b[i].d;
    s += dy * fp16_to_fp32(a[i].d) * static_cast<float>(isum) -
         dy * fp16_to_fp32(a[i].dmin) * static_cast<float>(summs);
  }
  return s;
}

float vec_dot_q6_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6K*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int isum = 0;
    // Each half of 128 values: four 32-value quarters; quarter k takes its low nibble from
    // ql[l + 32*(k%2)] (low half for k<2, high half otherwise) and two high bits from qh[l] at 2k.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = a[i].ql + 64 * half;
      const uint8_t* qh = a[i].qh + 32 * half;
      const int8_t* sc = a[i].scales + 8 * half;
      const int8_t* q8 = b[i].qs + 128 * half;
      for (int k = 0; k < 4; ++k) {
        for (int g = 0; g < 2; ++g) {
          int sg = 0;
          for (int l = 16 * g; l < 16 * g + 16; ++l) {
            const int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
            const int v = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            sg += v * q8[32 * k + l];
          }
          isum += sc[2 * k + g] * sg;
        }
      }
    }
    s += b[i].d * fp16_to_fp32(a[i].d) * static_cast<float>(isum);
  }
  return s;
}

float vec_dot_iq4_xs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ4XS*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     (((a[i].scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t* q = a[i].qs + 16 * ib;
      const int8_t* q8 = b[i].qs + 32 * ib;
      int sg = 0;
      for (int l = 0; l < 16; ++l) {
        sg += iq::kValuesIq4nl.data()[q[l] & 0xF] * q8[l] +
              iq::kValuesIq4nl.data()[q[l] >> 4] * q8[l + 16];
      }
      isum += (ls - 32) * sg;
    }
    s += b[i].d * fp16_to_fp32(a[i].d) * static_cast<float>(isum);
  }
  return s;
}

}  // namespace sluice::scalar
