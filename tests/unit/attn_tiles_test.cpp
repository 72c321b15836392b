// The attention tile kernels (quant/attn_tiles*.cpp): SIMD against the scalar twins on random
// rows, and a row's result independent of the rest of its tile, bit for bit — what lets a
// resumed session or a pipeline stage reproduce a single run exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "quant/dequant.h"
#include "quant/dispatch.h"
#include "quant/kernels.h"

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
    k.values.push_back(type == GgmlType::F32   ? f
                       : type == GgmlType::F16 ? fp16_to_fp32(fp32_to_fp16(f))
                                               : bf16_to_fp32(fp32_to_bf16(f)));
  }
  for (int r = 0; r < n_keys; ++r) k.rows.push_back(k.bytes.data() + elem * dim * r);
  return k;
}

TEST(AttentionTiles, KeyScoresMatchScalarAndDoNotDependOnTheTile) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int kQ = kMaxTileQueries;
  for (Isa isa : simd_sets())
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
      for (int dim : {13, 64, 72, 128, 576}) {
        const int n_keys = 37;
        const Keys k = random_keys(t, dim, n_keys, rng);
        std::vector<float> q(kQ * dim);
        for (float& v : q) v = nd(rng);
        const AttentionTiles simd = attention_tiles(t, isa), ref = attention_tiles(t, Isa::Scalar);
        ASSERT_NE(simd.key_scores, ref.key_scores);
        std::vector<float> want(kQ * n_keys), got(kQ * n_keys);
        ref.key_scores(dim, k.rows.data(), n_keys, q.data(), dim, kQ, want.data(), n_keys);
        simd.key_scores(dim, k.rows.data(), n_keys, q.data(), dim, kQ, got.data(), n_keys);
        for (int i = 0; i < kQ * n_keys; ++i)
          EXPECT_NEAR(got[i], want[i], 1e-4 * dim) << type_name(t) << " dim " << dim << " i " << i;
        // Every query count, every offset of the queries and a key run cut anywhere: the same
        // bits as the full tile.
        for (int n_q = 1; n_q < kQ; ++n_q)
          for (int j = 0; j + n_q <= kQ; ++j)
            for (int cut : {0, 5, 16}) {
              std::vector<float> part(n_q * n_keys);
              simd.key_scores(dim, k.rows.data(), cut, q.data() + j * dim, dim, n_q, part.data(),
                              n_keys);
              simd.key_scores(dim, k.rows.data() + cut, n_keys - cut, q.data() + j * dim, dim, n_q,
                              part.data() + cut, n_keys);
              EXPECT_EQ(0, std::memcmp(part.data(), got.data() + j * n_keys,
                                       n_q * n_keys * sizeof(float)))
                  << type_name(t) << " dim " << dim << " rows " << j << ".." << j + n_q << " cut "
                  << cut;
            }
      }
}

TEST(AttentionTiles, ValueSumsMatchScalarAndDoNotDependOnTheTile) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  constexpr int kQ = kMaxTileQueries;
  for (Isa isa : simd_sets())
    for (int dim : {5, 64, 80, 128, 512}) {
      const int n_keys = 70;
      const Keys v = random_keys(GgmlType::F32, dim, n_keys, rng);
      std::vector<const float*> rows;
      for (const std::byte* r : v.rows) rows.push_back(reinterpret_cast<const float*>(r));
      std::vector<float> w(kQ * n_keys);
      for (float& x : w) x = ud(rng);
      const AttentionTiles simd = attention_tiles(GgmlType::F32, isa),
                           ref = attention_tiles(GgmlType::F32, Isa::Scalar);
      std::vector<float> want(kQ * dim, 0.5f), got(kQ * dim, 0.5f);
      ref.value_sums(dim, rows.data(), n_keys, w.data(), n_keys, kQ, want.data(), dim);
      simd.value_sums(dim, rows.data(), n_keys, w.data(), n_keys, kQ, got.data(), dim);
      for (int i = 0; i < kQ * dim; ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << "dim " << dim;
      for (int n_q = 1; n_q < kQ; ++n_q)
        for (int j = 0; j + n_q <= kQ; ++j) {
          std::vector<float> part(n_q * dim, 0.5f);
          simd.value_sums(dim, rows.data(), n_keys, w.data() + j * n_keys, n_keys, n_q, part.data(),
                          dim);
          EXPECT_EQ(0, std::memcmp(part.data(), got.data() + j * dim, n_q * dim * sizeof(float)))
              << "dim " << dim << " rows " << j << ".." << j + n_q;
        }
    }
}

// Value sums over stored f16/bf16 rows equal value_sums over the same rows widened to f32 first,
// bit for bit, in each set (the widening is exact); the SIMD set matches the scalar one.
TEST(AttentionTiles, StoredValueSumsEqualValueSumsOfWidenedRows) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<Isa> sets = simd_sets();
  sets.push_back(Isa::Scalar);
  for (Isa isa : sets)
    for (GgmlType t : {GgmlType::F16, GgmlType::BF16})
      for (int dim : {5, 64, 72, 128, 512}) {
        const int n_keys = 45;
        const Keys v = random_keys(t, dim, n_keys, rng);
        std::vector<const float*> rows;
        for (int k = 0; k < n_keys; ++k) rows.push_back(v.values.data() + k * dim);
        std::vector<float> w(kMaxTileQueries * n_keys);
        for (float& x : w) x = ud(rng);
        for (int nq = 1; nq <= kMaxTileQueries; ++nq) {
          std::vector<float> want(kMaxTileQueries * dim, 0.25f), got(kMaxTileQueries * dim, 0.25f),
              ref(kMaxTileQueries * dim, 0.25f);
          attention_tiles(t, isa).value_sums(dim, rows.data(), n_keys, w.data(), n_keys, nq,
                                             want.data(), dim);
          ASSERT_NE(stored_value_sums(t, isa), nullptr);
          stored_value_sums(t, isa)(dim, v.rows.data(), n_keys, w.data(), n_keys, nq, got.data(),
                                    dim);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << isa_name(isa) << " dim " << dim << " rows " << nq;
          stored_value_sums(t, Isa::Scalar)(dim, v.rows.data(), n_keys, w.data(), n_keys, nq,
                                            ref.data(), dim);
          for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-4f);
        }
      }
  EXPECT_EQ(stored_value_sums(GgmlType::F32, Isa::Scalar), nullptr);
}

// Softmax numerators: the SIMD polynomial exp against the scalar std::exp on random scores of
// several lengths (tails of every size) and spreads (down to weights that underflow to 0); the
// maximum is found exactly and gets weight 1.
TEST(AttentionTiles, ExpScoresMatchScalar) {
  std::mt19937 rng(13);
  for (Isa isa : simd_sets())
    for (float spread : {0.5f, 4.0f, 40.0f})
      for (int n : {1, 3, 8, 13, 64, 257}) {
        std::normal_distribution<float> nd(0.0f, spread);
        std::vector<float> want(n);
        for (float& x : want) x = nd(rng);
        std::vector<float> got = want;
        float m_want = 0, m_got = 0;
        const float s_want =
            attention_tiles(GgmlType::F32, Isa::Scalar).exp_scores(want.data(), n, 0.3f, &m_want);
        const float s_got =
            attention_tiles(GgmlType::F32, isa).exp_scores(got.data(), n, 0.3f, &m_got);
        EXPECT_EQ(m_got, m_want);
        EXPECT_NEAR(s_got, s_want, 2e-6f * s_want) << "n " << n << " spread " << spread;
        bool has_one = false;
        for (int i = 0; i < n; ++i) {
          EXPECT_NEAR(got[i], want[i], 3e-7f * std::max(want[i], 1e-30f) + 1e-37f) << i;
          has_one |= got[i] == 1.0f;
        }
        EXPECT_TRUE(has_one);
      }
}

// The AVX-512 numerators are the AVX2 ones bit for bit (same lane operations, same sum order), so
// a token's attention does not depend on which of the two sets a machine has.
TEST(AttentionTiles, ExpScoresEqualAcrossSimdSets) {
  if (simd_sets().size() < 2) GTEST_SKIP() << "needs AVX2 and AVX-512";
  std::mt19937 rng(17);
  for (float spread : {0.5f, 4.0f, 90.0f})
    for (int n : {1, 7, 8, 9, 15, 16, 17, 24, 31, 256, 263}) {
      std::normal_distribution<float> nd(0.0f, spread);
      std::vector<float> a(n);
      for (float& x : a) x = nd(rng);
      std::vector<float> b = a;
      float ma = 0, mb = 0;
      const float sa = attention_tiles(GgmlType::F32, Isa::Avx2).exp_scores(a.data(), n, 0.7f, &ma);
      const float sb =
          attention_tiles(GgmlType::F32, Isa::Avx512).exp_scores(b.data(), n, 0.7f, &mb);
      EXPECT_EQ(ma, mb);
      EXPECT_EQ(sa, sb) << "n " << n << " spread " << spread;
      EXPECT_EQ(a, b) << "n " << n << " spread " << spread;
    }
}

// n_keys rows of `dim` values (a multiple of 32) in blocks of q8_0 or q4_0: random scales and
// codes, any of which is a valid stored row.
std::vector<std::byte> random_block_rows(GgmlType type, int dim, int n_keys, std::mt19937& rng) {
  const int block = type == GgmlType::Q8_0 ? 34 : 18;
  std::uniform_real_distribution<float> scale(0.005f, 0.1f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> bytes(static_cast<size_t>(dim / 32) * block * n_keys);
  for (size_t b = 0; b < bytes.size(); b += block) {
    const uint16_t d = fp32_to_fp16(scale(rng));
    std::memcpy(bytes.data() + b, &d, 2);
    for (int i = 2; i < block; ++i) bytes[b + i] = static_cast<std::byte>(byte(rng));
  }
  return bytes;
}

using WidenFn = void (*)(int64_t, const std::byte* const*, int, float*);
WidenFn scalar_widen(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return scalar::widen_keys_f32;
    case GgmlType::F16:
      return scalar::widen_keys_f16;
    case GgmlType::BF16:
      return scalar::widen_keys_bf16;
    case GgmlType::Q8_0:
      return scalar::widen_keys_q8_0;
    default:
      return scalar::widen_keys_q4_0;
  }
}

// Keys widened once for a block of queries (prefill) score with the bits of key_scores over the
// stored rows, for every key type, query count and key range, so a prefill chunk and a one-token
// decode agree; the scalar twins give the same bits as the AVX-512 kernels.
TEST(AttentionTiles, WidenedKeysScoreAsStoredRows) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr int kQ = kMaxTileQueries;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0})
    for (int dim : {16, 64, 128, 576}) {
      const bool blocks = t == GgmlType::Q8_0 || t == GgmlType::Q4_0;
      if (blocks && dim % 32 != 0) continue;
      const int n_keys = 37;
      std::vector<std::byte> bytes;
      std::vector<const std::byte*> rows;
      if (blocks) {
        bytes = random_block_rows(t, dim, n_keys, rng);
        for (int k = 0; k < n_keys; ++k) rows.push_back(bytes.data() + bytes.size() / n_keys * k);
      } else {
        const Keys k = random_keys(t, dim, n_keys, rng);
        bytes = k.bytes;
        for (int r = 0; r < n_keys; ++r) rows.push_back(bytes.data() + k.bytes.size() / n_keys * r);
      }
      const AttentionTiles wide = attention_tiles(t, Isa::Avx512);
      ASSERT_NE(wide.tiled_key_scores, nullptr) << type_name(t);
      EXPECT_EQ(attention_tiles(t, Isa::Avx2).tiled_key_scores, nullptr);
      const size_t tiled = static_cast<size_t>((n_keys + kKeyTile - 1) / kKeyTile) * dim * kKeyTile;
      std::vector<float> kt(tiled, -1.0f), kt_twin(tiled, -2.0f);
      wide.widen_keys(dim, rows.data(), n_keys, kt.data());
      scalar_widen(t)(dim, rows.data(), n_keys, kt_twin.data());
      ASSERT_EQ(0, std::memcmp(kt.data(), kt_twin.data(), tiled * sizeof(float))) << type_name(t);
      std::vector<float> q(kQ * dim);
      for (float& v : q) v = nd(rng);
      for (int n_q = 1; n_q <= kQ; ++n_q)
        for (auto [k0, k1] : {std::pair{0, 37}, {0, 16}, {3, 29}, {16, 37}, {20, 21}, {31, 32}}) {
          const int n = k1 - k0;
          std::vector<float> want(n_q * n), got(n_q * n, 7.0f), twin(n_q * n, 8.0f);
          wide.key_scores(dim, rows.data() + k0, n, q.data(), dim, n_q, want.data(), n);
          wide.tiled_key_scores(dim, kt.data(), k0, k1, q.data(), dim, n_q, got.data(), n);
          scalar::tiled_key_scores(dim, kt.data(), k0, k1, q.data(), dim, n_q, twin.data(), n);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
              << type_name(t) << " dim " << dim << " queries " << n_q << " keys " << k0 << ".."
              << k1;
          EXPECT_EQ(0, std::memcmp(twin.data(), want.data(), want.size() * sizeof(float)))
              << type_name(t) << " dim " << dim << " queries " << n_q << " keys " << k0 << ".."
              << k1;
        }
    }
}

TEST(AttentionTiles, OtherTypesHaveNoTileKernel) {
  EXPECT_EQ(attention_tiles(GgmlType::Q4_K, Isa::Scalar).key_scores, nullptr);
  EXPECT_EQ(stored_value_sums(GgmlType::Q4_K, Isa::Scalar), nullptr);
  EXPECT_NE(attention_tiles(GgmlType::Q4_K, Isa::Scalar).value_sums, nullptr);
}

}  // namespace
}  // namespace sluice
