// Value tables of the non-linear quant types, shared by the scalar dequantizers and SIMD kernels.
// Grid entries pack several values into one integer, value k in byte k (bits 8k..8k+7), which is
// also their memory order on little-endian machines, so SIMD code may load them as byte vectors.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace sluice::iq {

// IQ2 grids: 8 unsigned magnitudes per entry (each 8, 25 or 43), signs come separately.
extern const uint64_t kIq2xxsGrid[256];
extern const uint64_t kIq2xsGrid[512];
extern const uint64_t kIq2sGrid[1024];
// IQ3 grids: 4 unsigned magnitudes per entry.
extern const uint32_t kIq3xxsGrid[256];
extern const uint32_t kIq3sGrid[512];
// IQ1 grid: 8 signed bytes per entry, each -1, 0 or +1.
extern const uint64_t kIq1sGrid[2048];

// IQ1_S / IQ1_M shift added to every grid value before scaling (sign chosen per group).
constexpr float kIq1Delta = 0.125f;

// IQ2/IQ3 sign patterns: 7 stored bits give the signs of values 0..6 (bit set = negative); the
// eighth sign is implied by even parity, so bit 7 is the parity of the low seven.
constexpr std::array<uint8_t, 128> kSignsIq2 = [] {
  std::array<uint8_t, 128> t{};
  for (unsigned i = 0; i < 128; ++i)
    t[i] = static_cast<uint8_t>(i | ((std::popcount(i) & 1u) << 7));
  return t;
}();

// IQ4_NL / IQ4_XS: the 16 non-uniform levels a nibble selects.
constexpr std::array<int8_t, 16> kValuesIq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4: the 16 FP4 (e2m1) values, doubled so they are integers; pair with e8m0_to_fp32_half.
constexpr std::array<int8_t, 16> kValuesMxfp4 = {0, 1,  2,  3,  4,  6,  8,  12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};

// Byte k of a grid entry.
inline uint8_t grid_byte(uint64_t entry, int k) { return static_cast<uint8_t>(entry >> (8 * k)); }

}  // namespace sluice::iq
