// AVX-512 VNNI GEMM over GemmFormat weights (see gemm.h). Compiled with AVX-512 F/BW/VL/VNNI
// flags; only reachable after dispatch has checked the CPU.
//
// Sixteen weight rows form a tile, one row per 32-bit lane: the tile is unpacked once into
// "interleaved" order, where one 64-byte vector holds the same four values of all sixteen rows.
// An activation row then needs only a broadcast of its four matching bytes, and one vpdpbusd
// accumulates those four products for all sixteen rows at once; the tile is reused by every
// activation row of the call, kCols rows at a time so each weight vector load serves kCols
// dot products. Per group of 16 or 32 values the integer sums are scaled in float by the
// group's weight scales (one per lane), so the output of a tile is sixteen finished dot
// products per activation row, stored straight into y.
#include <algorithm>
#include <cstring>

#include "core/aligned.h"
#include "core/error.h"
#include "quant/gemm.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "quant/simd_intrinsics.h"

namespace sluice::avx512 {

namespace {

constexpr int kTileRows = 16;
// Loops over the kCols activation rows and the dwords of a group carry "#pragma GCC unroll": the
// accumulators must live in registers, and -O2 leaves such loops rolled over stack arrays.
constexpr int kCols = 8;

// Grow-only per-thread buffer (pool threads keep theirs across calls).
class Scratch {
 public:
  std::byte* get(size_t bytes) {
    if (buf_.size() < bytes) buf_ = AlignedBuffer(std::max(bytes, buf_.size() * 2));
    return buf_.data();
  }

 private:
  AlignedBuffer buf_;
};
thread_local Scratch t_packed;
thread_local Scratch t_act;

// 16x16 transpose of 32-bit elements: row r of in becomes lane r of every output vector.
// Always inlined: called out of line, its 16 vectors go through memory twice per call, which cost
// Q4_K packing as much as the shuffles themselves.
__attribute__((always_inline)) inline void transpose16(__m512i v[16]) {
  __m512i t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // After these, u[4q + j] holds in each 128-bit lane L rows 4q..4q+3 of element 4L + j.
  __m512i u[16];
#pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 4; ++j) {
    const __m512i s0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i s1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    v[j] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    v[8 + j] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    v[12 + j] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
}

// AVX-512 twins of the hot unpackers of gemm_unpack.cpp (same output bytes; a unit test compares
// them): the portable ones call the out-of-line fp16 conversion and unpack scales byte by byte,
// which cost as much as the GEMM itself on expert batches of a few dozen tokens.
void unpack_q4_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float* bias) {
  const BlockQ4K& b = static_cast<const BlockQ4K*>(row)[unit];
  // Scales and mins of sub-blocks 0..3 are the low six bits of bytes 0..3 and 4..7; those of 4..7
  // take their low nibbles from bytes 8..11 and their top two bits from the tops of bytes 0..7.
  uint32_t w[3];
  std::memcpy(w, b.scales, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu;
  const uint32_t m_lo = w[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u);
  const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, sc_hi, sc_lo)));
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, m_hi, m_lo)));
  _mm256_storeu_ps(scale, _mm256_mul_ps(sc, _mm256_set1_ps(_cvtsh_ss(b.d))));
  _mm256_storeu_ps(bias, _mm256_mul_ps(m, _mm256_set1_ps(_cvtsh_ss(b.dmin))));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + 64 * c), _mm256_and_si256(v, low4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + 64 * c + 32),
                       _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  }
}

void unpack_q5_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float* bias) {
  const BlockQ5K& b = static_cast<const BlockQ5K*>(row)[unit];
  uint32_t w[3];
  std::memcpy(w, b.scales, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu;
  const uint32_t m_lo = w[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u);
  const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, sc_hi, sc_lo)));
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, m_hi, m_lo)));
  _mm256_storeu_ps(scale, _mm256_mul_ps(sc, _mm256_set1_ps(_cvtsh_ss(b.d))));
  _mm256_storeu_ps(bias, _mm256_mul_ps(m, _mm256_set1_ps(_cvtsh_ss(b.dmin))));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
    // Bit j of qh[l] is the fifth bit of value l of sub-block j (2c low nibbles, 2c+1 high).
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4);
    const __m256i h1 =
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4);
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + 64 * c),
                       _mm256_or_si256(_mm256_and_si256(v, low4), h0));
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + 64 * c + 32),
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), h1));
  }
}

void unpack_q6_K(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  const BlockQ6K& b = static_cast<const BlockQ6K*>(row)[unit];
  const __m512 sc = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
  _mm512_storeu_ps(scale, _mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(b.d))));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * half));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * half + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * half));
    // Quarter k: low nibble from l0 (k even) or l1 (k odd), low half for k < 2; bits 2k, 2k+1 of
    // qh as bits 4, 5.
    const __m256i lo[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                           _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), two), 4);
      _mm256_store_si256(reinterpret_cast<__m256i*>(u + 128 * half + 32 * k),
                         _mm256_or_si256(lo[k], hi));
    }
  }
}

void unpack_q8_0(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float*) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row) + unit * (kGemmUnit / kQK);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int g = 0; g < n_groups; ++g) {
    scale[g] = _cvtsh_ss(b[g].d);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[g].qs));
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + kQK * g), _mm256_xor_si256(q, flip));
  }
}

// A 16-entry signed value table as unsigned bytes (value + 128), in both 128-bit lanes for vpshufb.
__m256i offset_table(const int8_t* values) {
  alignas(16) uint8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(values[i] ^ 0x80);
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// 16 bytes of nibbles (low: values 0..15, high: 16..31) looked up in a table, as 32 bytes.
inline __m256i lookup_nibbles(const uint8_t* q, __m256i table) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0F)));
}

void unpack_iq4_xs(const void* row, int64_t unit, int, uint8_t* u, float* scale, float*) {
  static const __m256i table = offset_table(iq::kValuesIq4nl.data());
  const BlockIQ4XS& b = static_cast<const BlockIQ4XS*>(row)[unit];
  const float d = _cvtsh_ss(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                   (((b.scales_h >> (2 * ib)) & 3) << 4);
    scale[ib] = d * (ls - 32);
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + 32 * ib),
                       lookup_nibbles(b.qs + 16 * ib, table));
  }
}

void unpack_mxfp4(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float*) {
  static const __m256i table = offset_table(iq::kValuesMxfp4.data());
  const BlockMXFP4* b = static_cast<const BlockMXFP4*>(row) + unit * (kGemmUnit / kQK);
  for (int g = 0; g < n_groups; ++g) {
    scale[g] = e8m0_to_fp32_half(b[g].e);
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + kQK * g), lookup_nibbles(b[g].qs, table));
  }
}

// Bytes of one packed unit: interleaved values, then scale[group][row], then bias[group][row].
constexpr uint64_t unit_bytes(int groups, bool bias) {
  return kGemmUnit * kTileRows + static_cast<uint64_t>(groups) * kTileRows * 4 * (bias ? 2 : 1);
}

// Unpacks rows [0, n_rows) of a tile (missing rows as zeros) into the interleaved layout.
template <int kGroups, bool kBias>
void pack_tile(const GemmFormat& f, const std::byte* w, uint64_t w_stride, int n_rows,
               int64_t n_units, int last_groups, std::byte* out) {
  constexpr int kGV = kGemmUnit / kGroups;
  alignas(64) uint8_t u[kTileRows][kGemmUnit];
  alignas(64) float sc[kTileRows][16];
  alignas(64) float bi[kTileRows][16];
  std::memset(sc, 0, sizeof sc);
  std::memset(bi, 0, sizeof bi);
  for (int64_t un = 0; un < n_units; ++un, out += unit_bytes(kGroups, kBias)) {
    const int ng = un + 1 == n_units ? last_groups : kGroups;
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) {
      if (r < n_rows) {
        f.unpack(w + r * w_stride, un, ng, u[r], sc[r], bi[r]);
        if (ng < kGroups) std::memset(u[r] + ng * kGV, 0, (kGroups - ng) * kGV);
      } else {
        std::memset(u[r], 0, kGemmUnit);
      }
    }
    __m512i v[16];
    for (int ch = 0; ch < kGemmUnit / 64; ++ch) {
#pragma GCC unroll 16
      for (int r = 0; r < kTileRows; ++r) v[r] = _mm512_load_si512(u[r] + 64 * ch);
      transpose16(v);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) _mm512_store_si512(out + (16 * ch + k) * 64, v[k]);
    }
    auto store_per_group = [&](float(*src)[16], std::byte* dst) {
#pragma GCC unroll 16
      for (int r = 0; r < kTileRows; ++r) v[r] = _mm512_castps_si512(_mm512_load_ps(src[r]));
      transpose16(v);
      for (int g = 0; g < kGroups; ++g) _mm512_store_si512(dst + g * 64, v[g]);
    };
    store_per_group(sc, out + kGemmUnit * kTileRows);
    if constexpr (kBias) store_per_group(bi, out + kGemmUnit * kTileRows + kGroups * 64);
  }
}

// Q4_K tiles packed straight from the blocks, the same bytes and floats pack_tile<8, true> writes
// through unpack_q4_K: the nibbles of sixteen rows are transposed as they are stored (a dword of
// quant bytes holds four values of one 32-value group in its low nibbles and four of the next
// group in its high ones), and the scales and minimums of all sixteen rows are decoded side by
// side from their block headers. Expert batches of a few dozen tokens spent as long
// unpacking row by row into a staging tile and transposing it as multiplying. A lane past
// n_rows repeats the last row; the kernel's masked store drops it.
void pack_tile_q4_K(const GemmFormat&, const std::byte* w, uint64_t w_stride, int n_rows,
                    int64_t n_units, int, std::byte* out) {
  alignas(64) int32_t offsets[kTileRows];
  for (int r = 0; r < kTileRows; ++r)
    offsets[r] = static_cast<int32_t>(static_cast<uint64_t>(std::min(r, n_rows - 1)) * w_stride);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i low6 = _mm512_set1_epi8(0x3F);
  const __m512i top2 = _mm512_set1_epi8(0x30);
  const __m512i byte = _mm512_set1_epi32(0xFF);
  for (int64_t un = 0; un < n_units; ++un, out += unit_bytes(8, true)) {
    const std::byte* blocks = w + un * sizeof(BlockQ4K);
    // The 16-byte headers (d, dmin, 12 scale bytes) of the 16 rows: z[q] holds rows q, q + 4,
    // q + 8, q + 12 in its 128-bit lanes; a 4x4 transpose of dwords within each lane then leaves
    // dword k of rows 0..15 in one vector (cheaper than four 16-element gathers).
    __m512i z[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      auto head_of = [&](int r) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + offsets[r]));
      };
      z[q] = _mm512_inserti32x4(
          _mm512_inserti32x4(
              _mm512_inserti32x4(_mm512_castsi128_si512(head_of(q)), head_of(q + 4), 1),
              head_of(q + 8), 2),
          head_of(q + 12), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    const __m512i head = _mm512_unpacklo_epi64(t0, t2), w0 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i w1 = _mm512_unpacklo_epi64(t1, t3), w2 = _mm512_unpackhi_epi64(t1, t3);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    // Bytes g of these hold the six-bit scale (minimum) of sub-block g, and of g + 4 (see
    // unpack_q4_K).
    const __m512i sc_lo = _mm512_and_si512(w0, low6);
    const __m512i m_lo = _mm512_and_si512(w1, low6);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(w2, low4),
                                          _mm512_and_si512(_mm512_srli_epi32(w0, 2), top2));
    const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                         _mm512_and_si512(_mm512_srli_epi32(w1, 2), top2));
    auto* scale = reinterpret_cast<float*>(out + kGemmUnit * kTileRows);
    float* bias = scale + 8 * kTileRows;
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      auto nth = [&](__m512i v) {
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * g), byte));
      };
      _mm512_store_ps(scale + g * kTileRows, _mm512_mul_ps(nth(sc_lo), d));
      _mm512_store_ps(scale + (g + 4) * kTileRows, _mm512_mul_ps(nth(sc_hi), d));
      _mm512_store_ps(bias + g * kTileRows, _mm512_mul_ps(nth(m_lo), dmin));
      _mm512_store_ps(bias + (g + 4) * kTileRows, _mm512_mul_ps(nth(m_hi), dmin));
    }
    // Quant bytes 64h..64h+63 of each row are chunks c = 2h and 2h + 1: after the transpose,
    // v[m] is dword m of them for all rows; its low nibbles are values 64c + 4m'..+3 and its high
    // nibbles values 64c + 32 + 4m'..+3 (m' = m mod 8), i.e. interleaved vectors 16c + m' and
    // 16c + 8 + m'.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i v[16];
#pragma GCC unroll 16
      for (int r = 0; r < kTileRows; ++r) {
        v[r] = _mm512_loadu_si512(blocks + offsets[r] + offsetof(BlockQ4K, qs) + 64 * h);
      }
      transpose16(v);
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) {
        const int k = 32 * h + 16 * (m / 8) + m % 8;
        _mm512_store_si512(out + k * 64, _mm512_and_si512(v[m], low4));
        _mm512_store_si512(out + (k + 8) * 64, _mm512_and_si512(_mm512_srli_epi32(v[m], 4), low4));
      }
    }
  }
}

// Packs one tile: pack_tile for any format, or a format's direct packer.
using PackTileFn = void (*)(const GemmFormat& f, const std::byte* w, uint64_t w_stride, int n_rows,
                            int64_t n_units, int last_groups, std::byte* out);

// Per activation row, what the kernel needs beside the 8-bit values: the block scale (per unit
// for Q8_K, per 32-value block for Q8_0), -offset * group sum (the integer start of each group's
// sum) and, for formats with a bias, the group sum as a float.
struct ActInfo {
  float* xd;
  int32_t* corr;
  float* gsum;
  int64_t n_scales;
  int64_t n_groups;
};

template <bool kAct32, int kGV>
void prepare_row(const std::byte* xr, int64_t n, int offset, bool bias, float* xd, int32_t* corr,
                 float* gsum) {
  if constexpr (kAct32) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(xr);
    for (int64_t i = 0; i < n / kQK; ++i) {
      xd[i] = _cvtsh_ss(b[i].d);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
      const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
      const int sum = _mm_cvtsi128_si32(s);
      corr[i] = -offset * sum;
      if (bias) gsum[i] = static_cast<float>(sum);
    }
  } else {
    constexpr int kGroups = kGemmUnit / kGV;
    const auto* b = reinterpret_cast<const BlockQ8K*>(xr);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      xd[i] = b[i].d;
      for (int g = 0; g < kGroups; ++g) {
        const int sum = kGV == 16 ? b[i].bsums[g] : b[i].bsums[2 * g] + b[i].bsums[2 * g + 1];
        corr[i * kGroups + g] = -offset * sum;
        if (bias) gsum[i * kGroups + g] = static_cast<float>(sum);
      }
    }
  }
}

template <bool kAct32, int kGV, bool kBias, int C>
void tile_kernel(const std::byte* packed, int64_t n_units, int last_groups, const std::byte* x,
                 uint64_t x_stride, const ActInfo& a, int64_t c0, float* y, uint64_t y_stride,
                 __mmask16 mask) {
  constexpr int kGroups = kGemmUnit / kGV;
  constexpr int kDw = kGV / 4;
  constexpr uint64_t kUnitX = kAct32 ? 8 * sizeof(BlockQ8_0) : sizeof(BlockQ8K);
  constexpr uint64_t kGroupX = kAct32 ? sizeof(BlockQ8_0) : kGV;
  constexpr uint64_t kQsOffset = kAct32 ? offsetof(BlockQ8_0, qs) : offsetof(BlockQ8K, qs);
  const std::byte* xrow[C];
  const float* xd[C];
  const int32_t* corr[C];
  const float* gsum[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    xrow[c] = x + (c0 + c) * x_stride + kQsOffset;
    xd[c] = a.xd + (c0 + c) * a.n_scales;
    corr[c] = a.corr + (c0 + c) * a.n_groups;
    gsum[c] = a.gsum + (c0 + c) * a.n_groups;
  }
  __m512 facc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) facc[c] = _mm512_setzero_ps();
  for (int64_t un = 0; un < n_units; ++un) {
    const std::byte* pq = packed + un * unit_bytes(kGroups, kBias);
    const float* ps = reinterpret_cast<const float*>(pq + kGemmUnit * kTileRows);
    const float* pb = ps + kGroups * kTileRows;
    const int ng = un + 1 == n_units ? last_groups : kGroups;
    __m512 sacc[C];
    if constexpr (!kAct32)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) sacc[c] = _mm512_setzero_ps();
    for (int g = 0; g < ng; ++g) {
      const int64_t gi = un * kGroups + g;
      __m512i iacc[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) iacc[c] = _mm512_set1_epi32(corr[c][gi]);
      const uint64_t xoff = un * kUnitX + g * kGroupX;
#pragma GCC unroll 16
      for (int k = 0; k < kDw; ++k) {
        const __m512i wv = _mm512_load_si512(pq + (g * kDw + k) * 64);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          int32_t xv;
          std::memcpy(&xv, xrow[c] + xoff + 4 * k, 4);
          iacc[c] = _mm512_dpbusd_epi32(iacc[c], wv, _mm512_set1_epi32(xv));
        }
      }
      const __m512 sc = _mm512_load_ps(ps + g * kTileRows);
      if constexpr (kAct32) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(iacc[c]), sc);
          facc[c] = _mm512_fmadd_ps(p, _mm512_set1_ps(xd[c][gi]), facc[c]);
        }
      } else {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          sacc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[c]), sc, sacc[c]);
        if constexpr (kBias) {
          const __m512 bi = _mm512_load_ps(pb + g * kTileRows);
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c)
            sacc[c] = _mm512_fnmadd_ps(bi, _mm512_set1_ps(gsum[c][gi]), sacc[c]);
        }
      }
    }
    if constexpr (!kAct32)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        facc[c] = _mm512_fmadd_ps(sacc[c], _mm512_set1_ps(xd[c][un]), facc[c]);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (c0 + c) * y_stride, mask, facc[c]);
}

// The last n_cols (< kCols) activation rows, through the kernel instantiated for exactly that many.
template <bool kAct32, int kGV, bool kBias, int C>
void tile_tail(int n_cols, const std::byte* packed, int64_t n_units, int last_groups,
               const std::byte* x, uint64_t x_stride, const ActInfo& a, int64_t c0, float* y,
               uint64_t y_stride, __mmask16 mask) {
  if constexpr (C > 0) {
    if (n_cols == C) {
      return tile_kernel<kAct32, kGV, kBias, C>(packed, n_units, last_groups, x, x_stride, a, c0, y,
                                                y_stride, mask);
    }
    tile_tail<kAct32, kGV, kBias, C - 1>(n_cols, packed, n_units, last_groups, x, x_stride, a, c0,
                                         y, y_stride, mask);
  }
}

template <bool kAct32, int kGV, bool kBias>
void gemm_impl(const GemmFormat& f, PackTileFn pack, int64_t n, const std::byte* w,
               uint64_t w_stride, int64_t n_w, const std::byte* x, uint64_t x_stride, int64_t n_x,
               float* y, uint64_t y_stride) {
  constexpr int kGroups = kGemmUnit / kGV;
  const int64_t n_units = (n + kGemmUnit - 1) / kGemmUnit;
  const int64_t n_groups = n / kGV;
  const int last_groups = static_cast<int>(n_groups - (n_units - 1) * kGroups);

  ActInfo a;
  a.n_scales = kAct32 ? n_groups : n_units;
  a.n_groups = n_groups;
  const uint64_t scale_bytes = static_cast<uint64_t>(n_x * a.n_scales) * sizeof(float);
  const uint64_t group_bytes = static_cast<uint64_t>(n_x * n_groups) * 4;
  std::byte* ab = t_act.get(scale_bytes + 2 * group_bytes);
  a.xd = reinterpret_cast<float*>(ab);
  a.corr = reinterpret_cast<int32_t*>(ab + scale_bytes);
  a.gsum = reinterpret_cast<float*>(ab + scale_bytes + group_bytes);
  for (int64_t c = 0; c < n_x; ++c) {
    prepare_row<kAct32, kGV>(x + c * x_stride, n, f.offset, kBias, a.xd + c * a.n_scales,
                             a.corr + c * n_groups, a.gsum + c * n_groups);
  }

  std::byte* packed = t_packed.get(n_units * unit_bytes(kGroups, kBias));
  for (int64_t r0 = 0; r0 < n_w; r0 += kTileRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kTileRows, n_w - r0));
    pack(f, w + r0 * w_stride, w_stride, rows, n_units, last_groups, packed);
    // The next tile's rows are fetched into L2 (prefetcht1) while this one is multiplied: weights
    // of a large or freshly loaded matrix come from DRAM, and unpacking would otherwise wait on
    // each line. Requested into L1 (prefetcht0) instead, prefill was slower: pp512 of the 16-layer
    // qwen3-30b-a3b preset, 2 threads, Zen 4, 6 interleaved rounds: 176-186 t/s (the first round
    // 149), 180-194 into L2.
    const int64_t next_rows = std::min<int64_t>(kTileRows, n_w - r0 - kTileRows);
    for (int64_t r = 0; r < next_rows; ++r) {
      const char* p = reinterpret_cast<const char*>(w + (r0 + kTileRows + r) * w_stride);
      for (uint64_t off = 0; off < w_stride; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    float* yt = y + r0;
    int64_t c0 = 0;
    for (; c0 + kCols <= n_x; c0 += kCols) {
      tile_kernel<kAct32, kGV, kBias, kCols>(packed, n_units, last_groups, x, x_stride, a, c0, yt,
                                             y_stride, mask);
    }
    if (c0 < n_x) {
      tile_tail<kAct32, kGV, kBias, kCols - 1>(static_cast<int>(n_x - c0), packed, n_units,
                                               last_groups, x, x_stride, a, c0, yt, y_stride, mask);
    }
  }
}

}  // namespace

// The Q4_K format with its AVX-512 unpacker is packed by pack_tile_q4_K, which addresses rows by
// 32-bit offsets (up to 15 rows).
bool gemm_packs_directly(const GemmFormat& f, uint64_t w_stride) {
  return f.unpack == unpack_q4_K && w_stride * kTileRows < (uint64_t{1} << 31);
}

void gemm(const GemmFormat& f, int64_t n, const void* w, uint64_t w_stride, int64_t n_w,
          const void* x, uint64_t x_stride, int64_t n_x, float* y, uint64_t y_stride) {
  const auto* wb = static_cast<const std::byte*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  if (f.act_type == GgmlType::Q8_0 && f.group_values == 32 && !f.has_bias) {
    return gemm_impl<true, 32, false>(f, pack_tile<8, false>, n, wb, w_stride, n_w, xb, x_stride,
                                      n_x, y, y_stride);
  }
  if (f.act_type == GgmlType::Q8_K && n % kGemmUnit == 0) {
    if (gemm_packs_directly(f, w_stride)) {
      return gemm_impl<false, 32, true>(f, pack_tile_q4_K, n, wb, w_stride, n_w, xb, x_stride, n_x,
                                        y, y_stride);
    }
    if (f.group_values == 32 && f.has_bias)
      return gemm_impl<false, 32, true>(f, pack_tile<8, true>, n, wb, w_stride, n_w, xb, x_stride,
                                        n_x, y, y_stride);
    if (f.group_values == 32)
      return gemm_impl<false, 32, false>(f, pack_tile<8, false>, n, wb, w_stride, n_w, xb, x_stride,
                                         n_x, y, y_stride);
    if (f.group_values == 16 && f.has_bias)
      return gemm_impl<false, 16, true>(f, pack_tile<16, true>, n, wb, w_stride, n_w, xb, x_stride,
                                        n_x, y, y_stride);
    if (f.group_values == 16)
      return gemm_impl<false, 16, false>(f, pack_tile<16, false>, n, wb, w_stride, n_w, xb,
                                         x_stride, n_x, y, y_stride);
  }
  fail("gemm: unsupported format (activations {}, {}-value groups, bias {}, n {})",
       type_name(f.act_type), f.group_values, f.has_bias, n);
}

GemmUnpackFn gemm_unpacker(GgmlType weight) {
  switch (weight) {
    case GgmlType::Q4_K:
      return unpack_q4_K;
    case GgmlType::Q5_K:
      return unpack_q5_K;
    case GgmlType::Q6_K:
      return unpack_q6_K;
    case GgmlType::Q8_0:
      return unpack_q8_0;
    case GgmlType::IQ4_XS:
      return unpack_iq4_xs;
    case GgmlType::MXFP4:
      return unpack_mxfp4;
    case GgmlType::IQ2_XXS:
      return unpack_iq2_xxs;
    case GgmlType::IQ2_XS:
      return unpack_iq2_xs;
    case GgmlType::IQ2_S:
      return unpack_iq2_s;
    case GgmlType::IQ3_XXS:
      return unpack_iq3_xxs;
    case GgmlType::IQ3_S:
      return unpack_iq3_s;
    case GgmlType::IQ1_S:
      return unpack_iq1_s;
    case GgmlType::IQ1_M:
      return unpack_iq1_m;
    default: {
      const GemmFormat* f = gemm_format(weight);
      return f ? f->unpack : nullptr;
    }
  }
}

namespace {

template <GgmlType kType>
void gemm_of(int64_t n, const void* w, uint64_t w_stride, int64_t n_w, const void* x,
             uint64_t x_stride, int64_t n_x, float* y, uint64_t y_stride) {
  static const GemmFormat f = [] {
    GemmFormat g = *gemm_format(kType);
    g.unpack = gemm_unpacker(kType);
    return g;
  }();
  gemm(f, n, w, w_stride, n_w, x, x_stride, n_x, y, y_stride);
}

}  // namespace

GemmFn gemm_kernel(GgmlType weight) {
  switch (weight) {
    case GgmlType::Q4_K:
      return gemm_of<GgmlType::Q4_K>;
    case GgmlType::Q5_K:
      return gemm_of<GgmlType::Q5_K>;
    case GgmlType::Q6_K:
      return gemm_of<GgmlType::Q6_K>;
    case GgmlType::Q2_K:
      return gemm_of<GgmlType::Q2_K>;
    case GgmlType::Q3_K:
      return gemm_of<GgmlType::Q3_K>;
    case GgmlType::IQ4_XS:
      return gemm_of<GgmlType::IQ4_XS>;
    case GgmlType::Q8_0:
      return gemm_of<GgmlType::Q8_0>;
    case GgmlType::MXFP4:
      return gemm_of<GgmlType::MXFP4>;
    case GgmlType::IQ2_XXS:
      return gemm_of<GgmlType::IQ2_XXS>;
    case GgmlType::IQ2_XS:
      return gemm_of<GgmlType::IQ2_XS>;
    case GgmlType::IQ2_S:
      return gemm_of<GgmlType::IQ2_S>;
    case GgmlType::IQ3_XXS:
      return gemm_of<GgmlType::IQ3_XXS>;
    case GgmlType::IQ3_S:
      return gemm_of<GgmlType::IQ3_S>;
    case GgmlType::IQ1_S:
      return gemm_of<GgmlType::IQ1_S>;
    case GgmlType::IQ1_M:
      return gemm_of<GgmlType::IQ1_M>;
    default:
      return nullptr;
  }
}

}  // namespace sluice::avx512
