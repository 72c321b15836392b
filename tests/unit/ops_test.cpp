// Forward-pass ops against independent formulations: attention vs. a double-precision dense
// softmax(QKᵀ)V with explicit masks (GQA, sliding window, sinks, several sequences), RoPE's
// relative-position property and norm preservation, RMSNorm and softmax identities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/rope.h"
#include "quant/dequant.h"
#include "quant/dispatch.h"

using namespace sluice;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct AttnCase {
  int n_head, n_head_kv, hd, window;
  bool sinks;
};

// Keys and values of layer 0 of n_seq sequences, n_pos positions each, as stored (after the
// cache type's round trip): what attention must see.
struct KvData {
  int n_pos, width;
  std::vector<float> keys, vals;
  const float* k(int s, int p) const {
    return keys.data() + (static_cast<size_t>(s) * n_pos + p) * width;
  }
  const float* v(int s, int p) const {
    return vals.data() + (static_cast<size_t>(s) * n_pos + p) * width;
  }
};

// Fills layer 0 of n_seq sequences with n_pos random keys and values each and reads back what the
// cache stored (heads of width / n_head).
KvData fill_kv(KvCache& kv, int n_seq, int n_pos, int width) {
  KvData d{n_pos, width, randn(static_cast<size_t>(n_seq) * n_pos * width, 1),
           randn(static_cast<size_t>(n_seq) * n_pos * width, 2)};
  const KvLayerShape& sh = kv.shape(0);
  for (int s = 0; s < n_seq; ++s) {
    kv.reserve(s, n_pos);
    for (int p = 0; p < n_pos; ++p) {
      kv.store(s, 0, p, d.k(s, p), d.v(s, p));
      for (int h = 0; h < sh.n_head; ++h) {
        kv_load_head(kv.type_k(), kv.k_row(s, 0, p) + h * kv_head_bytes(kv.type_k(), sh.head_dim_k),
                     sh.head_dim_k, const_cast<float*>(d.k(s, p)) + h * sh.head_dim_k);
        kv_load_head(kv.type_v(), kv.v_row(s, 0, p) + h * kv_head_bytes(kv.type_v(), sh.head_dim_v),
                     sh.head_dim_v, const_cast<float*>(d.v(s, p)) + h * sh.head_dim_v);
      }
    }
  }
  return d;
}

// Checks attention output against a double-precision dense softmax over the visible positions.
void expect_dense(const AttnCase& c, const KvData& kv, const std::vector<float>& q,
                  const std::vector<float>& sinks, const std::vector<int32_t>& seq,
                  const std::vector<int32_t>& pos, const std::vector<float>& out, float scale,
                  double tol = 1e-5) {
  for (size_t t = 0; t < seq.size(); ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const int kvh = h * c.n_head_kv / c.n_head;
      const int n_pos = pos[t] + 1;
      std::vector<double> w(n_pos, 0.0);
      double mx = c.sinks ? sinks[h] : -1e300;
      std::vector<bool> visible(n_pos, false);
      for (int k = 0; k < n_pos; ++k) {
        visible[k] = c.window == 0 || pos[t] - k < c.window;
        if (!visible[k]) continue;
        double d = 0;
        for (int i = 0; i < c.hd; ++i)
          d += double(q[(t * c.n_head + h) * c.hd + i]) * kv.k(seq[t], k)[kvh * c.hd + i];
        w[k] = d * scale;
        mx = std::max(mx, w[k]);
      }
      double sum = c.sinks ? std::exp(sinks[h] - mx) : 0.0;
      for (int k = 0; k < n_pos; ++k)
        if (visible[k]) sum += (w[k] = std::exp(w[k] - mx));
      for (int i = 0; i < c.hd; ++i) {
        double acc = 0;
        for (int k = 0; k < n_pos; ++k)
          if (visible[k]) acc += w[k] * kv.v(seq[t], k)[kvh * c.hd + i];
        EXPECT_NEAR(out[(t * c.n_head + h) * c.hd + i], acc / sum, tol)
            << "token " << t << " head " << h;
      }
    }
}

class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, MatchesDenseReference) {
  const AttnCase c = GetParam();
  const int n_pos = 37;
  KvCache kv({{c.n_head_kv, c.hd, c.hd, 0}}, 64);
  // Two sequences with different contents; queries from both in one batch.
  const KvData data = fill_kv(kv, 2, n_pos, c.n_head_kv * c.hd);
  const std::vector<int32_t> seq = {0, 1, 0, 1};
  const std::vector<int32_t> pos = {0, 5, 36, 20};
  auto q = randn(seq.size() * c.n_head * c.hd, 3);
  auto sinks = randn(c.n_head, 4);
  AttentionParams ap{
      c.n_head, c.n_head_kv, c.hd, c.hd, 0.37f, c.window, c.sinks ? sinks.data() : nullptr};
  std::vector<float> out(seq.size() * c.n_head * c.hd);
  ThreadPool pool(2);
  attention(pool, ap, kv, 0, q.data(), seq.data(), pos.data(), static_cast<int64_t>(seq.size()),
            out.data());
  expect_dense(c, data, q, sinks, seq, pos, out, 0.37f);
}

// Few (token, head) pairs over a long context on a pool of 6: each pair's positions are split
// into segments computed in parallel and merged; the result must still be the dense softmax,
// including a query whose span is shorter than the others (some of its segments stay small).
TEST_P(AttentionTest, LongContextSplitMatchesDenseReference) {
  const AttnCase c = GetParam();
  const int n_pos = 1500;
  KvCache kv({{c.n_head_kv, c.hd, c.hd, 0}}, 2048);
  const KvData data = fill_kv(kv, 1, n_pos, c.n_head_kv * c.hd);
  const std::vector<int32_t> seq = {0, 0};
  const std::vector<int32_t> pos = {1499, 700};
  auto q = randn(seq.size() * c.n_head * c.hd, 5);
  auto sinks = randn(c.n_head, 6);
  const AttnCase wide{c.n_head, c.n_head_kv, c.hd, c.window * 100, c.sinks};
  AttentionParams ap{
      c.n_head, c.n_head_kv, c.hd, c.hd, 0.11f, wide.window, c.sinks ? sinks.data() : nullptr};
  std::vector<float> out(seq.size() * c.n_head * c.hd);
  ThreadPool pool(6);
  attention(pool, ap, kv, 0, q.data(), seq.data(), pos.data(), static_cast<int64_t>(seq.size()),
            out.data());
  expect_dense(wide, data, q, sinks, seq, pos, out, 0.11f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttnCase{4, 4, 16, 0, false}, AttnCase{8, 2, 32, 0, false},
                      AttnCase{6, 1, 8, 0, false}, AttnCase{4, 2, 16, 7, false},
                      AttnCase{4, 2, 16, 0, true}, AttnCase{4, 2, 16, 5, true},
                      AttnCase{16, 2, 128, 0, false}, AttnCase{24, 2, 40, 3, true},
                      AttnCase{20, 1, 72, 0, true}));

// A token's attention is the fold of the same per-segment states whatever else is computed with
// it: alone on one thread (positions split into segment items), in a batch of scattered tokens
// (blocks of one token), in a prefill-like run of consecutive tokens (blocks of several), on 1, 2
// or 6 threads — bit for bit, for every cache type, with a window and sinks. Positions sit at and
// around segment boundaries; 1100 is no multiple of a segment or a key run.
TEST(Attention, TokenResultDoesNotDependOnBatchOrThreads) {
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kQ8_0})
    for (int window : {0, 300}) {
      SCOPED_TRACE(std::string(kv_type_name(t)) + " window " + std::to_string(window));
      const AttnCase c{16, 2, 64, window, window > 0};
      const int n_pos = 1100;
      KvCache kv({{c.n_head_kv, c.hd, c.hd, window}}, 2048, {t, t, 0});
      const KvData data = fill_kv(kv, 1, n_pos, c.n_head_kv * c.hd);
      auto sinks = randn(c.n_head, 8);
      AttentionParams ap{
          c.n_head, c.n_head_kv, c.hd, c.hd, 0.13f, window, c.sinks ? sinks.data() : nullptr};
      const int64_t width = int64_t{c.n_head} * c.hd;
      std::vector<int32_t> pos = {0, 255, 256, 511, 700, 1023, 1024, 1099};
      for (int32_t p = 1090; p < 1099; ++p) pos.push_back(p);
      const auto q_all = randn(pos.size() * width, 9);
      // Each token alone on one thread: the reference the batches must equal.
      std::vector<float> alone(pos.size() * width);
      {
        ThreadPool pool(1);
        for (size_t i = 0; i < pos.size(); ++i) {
          const int32_t s = 0;
          attention(pool, ap, kv, 0, q_all.data() + i * width, &s, &pos[i], 1,
                    alone.data() + i * width);
        }
      }
      expect_dense(c, data, q_all, sinks, std::vector<int32_t>(pos.size(), 0), pos, alone, 0.13f);
      for (int threads : {1, 2, 6}) {
        ThreadPool pool(threads);
        std::vector<float> out(pos.size() * width);
        const std::vector<int32_t> seq(pos.size(), 0);
        attention(pool, ap, kv, 0, q_all.data(), seq.data(), pos.data(),
                  static_cast<int64_t>(pos.size()), out.data());
        EXPECT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)))
            << threads << " threads";
        // One token on its own with this pool (decode).
        std::vector<float> one(width);
        attention(pool, ap, kv, 0, q_all.data() + 7 * width, seq.data(), &pos[7], 1, one.data());
        EXPECT_EQ(0, std::memcmp(one.data(), alone.data() + 7 * width, width * sizeof(float)))
            << threads;
      }
    }
}

TEST(Rope, DotProductDependsOnlyOnDistance) {
  for (RopeType type : {RopeType::kNorm, RopeType::kNeox}) {
    RopeParams p;
    p.type = type;
    p.n_rot = 16;
    p.freq_base = 10000.0f;
    RopeCache rope(p, nullptr);
    auto q = randn(16, 5), k = randn(16, 6);
    auto dot_at = [&](int pq, int pk) {
      auto a = q, b = k;
      rope.apply(a.data(), 1, 16, pq);
      rope.apply(b.data(), 1, 16, pk);
      double d = 0;
      for (int i = 0; i < 16; ++i) d += double(a[i]) * b[i];
      return d;
    };
    EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-3);
    auto a = q;
    rope.apply(a.data(), 1, 16, 0);
    for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(a[i], q[i]);
  }
}

TEST(Rope, PartialRotaryLeavesTailAndPreservesNorm) {
  RopeParams p;
  p.type = RopeType::kNeox;
  p.n_rot = 8;
  RopeCache rope(p, nullptr);
  auto x = randn(2 * 32, 7);
  auto y = x;
  rope.apply(y.data(), 2, 32, 1234);
  for (int h = 0; h < 2; ++h) {
    double nx = 0, ny = 0;
    for (int i = 0; i < 32; ++i) {
      nx += double(x[h * 32 + i]) * x[h * 32 + i];
      ny += double(y[h * 32 + i]) * y[h * 32 + i];
      if (i >= 8) {
        EXPECT_EQ(x[h * 32 + i], y[h * 32 + i]);
      }
    }
    EXPECT_NEAR(nx, ny, 1e-3 * nx);
  }
}

TEST(Rope, NormPairsAdjacentNeoxPairsHalves) {
  RopeParams p;
  p.n_rot = 4;
  std::vector<float> e1 = {1, 0, 0, 0};
  p.type = RopeType::kNorm;
  RopeCache norm(p, nullptr);
  auto a = e1;
  norm.apply(a.data(), 1, 4, 1);
  EXPECT_NEAR(a[0], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(a[1], std::sin(1.0f), 1e-6);
  p.type = RopeType::kNeox;
  RopeCache neox(p, nullptr);
  auto b = e1;
  neox.apply(b.data(), 1, 4, 1);
  EXPECT_NEAR(b[0], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(b[2], std::sin(1.0f), 1e-6);
  EXPECT_EQ(b[1], 0.0f);
}

TEST(Elementwise, RmsNormAndSoftmax) {
  std::vector<float> x = {3, -4}, w = {2, 0.5f}, y(2);
  rmsnorm(x.data(), w.data(), y.data(), 2, 0.0f);
  const float inv = 1.0f / std::sqrt(12.5f);
  EXPECT_NEAR(y[0], 3 * inv * 2, 1e-6);
  EXPECT_NEAR(y[1], -4 * inv * 0.5f, 1e-6);
  std::vector<float> s = {1000, 1000, 999};
  softmax(s.data(), 3);
  EXPECT_NEAR(s[0] + s[1] + s[2], 1.0, 1e-6);
  EXPECT_NEAR(s[0], s[1], 1e-7);
  EXPECT_NEAR(s[2] / s[0], std::exp(-1.0), 1e-5);
}

TEST(KvCache, BlocksGrowAndPrefixCopies) {
  KvCache kv({{1, 4, 4, 0}}, 1000);
  kv.reserve(0, 600);
  EXPECT_EQ(kv.allocated_bytes(), 3u * KvCache::kBlock * 8 * sizeof(float));
  for (int p = 0; p < 600; ++p) {
    const float row[4] = {static_cast<float>(p), 0, 0, 0};
    kv.store(0, 0, p, row, row);
  }
  kv.set_length(0, 600);
  kv.copy_prefix(0, 3, 300);
  EXPECT_EQ(kv.length(3), 300);
  EXPECT_EQ(reinterpret_cast<const float*>(kv.k_row(3, 0, 299))[0], 299.0f);
  EXPECT_THROW(kv.reserve(1, 1001), Error);
  kv.remove(0);
  EXPECT_EQ(kv.length(0), 0);
}

// Stored types: attention over an f16/bf16/q8_0/q4_0 cache equals the dense softmax over what the
// cache holds (dequantized rows) with the unrounded f32 query. Head size 40 pads the quantized
// heads to 64 values.
class KvTypeAttention : public ::testing::TestWithParam<KvType> {};

TEST_P(KvTypeAttention, MatchesDenseOverStoredRows) {
  const KvType t = GetParam();
  for (const int hd : {32, 40}) {
    SCOPED_TRACE(hd);
    const AttnCase c{4, 2, hd, 0, true};
    KvCache kv({{c.n_head_kv, hd, hd, 0}}, 64, {t, t, 0});
    EXPECT_EQ(kv.bytes_per_position(), 2u * 2 * kv_head_bytes(t, hd));
    const KvData data = fill_kv(kv, 1, 30, c.n_head_kv * hd);
    const std::vector<int32_t> seq = {0, 0}, pos = {29, 11};
    auto q = randn(seq.size() * c.n_head * hd, 3);
    auto sinks = randn(c.n_head, 4);
    AttentionParams ap{c.n_head, c.n_head_kv, hd, hd, 0.3f, 0, sinks.data()};
    std::vector<float> out(seq.size() * c.n_head * hd);
    ThreadPool pool(2);
    attention(pool, ap, kv, 0, q.data(), seq.data(), pos.data(), 2, out.data());
    expect_dense(c, data, q, sinks, seq, pos, out, 0.3f, 2e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KvTypeAttention,
                         ::testing::Values(KvType::kF16, KvType::kBF16, KvType::kQ8_0,
                                           KvType::kQ4_0),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

// The attention tiles read every KV cache type where it is stored, against f32 queries: each
// key score equals the dequantized row's dot (in double) up to float rounding in every kernel set,
// and value sums over stored rows equal value sums over the dequantized rows bit for bit (a stored
// value widens exactly to its dequantized float).
TEST(KvTiles, StoredRowsScoreAndSumAsTheirDequantizedValues) {
  std::vector<Isa> sets{Isa::Scalar};
  if (cpu_has_avx2()) sets.push_back(Isa::Avx2);
  if (cpu_has_avx512()) sets.push_back(Isa::Avx512);
  const int n_keys = 37, n_q = kMaxTileQueries;
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0})
    for (int dim : {64, 72, 128, 200}) {
      SCOPED_TRACE(std::string(kv_type_name(t)) + " dim " + std::to_string(dim));
      const uint64_t head = kv_head_bytes(t, dim);
      std::vector<std::byte> raw(head * n_keys);
      std::vector<float> deq(static_cast<size_t>(dim) * n_keys);
      std::vector<const std::byte*> rows;
      std::vector<const float*> deq_ptrs;
      for (int k = 0; k < n_keys; ++k) {
        const auto x = randn(dim, 1 + k + dim);
        kv_store_head(t, x.data(), dim, raw.data() + k * head);
        kv_load_head(t, raw.data() + k * head, dim, deq.data() + static_cast<size_t>(k) * dim);
        rows.push_back(raw.data() + k * head);
        deq_ptrs.push_back(deq.data() + static_cast<size_t>(k) * dim);
      }
      const auto q = randn(static_cast<size_t>(n_q) * dim, 500 + dim);
      const auto w = randn(static_cast<size_t>(n_q) * n_keys, 700 + dim);
      const GgmlType st = kv_storage_type(t);
      for (Isa isa : sets) {
        SCOPED_TRACE(isa_name(isa));
        const AttentionTiles tiles = attention_tiles(st, isa);
        ASSERT_NE(tiles.key_scores, nullptr);
        std::vector<float> scores(static_cast<size_t>(n_q) * n_keys);
        tiles.key_scores(dim, rows.data(), n_keys, q.data(), dim, n_q, scores.data(), n_keys);
        for (int j = 0; j < n_q; ++j)
          for (int k = 0; k < n_keys; ++k) {
            double ref = 0, mag = 0;
            for (int i = 0; i < dim; ++i) {
              const double p =
                  static_cast<double>(deq[static_cast<size_t>(k) * dim + i]) * q[j * dim + i];
              ref += p;
              mag += std::fabs(p);
            }
            EXPECT_NEAR(scores[j * n_keys + k], ref, 1e-5 * mag) << "query " << j << " key " << k;
          }
        if (t == KvType::kF32) continue;
        const StoredValueSumsFn stored = stored_value_sums(st, isa);
        ASSERT_NE(stored, nullptr);
        std::vector<float> got(static_cast<size_t>(n_q) * dim, 0.5f), want(got);
        stored(dim, rows.data(), n_keys, w.data(), n_keys, n_q, got.data(), dim);
        tiles.value_sums(dim, deq_ptrs.data(), n_keys, w.data(), n_keys, n_q, want.data(), dim);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      }
    }
}

// The cache's q8_0 fits each block's scale: its squared error is never above plain q8_0
// quantization's (amax/127) and, over many blocks, clearly below.
TEST(KvCache, Q8_0StoreFitsTheScale) {
  const int n = 32 * 64;
  const auto x = randn(n, 21);
  std::vector<std::byte> raw(kv_head_bytes(KvType::kQ8_0, n)), plain(raw.size());
  std::vector<float> y(n), z(n);
  kv_store_head(KvType::kQ8_0, x.data(), n, raw.data());
  kv_load_head(KvType::kQ8_0, raw.data(), n, y.data());
  scalar::quantize_row_q8_0(x.data(), plain.data(), n);
  dequantize_row(GgmlType::Q8_0, plain.data(), z.data(), n);
  double fitted = 0, base = 0;
  for (int b = 0; b < n / 32; ++b) {
    double eb = 0, pb = 0;
    for (int i = b * 32; i < b * 32 + 32; ++i) {
      eb += (y[i] - x[i]) * (y[i] - x[i]);
      pb += (z[i] - x[i]) * (z[i] - x[i]);
    }
    EXPECT_LE(eb, pb * (1 + 1e-6)) << "block " << b;
    fitted += eb;
    base += pb;
  }
  std::printf("q8_0 store: squared error %.4g fitted vs %.4g plain (ratio %.3f)\n", fitted, base,
              fitted / base);
  EXPECT_LT(fitted, 0.95 * base);
}

// The stored round trip per type: f16 and bf16 round each value; q8_0 keeps each within half a
// step of amax/127 of its block, q4_0 within a step of amax/8.
TEST(KvCache, TypeRoundTripErrors) {
  const auto x = randn(64, 9);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0}) {
    SCOPED_TRACE(kv_type_name(t));
    std::vector<std::byte> raw(kv_head_bytes(t, 64));
    std::vector<float> y(64);
    kv_store_head(t, x.data(), 64, raw.data());
    kv_load_head(t, raw.data(), 64, y.data());
    const double tol = t == KvType::kF32    ? 0
                       : t == KvType::kF16  ? amax / 2048
                       : t == KvType::kBF16 ? amax / 256
                       : t == KvType::kQ8_0 ? amax / 127
                                            : amax / 7;
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[i], x[i], tol) << i;
  }
}

// A windowed layer with a step bound keeps a ring: fixed memory, the window behind each position
// intact, rollback within the bound, and an emptied sequence past it.
TEST(KvCache, WindowRingHoldsTheWindow) {
  const int window = 8, step = 4;
  KvCache kv({{1, 4, 4, window}, {1, 4, 4, 0}}, 100, {KvType::kF32, KvType::kF32, step});
  EXPECT_EQ(kv.layout().ring_slots(0), window + step);
  EXPECT_EQ(kv.layout().ring_slots(1), 0);
  EXPECT_EQ(kv.bytes_per_position(), 32u);
  EXPECT_EQ(kv.bytes_for(10), 32u * 10 + 32u * (window + step));
  for (int p = 0; p < 40; p += step) {
    kv.reserve(0, p + step);
    for (int q = p; q < p + step; ++q) {
      const float row[4] = {static_cast<float>(q), 0, 0, 0};
      kv.store(0, 0, q, row, row);
      kv.store(0, 1, q, row, row);
    }
    kv.set_length(0, p + step);
    for (int q = std::max(0, p + step - window); q < p + step; ++q)
      EXPECT_EQ(reinterpret_cast<const float*>(kv.k_row(0, 0, q))[0], static_cast<float>(q));
  }
  EXPECT_THROW(kv.reserve(0, 40 + step + 1), Error);
  kv.truncate(0, 40 - step);
  EXPECT_EQ(kv.length(0), 40 - step);
  EXPECT_EQ(reinterpret_cast<const float*>(kv.k_row(0, 0, 36 - window + 1))[0],
            static_cast<float>(36 - window + 1));
  kv.copy_prefix(0, 1, 36);
  EXPECT_EQ(kv.length(1), 36);
  kv.copy_prefix(0, 2, 20);  // rows 13..19 were overwritten
  EXPECT_EQ(kv.length(2), 0);
  kv.truncate(0, 10);
  EXPECT_EQ(kv.length(0), 0);
  EXPECT_EQ(kv.allocated_bytes(), 2 * 32u * (window + step) + 2 * 32u * KvCache::kBlock + 0u);
}

// k_rows / v_rows give, position by position, the rows k_row / v_row give: across allocation
// blocks of a growing layer and across the wrap of a window ring.
TEST(KvCache, RowRunsEqualSingleRowLookups) {
  const int window = 40, step = 24, ring = window + step;
  KvCache kv({{2, 4, 4, window}, {2, 4, 4, 0}}, 3 * KvCache::kBlock,
             {KvType::kF16, KvType::kF32, step});
  ASSERT_EQ(kv.layout().ring_slots(0), ring);
  const int n = 2 * KvCache::kBlock + 40;
  for (int p = 0; p < n; p += step) {
    const int end = std::min(n, p + step);
    kv.reserve(0, end);
    kv.set_length(0, end);
  }
  std::vector<const std::byte*> got(n);
  for (const int layer : {0, 1})
    for (const auto& [from, count] : {std::pair{n - ring, ring}, {n - 50, 50}, {n - ring + 3, 7}}) {
      kv.k_rows(0, layer, from, count, got.data());
      for (int i = 0; i < count; ++i)
        EXPECT_EQ(got[i], kv.k_row(0, layer, from + i)) << layer << " " << from + i;
      kv.v_rows(0, layer, from, count, got.data());
      for (int i = 0; i < count; ++i)
        EXPECT_EQ(got[i], kv.v_row(0, layer, from + i)) << layer << " " << from + i;
    }
  // The growing layer from position 0, across both block boundaries.
  kv.k_rows(0, 1, 0, n, got.data());
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], kv.k_row(0, 1, i)) << i;
  kv.v_rows(0, 1, KvCache::kBlock - 5, KvCache::kBlock + 10, got.data());
  for (int i = 0; i < KvCache::kBlock + 10; ++i)
    EXPECT_EQ(got[i], kv.v_row(0, 1, KvCache::kBlock - 5 + i)) << i;
}

}  // namespace
