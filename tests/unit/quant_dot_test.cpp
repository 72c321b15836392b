// Dot kernels and activation quantizers: every kernel against dequantize_row + a double-precision
// dot with the same quantized activations (tight: only float rounding may differ), against the
// unquantized activations (bounded by the activation grid step), and every AVX2 and AVX-512 kernel
// against its scalar twin. SIMD cases are skipped on CPUs without the instruction set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"
#include "quant/dispatch.h"
#include "quant/gemm.h"
#include "quant/kernels.h"

using namespace sluice;
using namespace sluice::test;

namespace {

const GgmlType kDotTypes[] = {
    GgmlType::F32,    GgmlType::F16,   GgmlType::BF16, GgmlType::Q8_0,
    GgmlType::Q4_0,   GgmlType::Q4_1,  GgmlType::Q5_0, GgmlType::Q5_1,
    GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
    GgmlType::Q4_K,   GgmlType::Q5_K,  GgmlType::Q6_K, GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,   GgmlType::IQ1_S,  GgmlType::IQ1_M,
};

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Scalar};
  if (cpu_has_avx2()) v.push_back(Isa::Avx2);
  if (cpu_has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

// Activations in the vec-dot format of kernels k: bytes for the kernel and their float values.
struct Activations {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
Activations convert(const DotKernels& k, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Activations a;
  if (!k.quantize) {
    a.bytes.resize(x.size() * sizeof(float));
    std::memcpy(a.bytes.data(), x.data(), a.bytes.size());
    a.values = x;
    return a;
  }
  a.bytes.resize(row_bytes(k.vec_dot_type, static_cast<uint64_t>(n)));
  k.quantize(x.data(), a.bytes.data(), n);
  a.values = dequantized(k.vec_dot_type, a.bytes.data(), n);
  return a;
}

// Row lengths to try: one block, a few blocks, and a typical hidden size; float types also get an
// odd length so the vector kernels' tails run.
std::vector<int64_t> lengths(GgmlType t) {
  const int64_t b = type_traits(t).block_elems;
  if (b == 1) return {1, 7, 37, 1037, 2048};
  return {b, 3 * b, 2048};
}

std::string label(GgmlType t, Isa isa, int64_t n) {
  return std::string(type_name(t)) + "/" + isa_name(isa) + "/n=" + std::to_string(n);
}

}  // namespace

class VecDot : public ::testing::TestWithParam<GgmlType> {};

TEST_P(VecDot, MatchesDequantizedReference) {
  const GgmlType t = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(t));
  for (Isa isa : isas()) {
    const DotKernels k = dot_kernels(t, isa);
    ASSERT_NE(k.vec_dot, nullptr) << type_name(t) << " should have a dot kernel";
    for (int64_t n : lengths(t)) {
      for (int rep = 0; rep < 4; ++rep) {
        const auto w = random_row(t, n, rng);
        const auto x = random_activations(n, rng);
        const Activations a = convert(k, x);
        const auto wf = dequantized(t, w.data(), n);
        const RefDot ref = ref_dot(wf.data(), a.values.data(), n);
        const float got = k.vec_dot(n, w.data(), a.bytes.data());
        EXPECT_NEAR(got, ref.value, float_tolerance(ref, n / type_traits(t).block_elems))
            << label(t, isa, n) << " rep " << rep;
      }
    }
  }
}

// The activation grid step bounds the error: |x - q * d| <= d / 2 (plus the rounding of d to
// half precision for Q8_0), so |dot error| <= sum |w_i| * 0.6 * d(block of i).
TEST_P(VecDot, CloseToUnquantizedActivations) {
  const GgmlType t = GetParam();
  std::mt19937 rng(99 + static_cast<int>(t));
  const int64_t n = 2048;
  for (Isa isa : isas()) {
    const DotKernels k = dot_kernels(t, isa);
    const auto w = random_row(t, n, rng);
    const auto x = random_activations(n, rng);
    const Activations a = convert(k, x);
    const auto wf = dequantized(t, w.data(), n);
    const RefDot exact = ref_dot(wf.data(), x.data(), n);
    double bound = float_tolerance(exact, n / type_traits(t).block_elems);
    if (k.quantize) {
      // The per-value step is recovered from the dequantized activations' own block maximum.
      const int64_t blk = type_traits(k.vec_dot_type).block_elems;
      for (int64_t b = 0; b < n / blk; ++b) {
        float amax = 0;
        for (int64_t i = b * blk; i < (b + 1) * blk; ++i) amax = std::max(amax, std::fabs(x[i]));
        for (int64_t i = b * blk; i < (b + 1) * blk; ++i)
          bound += std::fabs(wf[i]) * 0.6 * amax / 127.0;
      }
    }
    const float got = k.vec_dot(n, w.data(), a.bytes.data());
    EXPECT_NEAR(got, exact.value, bound) << label(t, isa, n);
    if (!k.quantize) {
      EXPECT_NEAR(got, exact.value, 1e-4 * exact.abs_sum) << label(t, isa, n);
    }
  }
}

TEST_P(VecDot, SimdMatchesScalar) {
  const GgmlType t = GetParam();
  if (!cpu_has_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const DotKernels s = dot_kernels(t, Isa::Scalar);
  std::mt19937 rng(7 + static_cast<int>(t));
  for (Isa isa : isas()) {
    if (isa == Isa::Scalar) continue;
    const DotKernels v = dot_kernels(t, isa);
    for (int64_t n : lengths(t)) {
      for (int rep = 0; rep < 8; ++rep) {
        const auto w = random_row(t, n, rng);
        const Activations a = convert(s, random_activations(n, rng));
        const auto wf = dequantized(t, w.data(), n);
        const RefDot ref = ref_dot(wf.data(), a.values.data(), n);
        const float want = s.vec_dot(n, w.data(), a.bytes.data());
        const float got = v.vec_dot(n, w.data(), a.bytes.data());
        EXPECT_NEAR(got, want, 2 * float_tolerance(ref, n / type_traits(t).block_elems))
            << label(t, isa, n) << " rep " << rep;
      }
    }
  }
}

// The AVX-512 dots (Q8_0, IQ2_XXS, Q2_K; single and multi-row) against the scalar kernels: odd block
// counts run the Q8_0 one-block tail, and Q8_0 rows of -128 weight bytes (|w| = 128 as an unsigned
// byte) against ±127 activations run its extremes.
TEST(VecDot, Avx512MatchesScalar) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(512);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::IQ2_XXS, GgmlType::Q2_K}) {
    const DotKernels s = dot_kernels(t, Isa::Scalar);
    const DotKernels v = dot_kernels(t, Isa::Avx512);
    ASSERT_NE(v.vec_dot, dot_kernels(t, Isa::Avx2).vec_dot) << type_name(t);
    ASSERT_NE(v.vec_dot_multi, nullptr) << type_name(t);
    const int64_t blk = type_traits(t).block_elems;
    for (int64_t n : {blk, 3 * blk, 6 * blk, 2048 / blk * blk, 4096 + blk}) {
      const uint64_t stride = row_bytes(v.vec_dot_type, static_cast<uint64_t>(n)) + 48;
      for (int rep = 0; rep < 4; ++rep) {
        auto w = random_row(t, n, rng);
        const bool extremes = t == GgmlType::Q8_0 && rep == 3;
        if (extremes) {
          for (int64_t b = 0; b < n / kQK; ++b)
            std::memset(w.data() + b * sizeof(BlockQ8_0) + 2, 0x80, kQK);
        }
        std::vector<uint8_t> xq(stride * kMaxDotRows);
        std::vector<RefDot> refs;
        const auto wf = dequantized(t, w.data(), n);
        for (int k = 0; k < kMaxDotRows; ++k) {
          std::vector<float> x = random_activations(n, rng);
          if (extremes) {
            for (int64_t i = 0; i < n; ++i) x[i] = (i + k) % 2 ? 1.0f : -1.0f;
          }
          s.quantize(x.data(), xq.data() + k * stride, n);
          const auto xf = dequantized(v.vec_dot_type, xq.data() + k * stride, n);
          refs.push_back(ref_dot(wf.data(), xf.data(), n));
        }
        for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
          float out[kMaxDotRows];
          v.vec_dot_multi(n, w.data(), xq.data(), stride, n_x, out);
          for (int k = 0; k < n_x; ++k) {
            const float want = s.vec_dot(n, w.data(), xq.data() + k * stride);
            const double tol = 2 * float_tolerance(refs[k], n / blk);
            EXPECT_NEAR(out[k], want, tol) << label(t, Isa::Avx512, n) << " rep " << rep
                                           << " n_x " << n_x << " row " << k;
            if (n_x == 1) {
              EXPECT_NEAR(v.vec_dot(n, w.data(), xq.data() + k * stride), want, tol)
                  << label(t, Isa::Avx512, n);
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VecDot, ::testing::ValuesIn(kDotTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(VecDot, AvxSetCoversTheHotTypes) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS,
                     GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                     GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    EXPECT_NE(dot_kernels(t, Isa::Avx2).vec_dot, dot_kernels(t, Isa::Scalar).vec_dot)
        << type_name(t);
  }
}

TEST(VecDot, FallbackTypesHaveNoKernelAndIntegersAreRejected) {
  for (GgmlType t : {GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    const DotKernels k = dot_kernels(t, Isa::Scalar);
    EXPECT_EQ(k.vec_dot, nullptr) << type_name(t);
    EXPECT_EQ(k.vec_dot_type, GgmlType::F32) << type_name(t);
    EXPECT_NE(k.f32_dot, nullptr) << type_name(t);
  }
  EXPECT_THROW(dot_kernels(GgmlType::I32, Isa::Scalar), Error);
  EXPECT_THROW(dot_kernels(GgmlType::I8, Isa::Avx2), Error);
}

// Rows that exercise the rounding corner cases: all zero, exact integers, exact .5 ties (which
// must round to even in both sets), a single huge outlier and denormal-sized values.
std::vector<std::vector<float>> quantize_cases(int64_t n) {
  std::vector<std::vector<float>> rows;
  rows.emplace_back(n, 0.0f);
  std::vector<float> ints(n), ties(n), outlier(n, 0.001f), tiny(n);
  for (int64_t i = 0; i < n; ++i) {
    ints[i] = static_cast<float>(static_cast<int>(i % 255) - 127);
    ties[i] = i % 32 == 0 ? 127.0f : static_cast<float>(static_cast<int>(i % 200) - 100) + 0.5f;
    tiny[i] = (i % 3 - 1) * 1e-39f;
  }
  outlier[n / 2] = -1e4f;
  rows.push_back(ints);
  rows.push_back(ties);
  rows.push_back(outlier);
  rows.push_back(tiny);
  std::mt19937 rng(5);
  for (int r = 0; r < 4; ++r) rows.push_back(random_activations(n, rng));
  return rows;
}

TEST(ActivationQuant, Q8_0StepBoundAndSimdBytesEqual) {
  const int64_t n = 512;
  for (const auto& x : quantize_cases(n)) {
    std::vector<BlockQ8_0> s(n / kQK), v(n / kQK);
    scalar::quantize_row_q8_0(x.data(), s.data(), n);
    const auto back = dequantized(GgmlType::Q8_0, s.data(), n);
    for (int64_t b = 0; b < n / kQK; ++b) {
      float amax = 0;
      for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[b * kQK + i]));
      // Below the smallest normal half the stored scale underflows and the block reads as zero.
      const float bound = amax / 127.0f >= 0x1p-14f ? 0.6f * amax / 127.0f : amax;
      for (int i = 0; i < kQK; ++i) {
        ASSERT_LE(std::fabs(back[b * kQK + i] - x[b * kQK + i]), bound)
            << "block " << b << " value " << i;
      }
    }
    if (cpu_has_avx2()) {
      avx2::quantize_row_q8_0(x.data(), v.data(), n);
      EXPECT_EQ(0, std::memcmp(s.data(), v.data(), sizeof(BlockQ8_0) * s.size()));
    }
  }
}

TEST(ActivationQuant, Q8_KStepBoundSumsAndSimdBytesEqual) {
  const int64_t n = 1024;
  for (const auto& x : quantize_cases(n)) {
    std::vector<BlockQ8K> s(n / kQKK), v(n / kQKK);
    scalar::quantize_row_q8_K(x.data(), s.data(), n);
    for (int64_t b = 0; b < n / kQKK; ++b) {
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += s[b].qs[16 * g + i];
        ASSERT_EQ(sum, s[b].bsums[g]) << "block " << b << " group " << g;
      }
      for (int i = 0; i < kQKK; ++i) {
        const float err = std::fabs(s[b].d * s[b].qs[i] - x[b * kQKK + i]);
        // Blocks below kMinActivationAmax are zeroed, so their error is the value itself.
        ASSERT_LE(err, std::max(0.5001f * s[b].d, 1e-30f)) << "block " << b << " value " << i;
      }
    }
    if (cpu_has_avx2()) {
      avx2::quantize_row_q8_K(x.data(), v.data(), n);
      EXPECT_EQ(0, std::memcmp(s.data(), v.data(), sizeof(BlockQ8K) * s.size()));
    }
  }
}

TEST(ActivationQuant, TiesRoundToEven) {
  // amax 127 makes the scale exactly 1, so 2.5 and -3.5 are exact ties.
  std::vector<float> x(kQK, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  BlockQ8_0 b;
  scalar::quantize_row_q8_0(x.data(), &b, kQK);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], -4);
}

TEST(Dispatch, SluiceNoSimdForcesScalar) {
  EXPECT_EQ(select_isa(true, nullptr), Isa::Avx2);
  EXPECT_EQ(select_isa(true, ""), Isa::Avx2);
  EXPECT_EQ(select_isa(true, "0"), Isa::Avx2);
  EXPECT_EQ(select_isa(true, "1"), Isa::Scalar);
  EXPECT_EQ(select_isa(true, "yes"), Isa::Scalar);
  EXPECT_EQ(select_isa(false, nullptr), Isa::Scalar);
  // The process-wide choice follows the same rule for this run's environment, so running the
  // suite with SLUICE_NO_SIMD=1 sends every matmul test through the scalar kernels.
  EXPECT_EQ(active_isa(), select_isa(cpu_has_avx2(), cpu_has_avx512(),
                                     std::getenv("SLUICE_NO_SIMD"), std::getenv("SLUICE_ISA")));
}

TEST(Dispatch, SluiceIsaCapsTheSet) {
  EXPECT_EQ(select_isa(true, true, nullptr, nullptr), Isa::Avx512);
  EXPECT_EQ(select_isa(true, false, nullptr, nullptr), Isa::Avx2);
  EXPECT_EQ(select_isa(false, false, nullptr, nullptr), Isa::Scalar);
  EXPECT_EQ(select_isa(true, true, nullptr, "avx2"), Isa::Avx2);
  EXPECT_EQ(select_isa(true, true, nullptr, "scalar"), Isa::Scalar);
  EXPECT_EQ(select_isa(true, true, nullptr, ""), Isa::Avx512);
  EXPECT_EQ(select_isa(true, false, nullptr, "avx512"), Isa::Avx2);
  EXPECT_EQ(select_isa(true, true, "1", "avx512"), Isa::Scalar);
  EXPECT_THROW(select_isa(true, true, nullptr, "avx-512"), Error);
  EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
}

// Multi-row kernels against the scalar single-row kernel, for every row count they accept, with
// activation rows spaced by a stride larger than one row.
TEST(VecDotMulti, MatchesScalarPerRow) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  std::mt19937 rng(21);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ2_XXS,
                     GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                     GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    const DotKernels s = dot_kernels(t, Isa::Scalar);
    const DotKernels v = dot_kernels(t, Isa::Avx2);
    ASSERT_NE(v.vec_dot_multi, nullptr) << type_name(t);
    for (int64_t n : {256, 2048}) {
      const uint64_t stride = row_bytes(v.vec_dot_type, static_cast<uint64_t>(n)) + 64;
      for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
        const auto w = random_row(t, n, rng);
        std::vector<uint8_t> xq(stride * n_x);
        std::vector<RefDot> refs;
        const auto wf = dequantized(t, w.data(), n);
        for (int k = 0; k < n_x; ++k) {
          const auto x = random_activations(n, rng);
          s.quantize(x.data(), xq.data() + k * stride, n);
          const auto xf = dequantized(v.vec_dot_type, xq.data() + k * stride, n);
          refs.push_back(ref_dot(wf.data(), xf.data(), n));
        }
        float out[kMaxDotRows];
        v.vec_dot_multi(n, w.data(), xq.data(), stride, n_x, out);
        for (int k = 0; k < n_x; ++k) {
          const float want = s.vec_dot(n, w.data(), xq.data() + k * stride);
          EXPECT_NEAR(out[k], want, 2 * float_tolerance(refs[k], n / type_traits(t).block_elems))
              << type_name(t) << " n " << n << " n_x " << n_x << " row " << k;
        }
      }
    }
  }
}

// The AVX-512 multi-row f32/f16 dots give each row exactly the AVX2 single-row kernel's result
// (so routing does not change between a prefilled and a decoded token), for lengths with and
// without the eight-value and scalar tails.
TEST(VecDotMulti, Avx512FloatRowsEqualAvx2SingleRows) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(22);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
    const DotKernels single = dot_kernels(t, Isa::Avx2);
    const DotKernels multi = dot_kernels(t, Isa::Avx512);
    ASSERT_NE(multi.vec_dot_multi, nullptr) << type_name(t);
    for (int64_t n : {40, 2048, 2056, 2061}) {
      const uint64_t stride = static_cast<uint64_t>(n) * sizeof(float) + 64;
      for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
        const auto w = random_row(t, n, rng);
        std::vector<uint8_t> x(stride * n_x);
        for (int k = 0; k < n_x; ++k) {
          const auto xf = random_activations(n, rng);
          std::memcpy(x.data() + k * stride, xf.data(), n * sizeof(float));
        }
        float out[kMaxDotRows];
        multi.vec_dot_multi(n, w.data(), x.data(), stride, n_x, out);
        for (int k = 0; k < n_x; ++k) {
          EXPECT_EQ(out[k], single.vec_dot(n, w.data(), x.data() + k * stride))
              << type_name(t) << " n " << n << " n_x " << n_x << " row " << k;
        }
      }
    }
  }
}

// Kernels flagged multi_rows_exact give every row of a multi-row call exactly what the set's
// single-row kernel gives that row alone: speculative decoding verifies drafts with them under
// ExactRows, and its greedy output must equal one-token decoding. Every AVX2 multi-row kernel is
// flagged, and every AVX-512 one but Q6_K's (whose single-row kernel is a different one).
TEST(VecDotMulti, RowsExactKernelsEqualTheSingleRowKernelBitForBit) {
  std::mt19937 rng(71);
  int checked = 0;
  for (Isa isa : isas()) {
    for (GgmlType t : kDotTypes) {
      const DotKernels k = dot_kernels(t, isa);
      if (isa != Isa::Scalar && k.vec_dot_multi) {
        EXPECT_EQ(k.multi_rows_exact, !(isa == Isa::Avx512 && t == GgmlType::Q6_K))
            << type_name(t) << " " << isa_name(isa);
      }
      if (!k.multi_rows_exact) continue;
      ASSERT_NE(k.vec_dot, nullptr) << type_name(t);
      ++checked;
      const int64_t blk = type_traits(t).block_elems;
      for (int64_t n : {blk, 5 * blk, 2048 / blk * blk + blk}) {
        const uint64_t stride = row_bytes(k.vec_dot_type, static_cast<uint64_t>(n)) + 32;
        const auto w = random_row(t, n, rng);
        std::vector<uint8_t> xq(stride * kMaxDotRows);
        for (int r = 0; r < kMaxDotRows; ++r) {
          const auto x = random_activations(n, rng);
          if (k.quantize) {
            k.quantize(x.data(), xq.data() + r * stride, n);
          } else {
            std::memcpy(xq.data() + r * stride, x.data(), n * sizeof(float));
          }
        }
        for (int n_x = 2; n_x <= kMaxDotRows; ++n_x) {
          float out[kMaxDotRows];
          k.vec_dot_multi(n, w.data(), xq.data(), stride, n_x, out);
          for (int r = 0; r < n_x; ++r) {
            const float alone = k.vec_dot(n, w.data(), xq.data() + r * stride);
            EXPECT_EQ(std::memcmp(&out[r], &alone, sizeof(float)), 0)
                << type_name(t) << " " << isa_name(isa) << " n " << n << " n_x " << n_x << " row "
                << r << ": " << out[r] << " vs " << alone;
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no multi-row kernel on this CPU";
}

// Dot tile kernels give each (weight row, activation row) pair exactly the set's single-row
// result, at every activation count, for row lengths with and without a step of four blocks, an odd
// pair and an odd last block, and padded strides (the tile reads four rows at w_stride).
TEST(VecDotTile, EveryOutputEqualsTheSingleRowKernelBitForBit) {
  std::mt19937 rng(83);
  int checked = 0;
  for (Isa isa : isas()) {
    for (GgmlType t : kDotTypes) {
      const DotKernels k = dot_kernels(t, isa);
      if (!k.vec_dot_tile) continue;
      ASSERT_NE(k.vec_dot, nullptr) << type_name(t);
      ++checked;
      const int64_t blk = type_traits(t).block_elems;
      for (int64_t n : {blk, 2 * blk, 3 * blk, 4 * blk, 7 * blk, 8 * blk, 2048 + 3 * blk}) {
        const uint64_t w_stride = row_bytes(t, static_cast<uint64_t>(n)) + 16;
        const uint64_t x_stride = row_bytes(k.vec_dot_type, static_cast<uint64_t>(n)) + 32;
        std::vector<uint8_t> w(w_stride * kDotTileRows);
        for (int r = 0; r < kDotTileRows; ++r) {
          const auto row = random_row(t, n, rng);
          std::memcpy(w.data() + r * w_stride, row.data(), row.size());
        }
        std::vector<uint8_t> xq(x_stride * kMaxDotRows);
        for (int c = 0; c < kMaxDotRows; ++c)
          k.quantize(random_activations(n, rng).data(), xq.data() + c * x_stride, n);
        for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
          const uint64_t y_stride = kDotTileRows + 3;
          std::vector<float> y(y_stride * n_x, -1.0f);
          k.vec_dot_tile(n, w.data(), w_stride, xq.data(), x_stride, n_x, y.data(), y_stride);
          for (int c = 0; c < n_x; ++c) {
            for (int r = 0; r < kDotTileRows; ++r) {
              const float alone = k.vec_dot(n, w.data() + r * w_stride, xq.data() + c * x_stride);
              EXPECT_EQ(std::memcmp(&y[c * y_stride + r], &alone, sizeof(float)), 0)
                  << type_name(t) << " " << isa_name(isa) << " n " << n << " n_x " << n_x
                  << " row " << r << " col " << c << ": " << y[c * y_stride + r] << " vs " << alone;
            }
            for (uint64_t r = kDotTileRows; r < y_stride; ++r)
              EXPECT_EQ(y[c * y_stride + r], -1.0f) << "wrote past the tile";
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no dot tile kernel on this CPU";
}

const GgmlType kGemmTypes[] = {
    GgmlType::Q4_K,    GgmlType::Q5_K,   GgmlType::Q6_K,  GgmlType::Q2_K,  GgmlType::Q3_K,
    GgmlType::IQ4_XS,  GgmlType::Q8_0,   GgmlType::MXFP4, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
    GgmlType::IQ2_S,   GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M,
};

// The GEMM against the scalar single-row kernel (or, for types without one, the exact dot of the
// dequantized values) for every (weight row, activation row) pair: tile
// sizes below, at and above the 16-row tile, activation counts around the kernel's column block,
// padded strides, and (for 32-value types) a row length that ends in a partial 256-value unit.
TEST(Gemm, MatchesScalarVecDot) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(33);
  for (GgmlType t : kGemmTypes) {
    const DotKernels s = dot_kernels(t, Isa::Scalar);
    const DotKernels v = dot_kernels(t, Isa::Avx512);
    ASSERT_NE(v.gemm, nullptr) << type_name(t);
    ASSERT_NE(gemm_format(t), nullptr) << type_name(t);
    // matmul hands the GEMM activations in the set's vec-dot format.
    ASSERT_EQ(gemm_format(t)->act_type, v.vec_dot_type) << type_name(t);
    std::vector<int64_t> ns{256, 2048};
    if (type_traits(t).block_elems == kQK) ns.push_back(288);
    for (int64_t n : ns) {
      for (int64_t n_w : {1, 16, 21}) {
        for (int64_t n_x : {1, 5, 8, 13}) {
          const uint64_t w_stride = row_bytes(t, static_cast<uint64_t>(n)) + 16;
          const uint64_t x_stride = row_bytes(v.vec_dot_type, static_cast<uint64_t>(n)) + 8;
          std::vector<uint8_t> w(w_stride * n_w), xq(x_stride * n_x);
          std::vector<std::vector<float>> wf;
          for (int64_t r = 0; r < n_w; ++r) {
            const auto row = random_row(t, n, rng);
            std::memcpy(w.data() + r * w_stride, row.data(), row.size());
            wf.push_back(dequantized(t, row.data(), n));
          }
          for (int64_t c = 0; c < n_x; ++c) {
            const auto x = random_activations(n, rng);
            v.quantize(x.data(), xq.data() + c * x_stride, n);
          }
          const uint64_t y_stride = static_cast<uint64_t>(n_w) + 3;
          std::vector<float> y(y_stride * n_x, -1.0f);
          v.gemm(n, w.data(), w_stride, n_w, xq.data(), x_stride, n_x, y.data(), y_stride);
          for (int64_t c = 0; c < n_x; ++c) {
            const uint8_t* xc = xq.data() + c * x_stride;
            const auto xf = dequantized(v.vec_dot_type, xc, n);
            for (int64_t r = 0; r < n_w; ++r) {
              const RefDot ref = ref_dot(wf[r].data(), xf.data(), n);
              // Types without a scalar dot kernel: the exact dot of the dequantized values.
              const float want = s.vec_dot ? s.vec_dot(n, w.data() + r * w_stride, xc)
                                           : static_cast<float>(ref.value);
              ASSERT_NEAR(y[c * y_stride + r], want,
                          2 * float_tolerance(ref, n / type_traits(t).block_elems))
                  << type_name(t) << " n " << n << " n_w " << n_w << " n_x " << n_x << " row "
                  << r << " col " << c;
            }
            for (uint64_t r = n_w; r < y_stride; ++r)
              ASSERT_EQ(y[c * y_stride + r], -1.0f) << "gemm wrote past row " << n_w;
          }
        }
      }
    }
  }
}

// The AVX-512 unpackers write exactly the bytes, scales and biases of their portable twins.
TEST(Gemm, Avx512UnpackersMatchPortable) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(34);
  for (GgmlType t : kGemmTypes) {
    const GemmFormat& f = *gemm_format(t);
    const GemmUnpackFn fast = avx512::gemm_unpacker(t);
    ASSERT_NE(fast, nullptr) << type_name(t);
    const int groups = kGemmUnit / f.group_values;
    for (int rep = 0; rep < 16; ++rep) {
      const auto row = random_row(t, 2 * kGemmUnit, rng);
      for (int64_t unit = 0; unit < 2; ++unit) {
        alignas(64) uint8_t u0[kGemmUnit], u1[kGemmUnit];
        float s0[16] = {}, s1[16] = {}, b0[16] = {}, b1[16] = {};
        f.unpack(row.data(), unit, groups, u0, s0, b0);
        fast(row.data(), unit, groups, u1, s1, b1);
        EXPECT_EQ(0, std::memcmp(u0, u1, kGemmUnit)) << type_name(t) << " unit " << unit;
        EXPECT_EQ(0, std::memcmp(s0, s1, sizeof s0)) << type_name(t) << " unit " << unit;
        EXPECT_EQ(0, std::memcmp(b0, b1, sizeof b0)) << type_name(t) << " unit " << unit;
      }
    }
  }
}

// Q4_K tiles packed straight from the blocks (the AVX-512 unpacker selects that packer) give the
// same outputs, bit for bit, as tiles unpacked row by row through the portable unpacker, for
// whole and partial tiles (missing rows repeat a real one there, are zeros here).
TEST(Gemm, DirectQ4KPackEqualsRowByRowPack) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(35);
  const GemmFormat direct{*gemm_format(GgmlType::Q4_K)};
  ASSERT_EQ(direct.act_type, GgmlType::Q8_K);
  GemmFormat fast = direct, portable = direct;
  fast.unpack = avx512::gemm_unpacker(GgmlType::Q4_K);
  portable.unpack = gemm_unpack::q4_K;
  const DotKernels v = dot_kernels(GgmlType::Q4_K, Isa::Avx512);
  const int64_t n = 1024;
  for (int64_t n_w : {1, 7, 16, 37}) {
    const uint64_t w_stride = row_bytes(GgmlType::Q4_K, n) + 32;
    const uint64_t x_stride = row_bytes(GgmlType::Q8_K, n);
    const int64_t n_x = 11;
    std::vector<uint8_t> w(w_stride * n_w), xq(x_stride * n_x);
    for (int64_t r = 0; r < n_w; ++r) {
      const auto row = random_row(GgmlType::Q4_K, n, rng);
      std::memcpy(w.data() + r * w_stride, row.data(), row.size());
    }
    for (int64_t c = 0; c < n_x; ++c)
      v.quantize(random_activations(n, rng).data(), xq.data() + c * x_stride, n);
    ASSERT_TRUE(avx512::gemm_packs_directly(fast, w_stride));
    ASSERT_FALSE(avx512::gemm_packs_directly(portable, w_stride));
    std::vector<float> y0(n_w * n_x), y1(n_w * n_x);
    avx512::gemm(portable, n, w.data(), w_stride, n_w, xq.data(), x_stride, n_x, y0.data(), n_w);
    avx512::gemm(fast, n, w.data(), w_stride, n_w, xq.data(), x_stride, n_x, y1.data(), n_w);
    EXPECT_EQ(0, std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float))) << "n_w " << n_w;
  }
}

// The lattice i-quants on blocks of uniformly random bits (every bit pattern is a valid block:
// all grid indexes are in range), with only the half-precision scale set to a sane value, so that
// every index bit, sign code and sub-block scale is exercised: the scalar twin against
// dequantize·dot, and the SIMD single- and multi-row kernels against the twin.
TEST(VecDot, IqKernelsOnRandomBits) {
  std::mt19937 rng(77);
  const int64_t n = 1024;
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                     GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    const TypeTraits& tt = type_traits(t);
    for (int rep = 0; rep < 16; ++rep) {
      std::vector<uint8_t> w(static_cast<size_t>(n / tt.block_elems * tt.block_bytes));
      for (auto& byte : w) byte = static_cast<uint8_t>(rng());
      for (int64_t b = 0; b < n / tt.block_elems; ++b) {
        uint8_t* blk = w.data() + b * tt.block_bytes;
        const uint16_t d = random_half_scale(rng);
        if (t == GgmlType::IQ1_M) {
          // d's four nibbles sit in the top nibbles of the four uint16 scale words (bytes 48..55).
          for (int k = 0; k < 4; ++k) {
            uint16_t sc;
            std::memcpy(&sc, blk + 48 + 2 * k, 2);
            sc = static_cast<uint16_t>((sc & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
            std::memcpy(blk + 48 + 2 * k, &sc, 2);
          }
        } else {
          std::memcpy(blk, &d, 2);  // d leads every other IQ block
        }
      }
      const DotKernels s = dot_kernels(t, Isa::Scalar);
      const uint64_t stride = row_bytes(GgmlType::Q8_K, static_cast<uint64_t>(n));
      std::vector<uint8_t> xq(stride * kMaxDotRows);
      std::vector<RefDot> refs;
      const auto wf = dequantized(t, w.data(), n);
      for (int k = 0; k < kMaxDotRows; ++k) {
        s.quantize(random_activations(n, rng).data(), xq.data() + k * stride, n);
        const auto xf = dequantized(GgmlType::Q8_K, xq.data() + k * stride, n);
        refs.push_back(ref_dot(wf.data(), xf.data(), n));
      }
      for (int k = 0; k < kMaxDotRows; ++k) {
        const float want = s.vec_dot(n, w.data(), xq.data() + k * stride);
        ASSERT_NEAR(want, refs[k].value, float_tolerance(refs[k], n / tt.block_elems))
            << type_name(t) << " scalar rep " << rep;
      }
      if (!cpu_has_avx2()) continue;
      const DotKernels v = dot_kernels(t, Isa::Avx2);
      for (int n_x = 1; n_x <= kMaxDotRows; ++n_x) {
        float out[kMaxDotRows];
        v.vec_dot_multi(n, w.data(), xq.data(), stride, n_x, out);
        for (int k = 0; k < n_x; ++k) {
          const float want = s.vec_dot(n, w.data(), xq.data() + k * stride);
          EXPECT_NEAR(out[k], want, 2 * float_tolerance(refs[k], n / tt.block_elems))
              << type_name(t) << " rep " << rep << " n_x " << n_x << " row " << k;
        }
      }
      EXPECT_NEAR(v.vec_dot(n, w.data(), xq.data()), s.vec_dot(n, w.data(), xq.data()),
                  2 * float_tolerance(refs[0], n / tt.block_elems))
          << type_name(t) << " rep " << rep;
    }
  }
}
