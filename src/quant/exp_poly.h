// The constants of the SIMD softmax exp (attn_tiles_avx2.cpp, attn_tiles_avx512.cpp), in one place
// so the two widths compute every weight alike: exp(x) for x ≤ 0 as 2^n · exp(r), x = n·ln2 + r
// with |r| ≤ ln2/2, ln2 split in two parts so n·ln2 is exact, and a degree-7 polynomial for exp(r)
// (Cephes' expf coefficients, ~1 ulp). Below kExpLow, where 2^n leaves the normal range, the weight
// is 0.
#pragma once

namespace sluice::exp_poly {

inline constexpr float kExpLow = -87.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
// exp(r) ≈ 1 + r + r²·(((((kP0·r + kP1)·r + kP2)·r + kP3)·r + kP4)·r + kP5)
inline constexpr float kP0 = 1.9875691500e-4f;
inline constexpr float kP1 = 1.3981999507e-3f;
inline constexpr float kP2 = 8.3334519073e-3f;
inline constexpr float kP3 = 4.1665795894e-2f;
inline constexpr float kP4 = 1.6666665459e-1f;
inline constexpr float kP5 = 5.0000001201e-1f;

}  // namespace sluice::exp_poly
