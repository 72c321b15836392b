// Expert placement for --split-mode experts: every expert has one owner, counts per rank stay
// even, and a skewed heat profile spreads the hot experts so expected load is balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "experts/expert_placement.h"

namespace sluice {
namespace {

TEST(ExpertPlacement, WithoutHeatDealsRoundRobinAndSkipsDenseLayers) {
  const ExpertPlacement p = place_experts({false, true, true}, 8, 3, {});
  EXPECT_TRUE(p.owner[0].empty());
  for (int il : {1, 2})
    for (int e = 0; e < 8; ++e) EXPECT_EQ(p.owner_of(il, e), e % 3);
  EXPECT_EQ(p.owned(0), 6);
  EXPECT_EQ(p.owned(1), 6);
  EXPECT_EQ(p.owned(2), 4);
  EXPECT_NEAR(p.owned_fraction(0) + p.owned_fraction(1) + p.owned_fraction(2), 1.0, 1e-12);
}

// Zipf-like heat over 64 experts, hottest at low indices (where round-robin or contiguous blocks
// would put the hot ones together): each rank gets 32 experts per layer and within 5 % of half
// the load, where a contiguous split would give one rank most of it.
TEST(ExpertPlacement, SkewedHeatIsSpreadAndBalanced) {
  const int n_expert = 64, n_layer = 4;
  std::vector<double> heat(n_layer * n_expert);
  std::mt19937 rng(3);
  for (int il = 0; il < n_layer; ++il) {
    std::vector<int> perm(n_expert);
    for (int e = 0; e < n_expert; ++e) perm[e] = e;
    if (il > 0) std::shuffle(perm.begin(), perm.end(), rng);
    for (int e = 0; e < n_expert; ++e) heat[il * n_expert + perm[e]] = 1000.0 / (e + 1);
  }
  const ExpertPlacement p = place_experts(std::vector<bool>(n_layer, true), n_expert, 2, heat);
  for (int il = 0; il < n_layer; ++il) {
    double load[2] = {0, 0};
    int count[2] = {0, 0};
    for (int e = 0; e < n_expert; ++e) {
      const int r = p.owner_of(il, e);
      ASSERT_TRUE(r == 0 || r == 1);
      load[r] += heat[il * n_expert + e];
      ++count[r];
    }
    EXPECT_EQ(count[0], 32);
    EXPECT_EQ(count[1], 32);
    EXPECT_NEAR(load[0] / (load[0] + load[1]), 0.5, 0.05) << "layer " << il;
  }
  // The two hottest experts of a layer sit on different ranks.
  EXPECT_NE(p.owner_of(0, 0), p.owner_of(0, 1));
}

TEST(ExpertPlacement, EncodesAndDecodesTheSamePlacement) {
  std::vector<double> heat(2 * 16);
  for (size_t i = 0; i < heat.size(); ++i) heat[i] = static_cast<double>((i * 7919) % 31);
  const ExpertPlacement p = place_experts({true, true}, 16, 3, heat);
  const ExpertPlacement q = ExpertPlacement::decode(p.encode());
  EXPECT_EQ(q.n_ranks, 3);
  EXPECT_EQ(q.n_expert, 16);
  EXPECT_EQ(q.owner, p.owner);
}

TEST(ExpertPlacement, MoreRanksThanExpertsIsAnError) {
  EXPECT_THROW(place_experts({true}, 2, 3, {}), Error);
}

}  // namespace
}  // namespace sluice
