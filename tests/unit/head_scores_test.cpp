// Gated multi-head key scores (quant/head_scores*.cpp): the scalar twin against a double-precision
// evaluation on dequantized rows, the SIMD sets against the scalar twin bit for bit, and a key's
// score independent of the keys beside it in a call.
#include "quant/head_scores.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/dequant.h"
#include "kv/kv_cache.h"

namespace sluice {
namespace {

struct StoredKeys {
  std::vector<std::byte> bytes;
  std::vector<float> values;  // (n_keys, dim) what the stored rows hold
  std::vector<const std::byte*> rows;
};

// Rows as the KV cache stores them (kv_store_head), padded to whole blocks.
StoredKeys stored_keys(KvType kt, int dim, int n_keys, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint64_t rb = kv_head_bytes(kt, dim);
  StoredKeys k;
  k.bytes.resize(rb * n_keys);
  std::vector<float> x(dim), back(dim);
  for (int r = 0; r < n_keys; ++r) {
    for (float& v : x) v = nd(rng);
    std::byte* dst = k.bytes.data() + r * rb;
    kv_store_head(kt, x.data(), dim, dst);
    kv_load_head(kt, dst, dim, back.data());
    k.values.insert(k.values.end(), back.begin(), back.end());
    k.rows.push_back(dst);
  }
  return k;
}

std::vector<Isa> simd_sets() {
  std::vector<Isa> v;
  if (cpu_has_avx2()) v.push_back(Isa::Avx2);
  if (cpu_has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

constexpr KvType kTypes[] = {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0};

TEST(HeadScores, ScalarEqualsTheFormulaOnDequantizedRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvType kt : kTypes)
    for (int n_head : {1, 5, 64}) {
      const int dim = 128, n_keys = 9;
      const GgmlType t = kv_storage_type(kt);
      SCOPED_TRACE(std::string(type_name(t)) + " heads " + std::to_string(n_head));
      const StoredKeys k = stored_keys(kt, dim, n_keys, rng);
      std::vector<float> q(n_head * dim), w(n_head), got(n_keys);
      for (float& v : q) v = nd(rng);
      for (float& v : w) v = std::fabs(nd(rng));
      gated_head_scores(t, Isa::Scalar)(dim, k.rows.data(), n_keys, q.data(), n_head, w.data(), got.data());
      for (int i = 0; i < n_keys; ++i) {
        double s = 0.0, mag = 0.0;
        for (int h = 0; h < n_head; ++h) {
          double dot = 0.0, m = 0.0;
          for (int d = 0; d < dim; ++d) {
            dot += static_cast<double>(q[h * dim + d]) * k.values[i * dim + d];
            m += std::fabs(static_cast<double>(q[h * dim + d]) * k.values[i * dim + d]);
          }
          s += w[h] * std::max(dot, 0.0);
          mag += w[h] * m;
        }
        EXPECT_NEAR(got[i], s, 1e-5 * mag + 1e-6) << "key " << i;
      }
    }
}

TEST(HeadScoresSimd, EqualsScalarBitForBitAndKeysAreIndependent) {
  if (simd_sets().empty()) GTEST_SKIP() << "no SIMD set on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int dim, n_head, n_keys; };
  for (const Shape sh : {Shape{128, 64, 37}, Shape{64, 8, 5}, Shape{96, 3, 4}, Shape{32, 17, 1},
                         Shape{256, 24, 11}, Shape{160, 72, 9}, Shape{44, 9, 6}})
    for (KvType kt : kTypes) {
      if (sh.dim % 32 && (kt == KvType::kQ8_0 || kt == KvType::kQ4_0)) continue;  // whole blocks
      const GgmlType t = kv_storage_type(kt);
      SCOPED_TRACE(std::string(type_name(t)) + " dim " + std::to_string(sh.dim) + " heads " +
                   std::to_string(sh.n_head) + " keys " + std::to_string(sh.n_keys));
      const StoredKeys k = stored_keys(kt, sh.dim, sh.n_keys, rng);
      std::vector<float> q(sh.n_head * sh.dim), w(sh.n_head);
      for (float& v : q) v = nd(rng);
      for (float& v : w) v = nd(rng);  // negative weights too: the kernel must not assume a sign
      std::vector<float> ref(sh.n_keys);
      gated_head_scores(t, Isa::Scalar)(sh.dim, k.rows.data(), sh.n_keys, q.data(), sh.n_head, w.data(),
                                        ref.data());
      for (Isa isa : simd_sets()) {
        SCOPED_TRACE(isa_name(isa));
        const HeadScoresFn f = gated_head_scores(t, isa);
        std::vector<float> got(sh.n_keys, -1.0f);
        f(sh.dim, k.rows.data(), sh.n_keys, q.data(), sh.n_head, w.data(), got.data());
        for (int i = 0; i < sh.n_keys; ++i) EXPECT_EQ(got[i], ref[i]) << "key " << i;
        // One key at a time, and from every offset: the same bits.
        for (int i = 0; i < sh.n_keys; ++i) {
          float one = -1.0f;
          f(sh.dim, k.rows.data() + i, 1, q.data(), sh.n_head, w.data(), &one);
          EXPECT_EQ(one, ref[i]) << "key " << i << " alone";
        }
        if (sh.n_keys > 2) {
          std::vector<float> tail(sh.n_keys - 2);
          f(sh.dim, k.rows.data() + 2, sh.n_keys - 2, q.data(), sh.n_head, w.data(), tail.data());
          for (int i = 2; i < sh.n_keys; ++i) EXPECT_EQ(tail[i - 2], ref[i]) << "key " << i << " from 2";
        }
      }
    }
}

TEST(HeadScores, RefusesTypesWithoutAKernel) {
  EXPECT_THROW(gated_head_scores(GgmlType::Q4_K, Isa::Scalar), Error);
}

}  // namespace
}  // namespace sluice
