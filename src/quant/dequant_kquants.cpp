// Scalar dequantization of the K-quants: 256-value super-blocks with one or two half-precision
// super-scales and small per-sub-block scales. Sub-block scales are multiplied into the
// super-scale first and the quant last, as GGML does, so results are bit-exact.
//
// Layouts in words (a "half" is one 128-value half of the super-block):
//   Q2_K  16 scale bytes (low nibble: scale, high nibble: min, one byte per 16 values), 64 bytes of
//         2-bit quants, d, dmin. In each half 32 bytes serve four 32-value groups: group g takes
//         bits 2g..2g+1 of those bytes; bytes 0..15 and 16..31 are separate 16-value sub-blocks.
//         x = d*scale*q - dmin*min.
//   Q3_K  32 bytes hmask, 64 bytes of low 2 bits (arranged as Q2_K), 12 bytes of sixteen 6-bit
//         scales biased by 32 (see q3k_scales), d. Bit g+4h of hmask byte l is the third bit of
//         the value group g in half h at byte l; a clear bit means subtract 4. x = d*scale*(q-4*!h).
//   Q4_K  d, dmin, 12 bytes of eight 6-bit scales and mins (see k_scale_min), 128 bytes of
//         nibbles: each 32-byte chunk holds 64 values, low nibbles first then high nibbles.
//         x = d*scale*q - dmin*min.
//   Q5_K  as Q4_K plus 32 bytes qh: bit 2c of qh[l] is the fifth bit of low-nibble value l of
//         chunk c, bit 2c+1 that of its high-nibble value.
//   Q6_K  128 bytes low nibbles, 64 bytes high 2-bit pairs, sixteen signed 8-bit scales, d.
//         Per half: ql[l] / ql[l+32] low and high nibbles give values l, l+32, l+64, l+96 with
//         qh[l] bits 0-1, 2-3, 4-5, 6-7 on top; x = d*scale*(q-32).
//   Q8_K  float d, 256 signed bytes, sixteen int16 group sums (for dot products); x = d*q.
#include "quant/dequant.h"
#include "quant/dequant_families.h"

namespace sluice::dequant_detail {

void q2_k(const BlockQ2K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void q3_k(const BlockQ3K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    int8_t scales[16];
    q3k_scales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    uint8_t mask = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, mask <<= 1) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(scales[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[l] & mask) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void q4_k(const BlockQ4K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32, y += 64) {
      uint8_t sc, m;
      k_scale_min(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      k_scale_min(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
        y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
      }
    }
  }
}

void q5_k(const BlockQ5K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32, y += 64) {
      uint8_t sc, m;
      k_scale_min(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      k_scale_min(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t lo_bit = static_cast<uint8_t>(1u << (2 * c));
      const uint8_t hi_bit = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) {
        const int lo = (q[l] & 0xF) + ((x[i].qh[l] & lo_bit) ? 16 : 0);
        const int hi = (q[l] >> 4) + ((x[i].qh[l] & hi_bit) ? 16 : 0);
        y[l] = d1 * static_cast<float>(lo) - m1;
        y[l + 32] = d2 * static_cast<float>(hi) - m2;
      }
    }
  }
}

void q6_k(const BlockQ6K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void q8_k(const BlockQ8K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    for (int j = 0; j < 256; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

}  // namespace sluice::dequant_detail
