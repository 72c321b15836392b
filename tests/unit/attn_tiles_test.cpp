// The attention tile kernels (quant/attn_tiles*.cpp): SIMD against the scalar twins on random
// rows, and a row's result independent of the rest of its tile, bit for bit — what lets a
// resumed session or a pipeline stage reproduce a single run exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "quant/dequant.h"
#include "quant/dispatch.h"

namespace sluice {
namespace {

std::vector<Isa> simd_sets() {
  std::vector<Isa> v;
  if (cpu_has_avx2()) v.push_back(Isa::Avx2);
  if (cpu_has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

// n_keys rows of `dim` values stored as `type`, and the same values as floats.
struct Keys {
  std::vector<std::byte> bytes;
  std::vector<float> values;
  std::vector<const std::byte*> rows;
};

Keys random_keys(GgmlType type, int dim, int n_keys, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t elem = type == GgmlType::F32 ? 4 : 2;
  Keys k;
  k.bytes.resize(elem * dim * n_keys);
  for (int i = 0; i < dim * n_keys; ++i) {
    const float f = nd(rng);
    if (type == GgmlType::F32) {
      std::memcpy(k.bytes.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
      std::memcpy(k.bytes.data() + 2 * i, &h, 2);
    }
  }
  for (int r = 0; r < n_keys; ++r) k.rows.push_back(k.bytes.data() + elem * dim * r);
  return k;
}

TEST(AttentionTiles, KeyScoresMatchScalarAndDoNotDependOnTheTile) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Isa isa : simd_sets())
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
      for (int dim : {13, 64, 72, 128, 576}) {
        const int n_keys = 37;
        const Keys k = random_keys(t, dim, n_keys, rng);
        std::vector<float> q(kMaxDotRows * dim);
        for (float& v : q) v = nd(rng);
        const AttentionTiles simd = attention_tiles(t, isa), ref = attention_tiles(t, Isa::Scalar);
        ASSERT_NE(simd.key_scores, ref.key_scores);
        std::vector<float> want(kMaxDotRows * n_keys), got(kMaxDotRows * n_keys);
        ref.key_scores(dim, k.rows.data(), n_keys, q.data(), dim, kMaxDotRows, want.data(), n_keys);
        simd.key_scores(dim, k.rows.data(), n_keys, q.data(), dim, kMaxDotRows, got.data(), n_keys);
        for (int i = 0; i < kMaxDotRows * n_keys; ++i)
          EXPECT_NEAR(got[i], want[i], 1e-4 * dim) << type_name(t) << " dim " << dim << " i " << i;
        for (int n_q = 1; n_q < kMaxDotRows; ++n_q)
          for (int j = 0; j < n_q; ++j) {
            std::vector<float> part(n_keys);
            simd.key_scores(dim, k.rows.data(), n_keys, q.data() + j * dim, dim, 1, part.data(),
                            n_keys);
            EXPECT_EQ(0, std::memcmp(part.data(), got.data() + j * n_keys, n_keys * sizeof(float)))
                << type_name(t) << " dim " << dim << " row " << j;
          }
      }
}

TEST(AttentionTiles, ValueSumsMatchScalarAndDoNotDependOnTheTile) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (Isa isa : simd_sets())
    for (int dim : {5, 64, 80, 128, 512}) {
      const int n_keys = 70;
      const Keys v = random_keys(GgmlType::F32, dim, n_keys, rng);
      std::vector<const float*> rows;
      for (const std::byte* r : v.rows) rows.push_back(reinterpret_cast<const float*>(r));
      std::vector<float> w(kMaxDotRows * n_keys);
      for (float& x : w) x = ud(rng);
      const AttentionTiles simd = attention_tiles(GgmlType::F32, isa),
                           ref = attention_tiles(GgmlType::F32, Isa::Scalar);
      std::vector<float> want(kMaxDotRows * dim, 0.5f), got(kMaxDotRows * dim, 0.5f);
      ref.value_sums(dim, rows.data(), n_keys, w.data(), n_keys, kMaxDotRows, want.data(), dim);
      simd.value_sums(dim, rows.data(), n_keys, w.data(), n_keys, kMaxDotRows, got.data(), dim);
      for (int i = 0; i < kMaxDotRows * dim; ++i)
        EXPECT_NEAR(got[i], want[i], 1e-4) << "dim " << dim;
      for (int j = 0; j < kMaxDotRows; ++j) {
        std::vector<float> part(dim, 0.5f);
        simd.value_sums(dim, rows.data(), n_keys, w.data() + j * n_keys, n_keys, 1, part.data(),
                        dim);
        EXPECT_EQ(0, std::memcmp(part.data(), got.data() + j * dim, dim * sizeof(float)))
            << "dim " << dim;
      }
    }
}

TEST(AttentionTiles, BlockQuantizedKeysHaveNoTileKernel) {
  EXPECT_EQ(attention_tiles(GgmlType::Q8_0, Isa::Scalar).key_scores, nullptr);
  EXPECT_NE(attention_tiles(GgmlType::Q8_0, Isa::Scalar).value_sums, nullptr);
}

}  // namespace
}  // namespace sluice
