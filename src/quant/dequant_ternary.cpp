// Scalar dequantization of the ternary types (values in {-1, 0, +1} times a half-precision d).
//
// Layouts in words:
//   TQ2_0  64 bytes of 2-bit codes c (value c-1), d. Each 32-byte half of qs holds 128 values:
//          bits 2l..2l+1 of byte m give value 32l+m of that half.
//   TQ1_0  48 bytes qs and 4 bytes qh of base-3 packed trits, d. A byte stores five trits as the
//          fixed-point fraction byte/256 ≈ t0/3 + t1/9 + ...: multiplying the byte by 3^n (mod 256)
//          brings trit n to the top, and (byte*3) >> 8 reads it. qs[0..31] give values 0..159 (trit
//          n of byte m is value 32n+m), qs[32..47] values 160..239 (16n+m), qh[0..3] the last 16
//          (four trits each: value 240+4n+m).
#include "quant/dequant.h"
#include "quant/dequant_families.h"

namespace sluice::dequant_detail {

namespace {

constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};

// Trit n of a packed byte, as -1, 0 or +1.
int trit(uint8_t packed, int n) {
  const uint8_t shifted = static_cast<uint8_t>(packed * kPow3[n]);  // wraps mod 256 on purpose
  return ((static_cast<uint16_t>(shifted) * 3) >> 8) - 1;
}

}  // namespace

void tq1_0(const BlockTQ1_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int n = 0; n < 5; ++n)
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(trit(x[i].qs[m], n)) * d;
    for (int n = 0; n < 5; ++n)
      for (int m = 0; m < 16; ++m) *y++ = static_cast<float>(trit(x[i].qs[32 + m], n)) * d;
    for (int n = 0; n < 4; ++n)
      for (int m = 0; m < 4; ++m) *y++ = static_cast<float>(trit(x[i].qh[m], n)) * d;
  }
}

void tq2_0(const BlockTQ2_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m)
          *y++ = static_cast<float>(((x[i].qs[32 * half + m] >> (2 * l)) & 3) - 1) * d;
  }
}

}  // namespace sluice::dequant_detail
