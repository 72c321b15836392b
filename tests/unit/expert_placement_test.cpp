// Expert placement for --split-mode experts: every expert has one owner, counts per rank stay
// even, and a skewed heat profile spreads the hot experts so expected load is balanced; replicas
// copy each layer's hottest experts a rank does not own, and the per-layer assignment of their
// slots is the same on every rank and evens out the routing.
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

// Heat (n_layer · n_expert) falling with a per-layer shuffle of the experts.
std::vector<double> zipf_heat(int n_layer, int n_expert, unsigned seed) {
  std::vector<double> heat(static_cast<size_t>(n_layer) * n_expert);
  std::mt19937 rng(seed);
  for (int il = 0; il < n_layer; ++il) {
    std::vector<int> perm(n_expert);
    for (int e = 0; e < n_expert; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int e = 0; e < n_expert; ++e) heat[il * n_expert + perm[e]] = 1000.0 / (e + 1);
  }
  return heat;
}

TEST(ExpertPlacement, ReplicasAreTheHottestExpertsARankDoesNotOwn) {
  const int n_expert = 32, n_layer = 3, n_ranks = 3, replicas = 4;
  const std::vector<double> heat = zipf_heat(n_layer, n_expert, 5);
  const ExpertPlacement p =
      place_experts(std::vector<bool>(n_layer, true), n_expert, n_ranks, heat, replicas);
  const ExpertPlacement plain = place_experts(std::vector<bool>(n_layer, true), n_expert, n_ranks, heat);
  EXPECT_EQ(p.owner, plain.owner);  // replicas never move an expert's owner
  for (int r = 0; r < n_ranks; ++r) {
    EXPECT_EQ(p.replicated(r), n_layer * replicas);
    EXPECT_NEAR(p.held_fraction(r),
                static_cast<double>(p.owned(r) + n_layer * replicas) / (n_layer * n_expert), 1e-12);
    for (int il = 0; il < n_layer; ++il) {
      // Its replicas are exactly the `replicas` hottest experts of the layer it does not own.
      std::vector<int> others;
      for (int e = 0; e < n_expert; ++e)
        if (p.owner_of(il, e) != r) others.push_back(e);
      std::stable_sort(others.begin(), others.end(), [&](int a, int b) {
        return heat[il * n_expert + a] > heat[il * n_expert + b];
      });
      for (size_t k = 0; k < others.size(); ++k)
        EXPECT_EQ(p.holds(il, others[k], r), k < replicas) << "layer " << il << " rank " << r;
      for (int e = 0; e < n_expert; ++e)
        if (p.owner_of(il, e) == r) {
          EXPECT_TRUE(p.holds(il, e, r));
        }
    }
  }
  const ExpertPlacement q = ExpertPlacement::decode(p.encode());
  EXPECT_EQ(q.owner, p.owner);
  EXPECT_EQ(q.replicas, p.replicas);
  EXPECT_TRUE(ExpertPlacement::decode(plain.encode()).replicas.empty());
}

// Random routing of decode steps (one token, 8 of 64 experts) and of a 16-token batch: every slot
// goes to a rank holding its expert, an expert's rows stay on one rank, inactive rows get -1, the
// answer is a function of the routing alone (a decoded copy of the placement gives the same), and
// with replicas the busiest rank's slots per layer come closer to an even share than without.
TEST(ExpertPlacement, AssignmentIsDeterministicAndBalancesTheSlots) {
  const int n_expert = 64, n_layer = 2, n_used = 8, n_ranks = 2;
  const std::vector<double> heat = zipf_heat(n_layer, n_expert, 9);
  const std::vector<bool> moe(n_layer, true);
  const ExpertPlacement plain = place_experts(moe, n_expert, n_ranks, heat);
  const ExpertPlacement rep = place_experts(moe, n_expert, n_ranks, heat, 16);
  const ExpertPlacement copy = ExpertPlacement::decode(rep.encode());
  std::mt19937 rng(11);
  std::discrete_distribution<int> pick_0(heat.begin(), heat.begin() + n_expert);
  std::discrete_distribution<int> pick_1(heat.begin() + n_expert, heat.end());
  int64_t excess_plain = 0, excess_rep = 0;
  std::vector<int16_t> a, b, c;
  for (int n_rows : {1, 16}) {
    for (int step = 0; step < 400; ++step) {
      const int il = step % n_layer;
      std::vector<int32_t> ids;
      for (int t = 0; t < n_rows; ++t) {
        std::vector<int32_t> row;
        while (static_cast<int>(row.size()) < n_used) {
          const int e = il == 0 ? pick_0(rng) : pick_1(rng);
          if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
        }
        ids.insert(ids.end(), row.begin(), row.end());
      }
      std::vector<uint8_t> active(n_rows, 1);
      if (n_rows > 1) active[3] = 0;
      plain.assign(il, ids, n_used, active.data(), a);
      rep.assign(il, ids, n_used, active.data(), b);
      copy.assign(il, ids, n_used, active.data(), c);
      ASSERT_EQ(b, c);
      std::vector<int16_t> rank_of(n_expert, -1);
      int64_t live = 0, most_plain = 0, most_rep = 0;
      std::vector<int64_t> load_plain(n_ranks, 0), load_rep(n_ranks, 0);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!active[i / n_used]) {
          EXPECT_EQ(a[i], -1);
          EXPECT_EQ(b[i], -1);
          continue;
        }
        ++live;
        EXPECT_EQ(a[i], plain.owner_of(il, ids[i]));
        ASSERT_GE(b[i], 0);
        EXPECT_TRUE(rep.holds(il, ids[i], b[i]));
        if (rep.replicas[il][ids[i]] == 0) {
          EXPECT_EQ(b[i], rep.owner_of(il, ids[i]));
        }
        if (rank_of[ids[i]] < 0) rank_of[ids[i]] = b[i];
        EXPECT_EQ(rank_of[ids[i]], b[i]) << "an expert's rows split across ranks";
        ++load_plain[a[i]];
        ++load_rep[b[i]];
      }
      for (int r = 0; r < n_ranks; ++r) {
        most_plain = std::max(most_plain, load_plain[r]);
        most_rep = std::max(most_rep, load_rep[r]);
      }
      excess_plain += most_plain - (live + n_ranks - 1) / n_ranks;
      excess_rep += most_rep - (live + n_ranks - 1) / n_ranks;
    }
  }
  EXPECT_LT(excess_rep * 2, excess_plain) << excess_rep << " vs " << excess_plain;
}

// Every expert of a layer held by every rank: each decode step's 8 slots split 4 and 4.
TEST(ExpertPlacement, FullReplicasSplitEveryStepEvenly) {
  const int n_expert = 16;
  const ExpertPlacement p = place_experts({true}, n_expert, 2, {}, max_expert_replicas(n_expert, 2));
  std::vector<int16_t> slot_rank;
  std::mt19937 rng(2);
  for (int step = 0; step < 100; ++step) {
    std::vector<int32_t> ids(n_expert);
    for (int e = 0; e < n_expert; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(8);
    p.assign(0, ids, 8, nullptr, slot_rank);
    EXPECT_EQ(std::count(slot_rank.begin(), slot_rank.end(), 0), 4);
    EXPECT_EQ(std::count(slot_rank.begin(), slot_rank.end(), 1), 4);
  }
}

TEST(ExpertPlacement, TooManyReplicasIsAnError) {
  EXPECT_EQ(max_expert_replicas(16, 3), 10);  // the rank owning 6 of 16 has 10 others
  EXPECT_NO_THROW(place_experts({true}, 16, 3, {}, 10));
  try {
    place_experts({true}, 16, 3, {}, 11);
    FAIL() << "11 replicas of 16 experts over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 10 replicas per layer"), std::string::npos)
        << e.what();
  }
}

TEST(ExpertPlacement, MoreRanksThanExpertsIsAnError) {
  EXPECT_THROW(place_experts({true}, 2, 3, {}), Error);
}

}  // namespace
}  // namespace sluice
