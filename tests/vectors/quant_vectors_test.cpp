// Scalar dequantization against reference vectors: quant-vectors.gguf holds, per GGML type T, the
// blocks `T.q` and GGML's own dequantization of them `T.f32`. One test per pair present in the file
// (discovered at run time, so a variant file with the same naming is checked the same way).
// The file defaults to SLUICE_TESTDATA/quant-vectors.gguf; SLUICE_QUANT_VECTORS overrides it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/dequant.h"

using namespace sluice;

namespace {

std::string vectors_path() {
  if (const char* p = std::getenv("SLUICE_QUANT_VECTORS")) return p;
  return std::string(SLUICE_TESTDATA) + "/quant-vectors.gguf";
}

const gguf::File& vectors() {
  static std::unique_ptr<gguf::File> file = gguf::File::open(vectors_path());
  return *file;
}

// Names T for which both T.q and T.f32 exist, in file order.
std::vector<std::string> vector_types() {
  std::vector<std::string> out;
  try {
    const auto& f = vectors();
    for (const auto& t : f.tensors()) {
      const std::string& n = t.name;
      if (n.size() > 2 && n.ends_with(".q") && f.find_tensor(n.substr(0, n.size() - 2) + ".f32"))
        out.push_back(n.substr(0, n.size() - 2));
    }
  } catch (const Error&) {
    // Reported by the VectorFile.HasPairs test, which opens the file again and fails with the reason.
  }
  return out;
}

float max_abs(const float* v, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

}  // namespace

TEST(VectorFile, HasPairs) {
  EXPECT_NO_THROW(vectors());
  EXPECT_FALSE(vector_types().empty()) << vectors_path() << " holds no T.q / T.f32 pairs";
}

class QuantVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantVectors, MatchesReference) {
  const std::string& name = GetParam();
  const auto& qt = vectors().tensor(name + ".q");
  const auto& rt = vectors().tensor(name + ".f32");
  ASSERT_EQ(type_name(qt.type), name) << "tensor " << name << ".q has another type";
  ASSERT_EQ(rt.type, GgmlType::F32);
  ASSERT_EQ(qt.ne, rt.ne);

  const int64_t n_row = qt.ne[0];
  std::vector<float> ref(static_cast<size_t>(rt.n_elements()));
  std::memcpy(ref.data(), rt.data, ref.size() * sizeof(float));
  std::vector<float> ours(ref.size());
  // Row by row through row_bytes: exercises the same addressing a matmul uses.
  for (int64_t r = 0; r < qt.n_rows(); ++r)
    dequantize_row(qt.type, qt.data + r * qt.row_bytes(), ours.data() + r * n_row, n_row);

  const float tol = 1e-6f * max_abs(ref.data(), ref.size());
  size_t exact = 0, bad = 0;
  float max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float err = std::fabs(ours[i] - ref[i]);
    if (std::memcmp(&ours[i], &ref[i], sizeof(float)) == 0) ++exact;
    max_err = std::max(max_err, err);
    if (!(err <= tol) && bad++ < 5)
      ADD_FAILURE() << name << " value " << i << ": ours " << ours[i] << " ref " << ref[i];
  }
  EXPECT_EQ(bad, 0u) << name << ": " << bad << " values beyond tolerance " << tol;
  std::printf("[ vectors  ] %-8s %zu values, %zu bit-exact, max |err| %g (tolerance %g)\n",
              name.c_str(), ref.size(), exact, max_err, tol);
}

// Whole tensor in one call vs one call per block: a wrong per-block stride shows up as a mismatch
// from the second block on, which row-sized calls of one block (K/IQ types) would never reveal.
TEST_P(QuantVectors, ManyBlocksEqualPerBlock) {
  const auto& qt = vectors().tensor(GetParam() + ".q");
  const TypeTraits& tt = type_traits(qt.type);
  const int64_t n = qt.n_elements();
  const int64_t nb = n / tt.block_elems;
  ASSERT_GE(nb, 2) << "need several blocks";
  std::vector<float> whole(static_cast<size_t>(n)), single(static_cast<size_t>(n));
  dequantize_row(qt.type, qt.data, whole.data(), n);
  for (int64_t b = 0; b < nb; ++b)
    dequantize_row(qt.type, qt.data + b * tt.block_bytes, single.data() + b * tt.block_elems,
                   tt.block_elems);
  EXPECT_EQ(0, std::memcmp(whole.data(), single.data(), whole.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantVectors, ::testing::ValuesIn(vector_types()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantVectors);
