// Packed on-disk block structs of every GGML block type, byte-for-byte as GGUF stores them, plus
// the small unpacking helpers (K-quant 6-bit scales, Q3_K scales, E8M0 exponent) that both the
// scalar dequantizers and the SIMD kernels need. Sharing one definition keeps the two in lockstep:
// a layout misunderstanding shows up in both or in neither, and the vector tests catch it.
// Scales stored as IEEE half are kept as raw uint16_t; convert them with fp16_to_fp32.
#pragma once

#include <cstdint>
#include <cstring>

namespace sluice {

constexpr int kQK = 32;    // values per legacy / IQ4_NL / MXFP4 block
constexpr int kQKK = 256;  // values per K-quant / IQ super-block

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };  // s = d * sum(qs), used by dot kernels only

struct BlockQ2K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8K { float d; int8_t qs[256]; int16_t bsums[16]; };

struct BlockIQ2XXS { uint16_t d; uint16_t qs[32]; };
struct BlockIQ2XS { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
struct BlockIQ2S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };
struct BlockIQ3XXS { uint16_t d; uint8_t qs[96]; };
struct BlockIQ3S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct BlockIQ1S { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; };
struct BlockIQ1M { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };  // no d: spread over scales
struct BlockIQ4NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

struct BlockTQ1_0 { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; };
struct BlockTQ2_0 { uint8_t qs[64]; uint16_t d; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[16]; };

// Sizes must equal types.cpp's block_bytes; the vector test checks that too, at run time.
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2K) == 84 && sizeof(BlockQ3K) == 110 && sizeof(BlockQ4K) == 144);
static_assert(sizeof(BlockQ5K) == 176 && sizeof(BlockQ6K) == 210 && sizeof(BlockQ8K) == 292);
static_assert(sizeof(BlockIQ2XXS) == 66 && sizeof(BlockIQ2XS) == 74 && sizeof(BlockIQ2S) == 82);
static_assert(sizeof(BlockIQ3XXS) == 98 && sizeof(BlockIQ3S) == 110);
static_assert(sizeof(BlockIQ1S) == 50 && sizeof(BlockIQ1M) == 56);
static_assert(sizeof(BlockIQ4NL) == 18 && sizeof(BlockIQ4XS) == 136);
static_assert(sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66 && sizeof(BlockMXFP4) == 17);

// Q4_K / Q5_K: sub-block j (0..7) of 32 values has a 6-bit scale and a 6-bit min packed into the
// 12 scale bytes. Bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3; the top
// two bits of bytes 0..7 extend the 4-bit scales/mins 4..7 that sit in the nibbles of bytes 8..11.
inline void k_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K: sixteen 6-bit scales (stored biased by 32) packed into 12 bytes. Low nibbles: bytes 0..7
// hold scales 0..7 in the low nibble and 8..15 in the high nibble; bytes 8..11 hold the top two
// bits, four scales per byte. Returns the signed scales in out[16].
inline void q3k_scales(const uint8_t* packed, int8_t* out) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (packed[i] & 0xF) : (packed[i - 8] >> 4);
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// MXFP4 shared scale: an E8M0 exponent 2^(e-127), halved because the e2m1 value table is stored
// doubled (as integers). Built directly from the exponent bits so e = 0 and 1 stay exact denormals.
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace sluice
