// AVX2 dot kernels for the lattice i-quants against Q8_K activations, single- and multi-row; the
// scalar twins live in dot_iq.cpp. Per 32-value sub-block the grid points are gathered by index
// (scalar loads, then one vector), giving unsigned magnitudes for maddubs; the weight signs are
// applied to the activation bytes instead (q8 is within ±127, so negation is exact), and the odd
// integer sub-block scales are applied by madd, so every super-block sum is the exact integer the
// scalar twin computes. IQ1's values are signed (−1, 0, +1) and go through sign_epi8 instead.
// The multi-row forms unpack each sub-block once and apply it to up to kMaxDotRows activation rows.
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstring>

#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"

namespace sluice::avx2 {

using namespace avx2_detail;

namespace {

// kSignsIq2 expanded to bytes: byte j of entry c is 0xFF when value j is negative, else 0.
constexpr std::array<uint64_t, 128> kSignMasks = [] {
  std::array<uint64_t, 128> t{};
  for (unsigned c = 0; c < 128; ++c)
    for (int j = 0; j < 8; ++j)
      if ((iq::kSignsIq2[c] >> j) & 1) t[c] |= uint64_t{0xFF} << (8 * j);
  return t;
}();

__m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Four 8-bit sign bytes (bit j of byte g: value 8g + j negative) as a 32-byte 0xFF/0 mask.
[[gnu::always_inline]] inline __m256i sign_mask_from_bits(uint32_t bits) {
  const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

[[gnu::always_inline]] inline __m256i scales2(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                          _mm_set1_epi16(static_cast<int16_t>(s0)));
}

// One unpacked 32-value sub-block of an IQ2/IQ3 type: unsigned grid magnitudes, a 0xFF mask of
// negative values and the int16 scale of each half.
struct SignedGrid {
  __m256i grid;
  __m256i neg;
  __m256i scales;
};

// Σ over blocks of d(block) · d8 · Σ_sub-blocks scale · grid · sign · q8, times `post`, for NX
// activation rows. unpack(block, ib) returns the SignedGrid of sub-block ib; d(block) its scale.
template <int NX, class Block, class Unpack, class Scale>
void dot_signed_grid(int64_t n, const void* w, const void* x, uint64_t stride, float post,
                     float* out, Unpack unpack, Scale d_of) {
  const auto* a = static_cast<const Block*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    prefetch_weights(a + i);
    const BlockQ8K* b[NX];
    __m256i sum[NX];
    for (int r = 0; r < NX; ++r) {
      b[r] = reinterpret_cast<const BlockQ8K*>(xb + r * stride) + i;
      sum[r] = _mm256_setzero_si256();
    }
    for (int ib = 0; ib < 8; ++ib) {
      const SignedGrid s = unpack(a[i], ib);
      for (int r = 0; r < NX; ++r) {
        const __m256i q = load256(b[r]->qs + 32 * ib);
        const __m256i signed_q = _mm256_sub_epi8(_mm256_xor_si256(q, s.neg), s.neg);
        sum[r] = _mm256_add_epi32(sum[r],
                                  _mm256_madd_epi16(_mm256_maddubs_epi16(s.grid, signed_q), s.scales));
      }
    }
    const float d = d_of(a[i]);
    for (int r = 0; r < NX; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * b[r]->d), _mm256_cvtepi32_ps(sum[r]), acc[r]);
  }
  for (int r = 0; r < NX; ++r) out[r] = post * hsum(acc[r]);
}

// One unpacked IQ1 sub-block: signed grid bytes (−1, 0, +1), the delta sign of each 8-value group
// as ±1 bytes, and the int16 scale of each half.
struct Iq1Grid {
  __m256i grid;
  __m256i delta;
  __m256i scales;
};

// Σ over blocks of d(block) · d8 · Σ scale · (grid + delta_sign / 8) · q8 for NX rows.
template <int NX, class Block, class Unpack, class Scale>
void dot_iq1(int64_t n, const void* w, const void* x, uint64_t stride, float* out, Unpack unpack,
             Scale d_of) {
  const auto* a = static_cast<const Block*>(w);
  const auto* xb = static_cast<const std::byte*>(x);
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc[NX];
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const BlockQ8K* b[NX];
    __m256i grid_sum[NX], delta_sum[NX];
    for (int r = 0; r < NX; ++r) {
      b[r] = reinterpret_cast<const BlockQ8K*>(xb + r * stride) + i;
      grid_sum[r] = _mm256_setzero_si256();
      delta_sum[r] = _mm256_setzero_si256();
    }
    for (int ib = 0; ib < 8; ++ib) {
      const Iq1Grid s = unpack(a[i], ib);
      for (int r = 0; r < NX; ++r) {
        const __m256i q = load256(b[r]->qs + 32 * ib);
        const __m256i gq = _mm256_maddubs_epi16(ones, _mm256_sign_epi8(q, s.grid));
        const __m256i dq = _mm256_maddubs_epi16(ones, _mm256_sign_epi8(q, s.delta));
        grid_sum[r] = _mm256_add_epi32(grid_sum[r], _mm256_madd_epi16(gq, s.scales));
        delta_sum[r] = _mm256_add_epi32(delta_sum[r], _mm256_madd_epi16(dq, s.scales));
      }
    }
    const float d = d_of(a[i]);
    for (int r = 0; r < NX; ++r) {
      const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(delta_sum[r]), _mm256_set1_ps(iq::kIq1Delta),
                                       _mm256_cvtepi32_ps(grid_sum[r]));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * b[r]->d), v, acc[r]);
    }
  }
  for (int r = 0; r < NX; ++r) out[r] = hsum(acc[r]);
}

float half_d(uint16_t d) {
  return fp16_scalar(d);
}

// Per-type sub-block unpackers (layouts: dequant_iq.cpp).

[[gnu::always_inline]] inline SignedGrid unpack_iq2_xxs(const BlockIQ2XXS& blk, int ib) {
  uint32_t idx, meta;
  std::memcpy(&idx, blk.qs + 4 * ib, 4);
  std::memcpy(&meta, blk.qs + 4 * ib + 2, 4);
  const __m256i grid = _mm256_set_epi64x(
      static_cast<int64_t>(iq::kIq2xxsGrid[idx >> 24]), static_cast<int64_t>(iq::kIq2xxsGrid[(idx >> 16) & 0xFF]),
      static_cast<int64_t>(iq::kIq2xxsGrid[(idx >> 8) & 0xFF]), static_cast<int64_t>(iq::kIq2xxsGrid[idx & 0xFF]));
  const __m256i neg = _mm256_set_epi64x(
      static_cast<int64_t>(kSignMasks[(meta >> 21) & 127]), static_cast<int64_t>(kSignMasks[(meta >> 14) & 127]),
      static_cast<int64_t>(kSignMasks[(meta >> 7) & 127]), static_cast<int64_t>(kSignMasks[meta & 127]));
  const int s = static_cast<int>(2 * (meta >> 28) + 1);
  return {grid, neg, _mm256_set1_epi16(static_cast<int16_t>(s))};
}

[[gnu::always_inline]] inline SignedGrid unpack_iq2_xs(const BlockIQ2XS& blk, int ib) {
  const uint16_t* q = blk.qs + 4 * ib;
  const __m256i grid = _mm256_set_epi64x(
      static_cast<int64_t>(iq::kIq2xsGrid[q[3] & 511]), static_cast<int64_t>(iq::kIq2xsGrid[q[2] & 511]),
      static_cast<int64_t>(iq::kIq2xsGrid[q[1] & 511]), static_cast<int64_t>(iq::kIq2xsGrid[q[0] & 511]));
  const __m256i neg = _mm256_set_epi64x(
      static_cast<int64_t>(kSignMasks[q[3] >> 9]), static_cast<int64_t>(kSignMasks[q[2] >> 9]),
      static_cast<int64_t>(kSignMasks[q[1] >> 9]), static_cast<int64_t>(kSignMasks[q[0] >> 9]));
  return {grid, neg, scales2(2 * (blk.scales[ib] & 0xF) + 1, 2 * (blk.scales[ib] >> 4) + 1)};
}

[[gnu::always_inline]] inline SignedGrid unpack_iq2_s(const BlockIQ2S& blk, int ib) {
  const uint8_t* qs = blk.qs + 4 * ib;
  const int qh = blk.qh[ib];
  const __m256i grid = _mm256_set_epi64x(
      static_cast<int64_t>(iq::kIq2sGrid[qs[3] | ((qh << 2) & 0x300)]),
      static_cast<int64_t>(iq::kIq2sGrid[qs[2] | ((qh << 4) & 0x300)]),
      static_cast<int64_t>(iq::kIq2sGrid[qs[1] | ((qh << 6) & 0x300)]),
      static_cast<int64_t>(iq::kIq2sGrid[qs[0] | ((qh << 8) & 0x300)]));
  uint32_t signs;
  std::memcpy(&signs, blk.qs + 32 + 4 * ib, 4);
  return {grid, sign_mask_from_bits(signs),
          scales2(2 * (blk.scales[ib] & 0xF) + 1, 2 * (blk.scales[ib] >> 4) + 1)};
}

[[gnu::always_inline]] inline SignedGrid unpack_iq3_xxs(const BlockIQ3XXS& blk, int ib) {
  const uint8_t* qs = blk.qs + 8 * ib;
  uint32_t meta;
  std::memcpy(&meta, blk.qs + 64 + 4 * ib, 4);
  const __m256i grid = _mm256_set_epi32(
      static_cast<int>(iq::kIq3xxsGrid[qs[7]]), static_cast<int>(iq::kIq3xxsGrid[qs[6]]),
      static_cast<int>(iq::kIq3xxsGrid[qs[5]]), static_cast<int>(iq::kIq3xxsGrid[qs[4]]),
      static_cast<int>(iq::kIq3xxsGrid[qs[3]]), static_cast<int>(iq::kIq3xxsGrid[qs[2]]),
      static_cast<int>(iq::kIq3xxsGrid[qs[1]]), static_cast<int>(iq::kIq3xxsGrid[qs[0]]));
  const __m256i neg = _mm256_set_epi64x(
      static_cast<int64_t>(kSignMasks[(meta >> 21) & 127]), static_cast<int64_t>(kSignMasks[(meta >> 14) & 127]),
      static_cast<int64_t>(kSignMasks[(meta >> 7) & 127]), static_cast<int64_t>(kSignMasks[meta & 127]));
  const int s = static_cast<int>(2 * (meta >> 28) + 1);
  return {grid, neg, _mm256_set1_epi16(static_cast<int16_t>(s))};
}

[[gnu::always_inline]] inline SignedGrid unpack_iq3_s(const BlockIQ3S& blk, int ib) {
  const uint8_t* qs = blk.qs + 8 * ib;
  const int qh = blk.qh[ib];
  int idx[8];
  for (int k = 0; k < 8; ++k) idx[k] = qs[k] | (((qh >> k) & 1) << 8);
  const __m256i grid = _mm256_set_epi32(
      static_cast<int>(iq::kIq3sGrid[idx[7]]), static_cast<int>(iq::kIq3sGrid[idx[6]]),
      static_cast<int>(iq::kIq3sGrid[idx[5]]), static_cast<int>(iq::kIq3sGrid[idx[4]]),
      static_cast<int>(iq::kIq3sGrid[idx[3]]), static_cast<int>(iq::kIq3sGrid[idx[2]]),
      static_cast<int>(iq::kIq3sGrid[idx[1]]), static_cast<int>(iq::kIq3sGrid[idx[0]]));
  uint32_t signs;
  std::memcpy(&signs, blk.signs + 4 * ib, 4);
  const int s = 2 * ((blk.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
  return {grid, sign_mask_from_bits(signs), _mm256_set1_epi16(static_cast<int16_t>(s))};
}

// ±1 in every byte of 8-value group g when bit g of `negative` is clear / set.
[[gnu::always_inline]] inline __m256i delta_signs(unsigned negative) {
  auto lane = [&](int g) { return (negative >> g) & 1 ? int64_t{-1} : int64_t{0x0101010101010101}; };
  return _mm256_set_epi64x(lane(3), lane(2), lane(1), lane(0));
}

[[gnu::always_inline]] inline Iq1Grid unpack_iq1_s(const BlockIQ1S& blk, int ib) {
  const uint16_t qh = blk.qh[ib];
  const uint8_t* qs = blk.qs + 4 * ib;
  const __m256i grid = _mm256_set_epi64x(
      static_cast<int64_t>(iq::kIq1sGrid[qs[3] | (((qh >> 9) & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[2] | (((qh >> 6) & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[1] | (((qh >> 3) & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[0] | ((qh & 7) << 8)]));
  const int s = 2 * ((qh >> 12) & 7) + 1;
  return {grid, delta_signs(qh & 0x8000 ? 15u : 0u), _mm256_set1_epi16(static_cast<int16_t>(s))};
}

float iq1_m_d(const BlockIQ1M& blk) {
  uint16_t sc[4];
  std::memcpy(sc, blk.scales, sizeof sc);
  return half_d(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                      ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
}

[[gnu::always_inline]] inline Iq1Grid unpack_iq1_m(const BlockIQ1M& blk, int ib) {
  uint16_t sc[4];
  std::memcpy(sc, blk.scales, sizeof sc);
  const uint8_t* qs = blk.qs + 4 * ib;
  const int qh0 = blk.qh[2 * ib];
  const int qh1 = blk.qh[2 * ib + 1];
  const __m256i grid = _mm256_set_epi64x(
      static_cast<int64_t>(iq::kIq1sGrid[qs[3] | (((qh1 >> 4) & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[2] | ((qh1 & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[1] | (((qh0 >> 4) & 7) << 8)]),
      static_cast<int64_t>(iq::kIq1sGrid[qs[0] | ((qh0 & 7) << 8)]));
  const unsigned negative = ((qh0 >> 3) & 1) | ((qh0 >> 6) & 2) | (((qh1 >> 3) & 1) << 2) |
                            (((qh1 >> 7) & 1) << 3);
  const int shift = 6 * (ib % 2);
  return {grid, delta_signs(negative),
          scales2(2 * ((sc[ib / 2] >> shift) & 7) + 1, 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1)};
}

template <class Block>
float block_half_d(const Block& blk) {
  return half_d(blk.d);
}

// Runs a kernel template for 1..kMaxDotRows rows.
template <template <int> class K>
void multi(int64_t n, const void* w, const void* x, uint64_t stride, int n_x, float* out) {
  with_row_count(n_x, [&](auto nx) { K<decltype(nx)::value>::run(n, w, x, stride, out); });
}

template <int NX>
struct Iq2Xxs {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_signed_grid<NX, BlockIQ2XXS>(n, w, x, s, 0.125f, out,
        [](const auto& b, int ib) { return unpack_iq2_xxs(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ2XXS>(b); });
  }
};
template <int NX>
struct Iq2Xs {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_signed_grid<NX, BlockIQ2XS>(n, w, x, s, 0.125f, out,
        [](const auto& b, int ib) { return unpack_iq2_xs(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ2XS>(b); });
  }
};
template <int NX>
struct Iq2S {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_signed_grid<NX, BlockIQ2S>(n, w, x, s, 0.125f, out,
        [](const auto& b, int ib) { return unpack_iq2_s(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ2S>(b); });
  }
};
template <int NX>
struct Iq3Xxs {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_signed_grid<NX, BlockIQ3XXS>(n, w, x, s, 0.25f, out,
        [](const auto& b, int ib) { return unpack_iq3_xxs(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ3XXS>(b); });
  }
};
template <int NX>
struct Iq3S {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_signed_grid<NX, BlockIQ3S>(n, w, x, s, 1.0f, out,
        [](const auto& b, int ib) { return unpack_iq3_s(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ3S>(b); });
  }
};
template <int NX>
struct Iq1S {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_iq1<NX, BlockIQ1S>(n, w, x, s, out,
        [](const auto& b, int ib) { return unpack_iq1_s(b, ib); },
        [](const auto& b) { return block_half_d<BlockIQ1S>(b); });
  }
};
template <int NX>
struct Iq1M {
  static void run(int64_t n, const void* w, const void* x, uint64_t s, float* out) {
    dot_iq1<NX, BlockIQ1M>(n, w, x, s, out,
        [](const auto& b, int ib) { return unpack_iq1_m(b, ib); },
        [](const auto& b) { return iq1_m_d(b); });
  }
};

template <template <int> class K>
float single(int64_t n, const void* w, const void* x) {
  float out;
  K<1>::run(n, w, x, 0, &out);
  return out;
}

}  // namespace

float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x) { return single<Iq2Xxs>(n, w, x); }
float vec_dot_iq2_xs(int64_t n, const void* w, const void* x) { return single<Iq2Xs>(n, w, x); }
float vec_dot_iq2_s(int64_t n, const void* w, const void* x) { return single<Iq2S>(n, w, x); }
float vec_dot_iq3_xxs(int64_t n, const void* w, const void* x) { return single<Iq3Xxs>(n, w, x); }
float vec_dot_iq3_s(int64_t n, const void* w, const void* x) { return single<Iq3S>(n, w, x); }
float vec_dot_iq1_s(int64_t n, const void* w, const void* x) { return single<Iq1S>(n, w, x); }
float vec_dot_iq1_m(int64_t n, const void* w, const void* x) { return single<Iq1M>(n, w, x); }

void vec_dot_iq2_xxs_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq2Xxs>(n, w, x, s, n_x, out);
}
void vec_dot_iq2_xs_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq2Xs>(n, w, x, s, n_x, out);
}
void vec_dot_iq2_s_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq2S>(n, w, x, s, n_x, out);
}
void vec_dot_iq3_xxs_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq3Xxs>(n, w, x, s, n_x, out);
}
void vec_dot_iq3_s_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq3S>(n, w, x, s, n_x, out);
}
void vec_dot_iq1_s_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq1S>(n, w, x, s, n_x, out);
}
void vec_dot_iq1_m_multi(int64_t n, const void* w, const void* x, uint64_t s, int n_x, float* out) {
  multi<Iq1M>(n, w, x, s, n_x, out);
}

}  // namespace sluice::avx2
