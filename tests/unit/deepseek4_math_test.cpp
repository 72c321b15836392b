// The DeepSeek V4 pieces with their own math, against hand-computed values: hyper-connection
// Sinkhorn mixing, compressor pooling with the ratio-4 overlap, indexer scoring and top-k, the
// YaRN angle table of the tail RoPE, and the deepseek4 cache's bytes per token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kv/ds4_cache.h"
#include "model/archs/deepseek4/compressor.h"
#include "model/archs/deepseek4/hyper_connections.h"

using namespace sluice;

TEST(Deepseek4Math, SinkhornOneIterationIsRowSoftmaxThenColumns) {
  // S = 2, comb logits [[0, ln 3], [0, 0]]: row softmax [[1/4, 3/4], [1/2, 1/2]], column sums 3/4
  // and 5/4, so columns give [[1/3, 3/5], [2/3, 2/5]].
  HcConfig c;
  c.n_streams = 2;
  c.n_iter = 1;
  c.eps = 0.0f;
  const float m[8] = {0, 0, 0, 0, 0, std::log(3.0f), 0, 0};
  const float base[8] = {0.5f, -1.0f, 0, 2.0f, 0, 0, 0, 0};
  const float scale[3] = {1, 1, 1};
  float pre[2], post[2], comb[4];
  hc_weights(c, m, base, scale, pre, post, comb);
  EXPECT_NEAR(comb[0], 1.0f / 3, 1e-6);
  EXPECT_NEAR(comb[1], 3.0f / 5, 1e-6);
  EXPECT_NEAR(comb[2], 2.0f / 3, 1e-6);
  EXPECT_NEAR(comb[3], 2.0f / 5, 1e-6);
  EXPECT_NEAR(pre[0], 1.0f / (1.0f + std::exp(-0.5f)), 1e-6);
  EXPECT_NEAR(pre[1], 1.0f / (1.0f + std::exp(1.0f)), 1e-6);
  EXPECT_NEAR(post[0], 1.0f, 1e-6);                             // 2·σ(0)
  EXPECT_NEAR(post[1], 2.0f / (1.0f + std::exp(-2.0f)), 1e-6);  // 2·σ(2)
}

TEST(Deepseek4Math, SinkhornConvergesToDoublyStochastic) {
  HcConfig c;  // S = 4, 20 iterations, eps 1e-6
  std::vector<float> m(24), base(24);
  for (int i = 0; i < 24; ++i) {
    m[i] = std::sin(1.7f * i);
    base[i] = 0.3f * std::cos(0.9f * i);
  }
  const float scale[3] = {0.5f, 1.5f, 2.0f};
  float pre[4], post[4], comb[16];
  hc_weights(c, m.data(), base.data(), scale, pre, post, comb);
  for (int i = 0; i < 4; ++i) {
    float row = 0, col = 0;
    for (int j = 0; j < 4; ++j) row += comb[i * 4 + j], col += comb[j * 4 + i];
    EXPECT_NEAR(col, 1.0f, 1e-5) << "column " << i;  // the last pass normalises columns
    EXPECT_NEAR(row, 1.0f, 1e-3) << "row " << i;
    EXPECT_NEAR(pre[i], 1.0f / (1.0f + std::exp(-(0.5f * m[i] + base[i]))) + 1e-6f, 1e-6);
  }
}

TEST(Deepseek4Math, HcPostMixesStreamsAndAddsOutput) {
  HcConfig c;
  c.n_streams = 2;
  const int64_t d = 2;
  std::vector<float> x = {1, 2, 10, 20};  // stream 0 = (1, 2), stream 1 = (10, 20)
  const float f[2] = {100, 200}, post[2] = {0.5f, 2.0f};
  const float comb[4] = {0.25f, 0.75f, 0.5f, 0.5f};  // [source][destination]
  hc_post(c, f, post, comb, 1, d, x.data());
  EXPECT_FLOAT_EQ(x[0], 0.5f * 100 + 0.25f * 1 + 0.5f * 10);
  EXPECT_FLOAT_EQ(x[1], 0.5f * 200 + 0.25f * 2 + 0.5f * 20);
  EXPECT_FLOAT_EQ(x[2], 2.0f * 100 + 0.75f * 1 + 0.5f * 10);
  EXPECT_FLOAT_EQ(x[3], 2.0f * 200 + 0.75f * 2 + 0.5f * 20);
}

TEST(Deepseek4Math, CompressorPoolsBothBlocksThroughTheirHalves) {
  // w = 1, cw = 2: a row is [kv0, kv1, score0, score1]. Previous block through channel 0, current
  // through channel 1; values of the other half must not count.
  const float prev_rows[4][4] = {
      {1, 1000, 0, 50}, {2, 1000, 0, 50}, {3, 1000, 0, 50}, {4, 1000, 0, 50}};
  const float ln4 = std::log(4.0f);
  const float cur_rows[4][4] = {
      {1000, 10, 50, 0}, {1000, 20, 50, 0}, {1000, 30, 50, 0}, {1000, 40, 50, ln4}};
  const float* prev[4] = {prev_rows[0], prev_rows[1], prev_rows[2], prev_rows[3]};
  const float* cur[4] = {cur_rows[0], cur_rows[1], cur_rows[2], cur_rows[3]};
  float out = 0;
  compress_pool(1, 2, prev, 4, cur, 4, 1, &out);
  // exp weights 1,1,1,1 | 1,1,1,4: (1+2+3+4+10+20+30+160)/11
  EXPECT_NEAR(out, 230.0f / 11.0f, 1e-4);
  // Block 0 has no previous block: (10+20+30+160)/7.
  compress_pool(1, 2, nullptr, 0, cur, 4, 1, &out);
  EXPECT_NEAR(out, 220.0f / 7.0f, 1e-4);
}

TEST(Deepseek4Math, CompressorSoftmaxIsPerChannel) {
  // Ratio-128 style (cw = w = 2, no previous block): channel 1's scores must not move channel 0.
  const float a[4] = {1, 5, 0, 0}, b[4] = {3, 7, 0, std::log(3.0f)};
  const float* cur[2] = {a, b};
  float out[2];
  compress_pool(2, 2, nullptr, 0, cur, 2, 0, out);
  EXPECT_NEAR(out[0], 2.0f, 1e-5);  // equal scores: mean of 1 and 3
  EXPECT_NEAR(out[1], (5.0f + 3.0f * 7.0f) / 4.0f, 1e-5);
}

TEST(Deepseek4Math, IndexerScoresReluWeightedAndTopK) {
  // Two heads of dim 2. q0 = (1, 0), q1 = (0, 1); weights 2 and -1.
  const float q[4] = {1, 0, 0, 1}, wgt[2] = {2, -1};
  const float k0[2] = {1, 1}, k1[2] = {-1, 3}, k2[2] = {0.5f, -2}, k3[2] = {3, 0};
  const std::byte* keys[4] = {reinterpret_cast<const std::byte*>(k0),
                              reinterpret_cast<const std::byte*>(k1),
                              reinterpret_cast<const std::byte*>(k2),
                              reinterpret_cast<const std::byte*>(k3)};
  float s[4];
  indexer_scores(GgmlType::F32, q, wgt, 2, 2, keys, 0, 4, s);
  EXPECT_FLOAT_EQ(s[0], 2 * 1 - 1 * 1);  // 1
  EXPECT_FLOAT_EQ(s[1], 2 * 0 - 1 * 3);  // relu(−1) = 0 → −3
  EXPECT_FLOAT_EQ(s[2], 2 * 0.5f - 0);   // relu(−2) = 0 → 1
  EXPECT_FLOAT_EQ(s[3], 2 * 3);          // 6
  std::vector<int32_t> sel;
  select_top(s, 4, 2, sel);  // 6 at 3, then the tie 1 at 0 and 2: the lower index wins
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 3}));
  select_top(s, 4, 4, sel);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Deepseek4Math, YarnAngleTable) {
  // The reference model's compressed regime: R 32, base 160000, factor 16, original context 65536
  // → correction dims 7 and 13 (pairs 0–7 unscaled, 8–12 blended, 13–15 divided by 16).
  TailRope rope({32, 160000.0f, true, 16.0f, 65536});
  EXPECT_EQ(rope.corr_lo(), 7.0f);
  EXPECT_EQ(rope.corr_hi(), 13.0f);
  const int p = 1000;
  float c[16], s[16];
  rope.angles(p, c, s);
  for (int i = 0; i < 16; ++i) {
    const double omega = std::pow(160000.0, -2.0 * i / 32);
    const double gamma = 1.0 - std::clamp((i - 7.0) / 6.0, 0.0, 1.0);
    const double theta = p * omega * (gamma + (1.0 - gamma) / 16.0);
    // Float32 angles drift from exact ones by ~1e-4 rad at p = 1000 (why ggml's way matters).
    EXPECT_NEAR(c[i], std::cos(theta), 5e-4) << "pair " << i;
    EXPECT_NEAR(s[i], std::sin(theta), 5e-4) << "pair " << i;
  }
  // The plain regime is ggml's: θ starts at p and is multiplied by base^(−2/R) in float.
  TailRope plain({32, 10000.0f, false, 1.0f, 0});
  plain.angles(p, c, s);
  const float step = std::pow(10000.0f, -2.0f / 32.0f);
  float theta = static_cast<float>(p);
  for (int i = 0; i < 16; ++i, theta *= step) {
    EXPECT_EQ(c[i], std::cos(theta)) << "pair " << i;
    EXPECT_EQ(s[i], std::sin(theta)) << "pair " << i;
  }
}

TEST(Deepseek4Math, TailRopeRotatesLastDimsAndInvertsExactly) {
  TailRope rope({4, 160000.0f, true, 16.0f, 65536});
  std::vector<float> v = {1, 2, 3, 4, 5, 6};  // dims 0–1 untouched, pairs (2,3) and (4,5)
  const std::vector<float> orig = v;
  rope.rotate(v.data(), 1, 6, 37);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.0f);
  float c[2], s[2];
  rope.angles(37, c, s);
  EXPECT_FLOAT_EQ(v[2], 3 * c[0] - 4 * s[0]);
  EXPECT_FLOAT_EQ(v[3], 3 * s[0] + 4 * c[0]);
  rope.rotate(v.data(), 1, 6, -37);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], orig[i], 1e-6);
}

TEST(Deepseek4Math, CacheBytesPerTokenOfV4Flash) {
  // 43 layers [0, 0, 4, 128, 4, …, 4]: 21 × (512 + 128)/4 + 20 × 512/128 = 3440 floats per token.
  Ds4CacheShape s;
  s.ratio = {0, 0};
  for (int il = 2; il < 43; ++il) s.ratio.push_back(il % 2 == 0 ? 4 : 128);
  s.head_dim = 512;
  s.index_dim = 128;
  s.window = 128;
  EXPECT_EQ(s.bytes_per_position(), 3440u * 4);
  // Fixed: rings of W + 16 raw keys everywhere, compressor and indexer states.
  const uint64_t fixed =
      43ull * 144 * 512 + 21ull * 24 * 4 * 512 + 21ull * 24 * 4 * 128 + 20ull * 144 * 2 * 512;
  EXPECT_EQ(s.fixed_bytes(), fixed * 4);
}
