// Sampling: greedy, seeded reproducibility, the effect of each filter and penalty, and the stop
// matcher that withholds text which might become a stop string.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "runtime/engine_impl.h"
#include "sampling/sampler.h"

using namespace sluice;

namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 2.9f, 0.0f};

SamplingParams params(float temp, int top_k, float top_p, float min_p, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

std::set<int32_t> support(const SamplingParams& p, int draws = 2000) {
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(s.sample(kLogits));
  return seen;
}

}  // namespace

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s(params(0.0f, 0, 1.0f, 0.0f));
  EXPECT_EQ(s.sample(kLogits), 1);
}

// argmax is std::max_element's answer on every input: ties (the first wins), signed zeros,
// infinities, NaNs (chosen only at index 0), and lengths around its 8-wide steps.
TEST(Sampler, ArgmaxEqualsMaxElement) {
  std::mt19937 g(7);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {0.0f, -0.0f, inf, -inf, nan, 1.0f, 1.0f, -2.0f};
  for (int len : {1, 2, 7, 8, 9, 15, 16, 17, 64, 1000, 8192}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x(len);
      // Few distinct values, so ties and repeated maxima are common.
      std::uniform_int_distribution<int> pick(0, 11);
      for (float& v : x) {
        const int k = pick(g);
        v = k < static_cast<int>(specials.size()) ? specials[k] : static_cast<float>(k);
      }
      const auto want = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
      ASSERT_EQ(argmax(x), want) << "length " << len << " trial " << trial;
    }
  }
}

TEST(Sampler, SameSeedSameSequence) {
  Sampler a(params(1.0f, 0, 1.0f, 0.0f, 42)), b(params(1.0f, 0, 1.0f, 0.0f, 42)), c(params(1.0f, 0, 1.0f, 0.0f, 43));
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(kLogits));
    sb.push_back(b.sample(kLogits));
    sc.push_back(c.sample(kLogits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, FiltersLimitTheSupport) {
  EXPECT_EQ(support(params(1.0f, 0, 1.0f, 0.0f)).size(), 6u);
  EXPECT_EQ(support(params(1.0f, 2, 1.0f, 0.0f)), (std::set<int32_t>{1, 4}));
  EXPECT_EQ(support(params(1.0f, 1, 1.0f, 0.0f)), (std::set<int32_t>{1}));
  // p(1) ≈ 0.33, p(4) ≈ 0.30: top-p 0.5 keeps both, not the third (2.5).
  EXPECT_EQ(support(params(1.0f, 0, 0.5f, 0.0f)), (std::set<int32_t>{1, 4}));
  // min-p 0.5 keeps tokens with p ≥ 0.5·p(1): e^-0.5 ≈ 0.61 keeps 2 (2.5), not 0 (1.0).
  EXPECT_EQ(support(params(1.0f, 0, 1.0f, 0.5f)), (std::set<int32_t>{1, 2, 4}));
}

TEST(Sampler, PenaltiesDemoteSeenTokens) {
  SamplingParams p = params(0.0f, 0, 1.0f, 0.0f);
  p.presence_penalty = 1.0f;
  Sampler s(p);
  s.accept(1);
  EXPECT_EQ(s.sample(kLogits), 4);  // 3.0 − 1 < 2.9
  SamplingParams r = params(0.0f, 0, 1.0f, 0.0f);
  r.repeat_penalty = 1.5f;
  Sampler t(r);
  t.accept(1);
  t.accept(4);
  EXPECT_EQ(t.sample(kLogits), 2);  // 3/1.5 and 2.9/1.5 fall below 2.5
  SamplingParams f = params(0.0f, 0, 1.0f, 0.0f);
  f.frequency_penalty = 0.3f;
  Sampler u(f);
  u.accept(1);
  EXPECT_EQ(u.sample(kLogits), 4);
  u.reset();
  EXPECT_EQ(u.sample(kLogits), 1);
}

TEST(Sampler, LogitBiasShiftsAndBansTokens) {
  SamplingParams p = params(0.0f, 0, 1.0f, 0.0f);
  p.logit_bias = {{5, 4.0f}};  // 0.0 + 4 > 3.0
  EXPECT_EQ(Sampler(p).sample(kLogits), 5);
  p.logit_bias = {{1, -std::numeric_limits<float>::infinity()}, {99, 50.0f}};  // 99: not a token
  EXPECT_EQ(Sampler(p).sample(kLogits), 4);
  // With temperature, a banned token never appears.
  SamplingParams t = params(1.0f, 0, 1.0f, 0.0f);
  t.logit_bias = {{1, -std::numeric_limits<float>::infinity()}};
  EXPECT_FALSE(support(t).contains(1));
}

TEST(StopMatcher, WithholdsPossiblePrefixesAndCutsAtMatch) {
  StopMatcher m({"</s>", "STOP"});
  EXPECT_EQ(m.push("Hello <"), "Hello ");
  EXPECT_EQ(m.push("/"), "");
  EXPECT_EQ(m.push("x"), "</x");
  EXPECT_EQ(m.push(" ST"), " ");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.matched());
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("abc E"), "abc ");
  EXPECT_EQ(n.flush(""), "E");
  EXPECT_FALSE(n.matched());
}
