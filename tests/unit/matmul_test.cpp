// matmul against a naive reference (dequantized weights, the same activation quantization, double
// accumulation) for every weight type, token counts 1 / 3 / 17, odd row counts, fewer rows than
// threads, padded row strides, every kernel set this CPU has, and the errors it must raise.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Matrix {
  GgmlType type;
  int64_t n_in, n_out;
  uint64_t stride;
  std::vector<uint8_t> bytes;
  MatView view() const {
    return {type, n_in, n_out, reinterpret_cast<const std::byte*>(bytes.data()), stride};
  }
};

Matrix random_matrix(GgmlType t, int64_t n_in, int64_t n_out, uint64_t pad, std::mt19937& rng) {
  Matrix m{t, n_in, n_out, row_bytes(t, static_cast<uint64_t>(n_in)) + pad, {}};
  m.bytes.assign(m.stride * static_cast<uint64_t>(n_out), 0xEE);  // padding holds garbage
  for (int64_t r = 0; r < n_out; ++r) {
    const auto row = random_row(t, n_in, rng);
    std::memcpy(m.bytes.data() + r * m.stride, row.data(), row.size());
  }
  return m;
}

// Naive y = x W^T with exactly the activation values the kernels see, and per-entry tolerances.
void reference(const Matrix& m, const std::vector<float>& x, int64_t n_tokens, Isa isa,
               std::vector<double>* y, std::vector<double>* tol) {
  const DotKernels k = dot_kernels(m.type, isa);
  const int64_t n = m.n_in;
  y->assign(static_cast<size_t>(n_tokens * m.n_out), 0.0);
  tol->assign(y->size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<float> xt(x.begin() + t * n, x.begin() + (t + 1) * n);
    if (k.quantize) {
      std::vector<uint8_t> q(row_bytes(k.vec_dot_type, static_cast<uint64_t>(n)));
      k.quantize(xt.data(), q.data(), n);
      xt = dequantized(k.vec_dot_type, q.data(), n);
    }
    for (int64_t r = 0; r < m.n_out; ++r) {
      const auto wf = dequantized(m.type, m.bytes.data() + r * m.stride, n);
      const RefDot d = ref_dot(wf.data(), xt.data(), n);
      (*y)[t * m.n_out + r] = d.value;
      // Fallback types dot n floats; others sum one term per block.
      const int64_t terms = k.vec_dot ? n / type_traits(m.type).block_elems : n;
      (*tol)[t * m.n_out + r] = float_tolerance(d, terms);
    }
  }
}

void check(GgmlType t, int64_t n_in, int64_t n_out, int64_t n_tokens, int threads, uint64_t pad,
           Isa isa) {
  std::mt19937 rng(
      static_cast<unsigned>(1000 * static_cast<int>(t) + 31 * n_tokens + n_out + threads));
  const Matrix m = random_matrix(t, n_in, n_out, pad, rng);
  const auto x = random_activations(n_in * n_tokens, rng);
  std::vector<float> y(static_cast<size_t>(n_tokens * n_out), -12345.0f);
  ThreadPool pool(threads);
  matmul(pool, m.view(), x.data(), n_tokens, y.data(), isa);
  std::vector<double> want, tol;
  reference(m, x, n_tokens, isa, &want, &tol);
  int bad = 0;
  for (size_t i = 0; i < y.size() && bad < 5; ++i) {
    if (!(std::fabs(y[i] - want[i]) <= tol[i])) {
      ++bad;
      ADD_FAILURE() << type_name(t) << " " << isa_name(isa) << " n_in " << n_in << " n_out "
                    << n_out << " tokens " << n_tokens << " threads " << threads << ": y["
                    << i / n_out << "][" << i % n_out << "] = " << y[i] << ", want " << want[i]
                    << " ± " << tol[i];
    }
  }
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Scalar};
  if (cpu_has_avx2()) v.push_back(Isa::Avx2);
  if (cpu_has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

const GgmlType kAllTypes[] = {
    GgmlType::F32,    GgmlType::F16,     GgmlType::BF16,   GgmlType::Q8_0,   GgmlType::Q4_0,
    GgmlType::Q4_1,   GgmlType::Q5_0,    GgmlType::Q5_1,   GgmlType::IQ4_NL, GgmlType::MXFP4,
    GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,   GgmlType::Q5_K,   GgmlType::Q6_K,
    GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,  GgmlType::IQ1_S,   GgmlType::IQ1_M,  GgmlType::TQ1_0,  GgmlType::TQ2_0,
};

}  // namespace

class Matmul : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Matmul, MatchesNaiveReference) {
  for (Isa isa : isas()) {
    for (int64_t tokens : {1, 3, 17}) check(GetParam(), 512, 37, tokens, 2, 0, isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Matmul, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(MatmulShapes, FewerRowsThanThreads) {
  for (Isa isa : isas()) {
    check(GgmlType::Q4_K, 256, 1, 17, 4, 0, isa);
    check(GgmlType::Q8_0, 64, 3, 1, 4, 0, isa);
    check(GgmlType::F32, 5, 2, 3, 3, 0, isa);
  }
}

TEST(MatmulShapes, SingleThreadAndManyTokens) {
  for (Isa isa : isas()) {
    check(GgmlType::Q6_K, 256, 5, 1, 1, 0, isa);
    // More tokens than one tile (64) and enough to quantize activations in parallel.
    check(GgmlType::Q4_K, 256, 9, 130, 2, 0, isa);
    check(GgmlType::IQ2_XXS, 256, 4, 70, 3, 0, isa);
  }
}

TEST(MatmulShapes, PaddedRowStride) {
  for (Isa isa : isas()) {
    check(GgmlType::Q5_K, 512, 7, 3, 2, 48, isa);
    check(GgmlType::F16, 100, 6, 2, 2, 6, isa);
  }
}

// The process-wide entry point uses the active set (SLUICE_NO_SIMD=1 makes it scalar); its results
// must equal the explicit call with that set exactly, since the same kernels run in the same order.
TEST(MatmulShapes, DefaultEntryPointUsesActiveSet) {
  std::mt19937 rng(3);
  const Matrix m = random_matrix(GgmlType::Q4_K, 512, 11, 0, rng);
  const auto x = random_activations(512 * 3, rng);
  std::vector<float> a(33), b(33);
  ThreadPool pool(2);
  matmul(pool, m.view(), x.data(), 3, a.data());
  matmul(pool, m.view(), x.data(), 3, b.data(), active_isa());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// The fused pair equals two separate calls bit for bit: each output row is one kernel call on the
// same converted activations whichever part of the shared job computes it. Covers one type (fused,
// unequal row counts, fewer rows than threads), two types and an empty matrix (run apart).
TEST(MatmulPair, EqualsTwoCalls) {
  std::mt19937 rng(8);
  struct Case {
    GgmlType t0, t1;
    int64_t out0, out1, tokens;
    int threads;
  };
  const Case cases[] = {{GgmlType::Q4_K, GgmlType::Q4_K, 37, 20, 1, 2},
                        {GgmlType::Q4_K, GgmlType::Q4_K, 3, 1, 5, 4},
                        {GgmlType::IQ2_XXS, GgmlType::IQ2_XXS, 24, 24, 17, 2},
                        {GgmlType::Q4_K, GgmlType::Q6_K, 9, 12, 2, 2},
                        {GgmlType::Q8_0, GgmlType::Q8_0, 0, 7, 3, 2}};
  for (const Case& c : cases) {
    const Matrix m0 = random_matrix(c.t0, 512, c.out0, 0, rng);
    const Matrix m1 = random_matrix(c.t1, 512, c.out1, 0, rng);
    const auto x = random_activations(512 * c.tokens, rng);
    ThreadPool pool(c.threads);
    std::vector<float> a0(c.out0 * c.tokens), a1(c.out1 * c.tokens);
    std::vector<float> b0(a0.size(), -1.0f), b1(a1.size(), -1.0f);
    matmul(pool, m0.view(), x.data(), c.tokens, a0.data());
    matmul(pool, m1.view(), x.data(), c.tokens, a1.data());
    matmul_pair(pool, m0.view(), m1.view(), x.data(), c.tokens, b0.data(), b1.data());
    // Bit-identical (memcmp, not ==, so -0 and 0 differ); an empty output has no data to compare.
    EXPECT_TRUE(a0.empty() || std::memcmp(a0.data(), b0.data(), a0.size() * sizeof(float)) == 0) << type_name(c.t0);
    EXPECT_TRUE(a1.empty() || std::memcmp(a1.data(), b1.data(), a1.size() * sizeof(float)) == 0) << type_name(c.t1);
  }
}

// A contiguous range of a matrix's rows, multiplied alone (with another thread count), gives
// exactly the full product's columns of those rows: an expert-parallel process computes only its
// slice of the output head (model/head_shard.h), and the gathered logits must equal one process's.
// Covers every type, one token (decode), a few, and enough tokens for the GEMM kernels, with slice
// boundaries inside the threads' row parts of the full call.
TEST(MatmulShapes, RowSliceEqualsFullColumns) {
  std::mt19937 rng(11);
  const int64_t n_out = 53;
  for (GgmlType t : kAllTypes) {
    const Matrix m = random_matrix(t, 256, n_out, 0, rng);
    for (int64_t tokens : {1, 5, 70}) {
      const auto x = random_activations(256 * tokens, rng);
      ThreadPool pool2(2), pool1(1), pool3(3);
      std::vector<float> full(n_out * tokens);
      matmul(pool2, m.view(), x.data(), tokens, full.data());
      for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 26}, {26, 53}, {7, 40}}) {
        MatView v = m.view();
        v.data += static_cast<uint64_t>(begin) * v.row_stride;
        v.n_out = end - begin;
        for (ThreadPool* pool : {&pool1, &pool3}) {
          std::vector<float> part(v.n_out * tokens, -1.0f);
          matmul(*pool, v, x.data(), tokens, part.data());
          for (int64_t k = 0; k < tokens; ++k)
            ASSERT_EQ(0, std::memcmp(part.data() + k * v.n_out, full.data() + k * n_out + begin,
                                     v.n_out * sizeof(float)))
                << type_name(t) << " rows " << begin << ":" << end << " token " << k << " of "
                << tokens;
        }
      }
    }
  }
}

TEST(MatmulErrors, RejectsBadShapesAndTypes) {
  ThreadPool pool(2);
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(1024), y(16);
  const auto* data = reinterpret_cast<const std::byte*>(bytes.data());
  EXPECT_THROW(matmul(pool, {GgmlType::Q4_K, 100, 2, data, 144}, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul(pool, {GgmlType::Q4_K, 256, 2, data, 100}, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul(pool, {GgmlType::I32, 4, 2, data, 16}, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul(pool, {GgmlType::F32, 4, 2, data, 16}, x.data(), -1, y.data()), Error);
  // Nothing to do is not an error.
  EXPECT_NO_THROW(matmul(pool, {GgmlType::F32, 4, 2, data, 16}, x.data(), 0, y.data()));
}
