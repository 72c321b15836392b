// Routing statistics, the cache simulation and the trace format on hand-made traces whose answers
// are known: the textbook reference string for LRU and Belady, reuse and concentration counted by
// hand, a lookahead right at one rank and wrong at the other.
#include "experts/routing_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "experts/cache_sim.h"
#include "experts/routing_trace.h"
#include "runtime/routing_taps.h"
#include "test_util.h"

namespace sluice {
namespace {

// One routed layer, n_used ids per row.
RoutingTrace one_layer(int n_expert, int n_used, const std::vector<std::vector<uint16_t>>& rows) {
  RoutingTrace t;
  t.n_layer = 1;
  t.n_expert = n_expert;
  t.n_used = n_used;
  for (size_t r = 0; r < rows.size(); ++r) {
    t.rows.push_back({static_cast<int32_t>(r), static_cast<int32_t>(r), 0});
    t.chosen.insert(t.chosen.end(), rows[r].begin(), rows[r].end());
  }
  return t;
}

// The textbook reference string (Silberschatz): with 3 frames, LRU faults 12 times and the
// optimum 9 times in 20 references. The cache is full after the first 3 (misses for every
// policy), so from then on LRU hits 8 of 17 and Belady 11 of 17.
TEST(CacheSim, TextbookReferenceStringLruAndBelady) {
  const std::vector<int32_t> refs{7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1};
  CacheRequests reqs;
  reqs.n_layer = 1;
  reqs.n_expert = 8;
  for (const int32_t r : refs) reqs.add(0, &r, 1);
  const CacheSimResult lru = simulate_cache(reqs, 3, EvictionPolicy::kLru);
  EXPECT_EQ(lru.warmup_requests, 3u);
  EXPECT_EQ(lru.requests, 17u);
  EXPECT_EQ(lru.hits, 8u);
  const CacheSimResult opt = simulate_belady(reqs, 3);
  EXPECT_EQ(opt.requests, 17u);
  EXPECT_EQ(opt.hits, 11u);
}

TEST(CacheSim, NeverFullCountsFromTheStartAndRequestsMustFit) {
  CacheRequests reqs;
  reqs.n_layer = 2;
  reqs.n_expert = 4;
  const int32_t a[2] = {0, 1}, b[2] = {2, 3};
  reqs.add(0, a, 2);
  reqs.add(1, b, 2);
  reqs.add(0, a, 2);
  const CacheSimResult r = simulate_cache(reqs, 8, EvictionPolicy::kNextUse);
  EXPECT_EQ(r.warmup_requests, 0u);
  EXPECT_EQ(r.requests, 6u);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.layer_requests[0], 4u);
  EXPECT_EQ(r.layer_hits[0], 2u);
  EXPECT_EQ(r.layer_hits[1], 0u);
  EXPECT_THROW(simulate_belady(reqs, 1), Error);
}

// A request never evicts its own experts: with 2 slots and requests {0,1},{2,3} alternating with
// {0,1}, every request misses entirely, and the policies agree with Belady (no choice exists).
TEST(CacheSim, PinnedRequestsLeaveNoChoice) {
  CacheRequests reqs;
  reqs.n_layer = 1;
  reqs.n_expert = 4;
  const int32_t a[2] = {0, 1}, b[2] = {2, 3};
  for (int i = 0; i < 6; ++i) reqs.add(0, i % 2 ? b : a, 2);
  for (const EvictionPolicy p : kEvictionPolicies) EXPECT_EQ(simulate_cache(reqs, 2, p).hits, 0u);
  EXPECT_EQ(simulate_belady(reqs, 2).hits, 0u);
}

TEST(RoutingStats, ReuseCountedByHand) {
  // rows 1..7 repeat row 0 ({0,1}); row 8 shares one expert with them.
  std::vector<std::vector<uint16_t>> rows(8, {0, 1});
  rows.push_back({1, 2});
  const RoutingStats st = routing_stats(one_layer(4, 2, rows));
  EXPECT_DOUBLE_EQ(st.overall.reuse_prev, (7 * 1.0 + 0.5) / 8);
  EXPECT_DOUBLE_EQ(st.overall.reuse_within_8, 0.5);  // only row 8 has 8 rows before it
  EXPECT_EQ(st.overall.tokens, 9u);
}

TEST(RoutingStats, ReuseComparesRowsOfTheSameSequence) {
  // Two interleaved sequences, each repeating itself: every row equals its sequence's previous.
  RoutingTrace t = one_layer(8, 2, {{0, 1}, {4, 5}, {0, 1}, {4, 5}, {0, 1}, {4, 5}});
  for (size_t r = 0; r < t.rows.size(); ++r) t.rows[r].seq = static_cast<int32_t>(r % 2);
  EXPECT_DOUBLE_EQ(routing_stats(t).overall.reuse_prev, 1.0);
}

TEST(RoutingStats, ConcentrationCountedByHand) {
  // Expert 0 chosen 90 times, experts 1..9 once each: 99 choices.
  std::vector<std::vector<uint16_t>> rows(90, {0});
  for (uint16_t e = 1; e < 10; ++e) rows.push_back({e});
  const RoutingStats st = routing_stats(one_layer(10, 1, rows));
  EXPECT_DOUBLE_EQ(st.overall.experts_share_50, 0.1);
  EXPECT_DOUBLE_EQ(st.overall.experts_share_90, 0.1);
  // Evenly spread: 90 % of the choices need 9 of 10 experts.
  std::vector<std::vector<uint16_t>> even;
  for (int r = 0; r < 100; ++r) even.push_back({static_cast<uint16_t>(r % 10)});
  EXPECT_DOUBLE_EQ(routing_stats(one_layer(10, 1, even)).overall.experts_share_90, 0.9);
  EXPECT_DOUBLE_EQ(routing_stats(one_layer(10, 1, even)).overall.experts_share_50, 0.5);
}

TEST(RoutingStats, LookaheadRightAtRankZeroWrongAtRankOne) {
  RoutingTrace t;
  t.n_layer = 2;
  t.n_expert = 8;
  t.n_used = 2;
  t.has_predictions = true;
  for (int r = 0; r < 10; ++r) {
    t.rows.push_back({r, r, 0});
    const uint16_t c = static_cast<uint16_t>(r % 4);
    // layer 0: chosen {c, c+4}, no prediction; layer 1: chosen {c, c+4}, predicted {c, 7−c}.
    t.chosen.insert(t.chosen.end(),
                    {c, static_cast<uint16_t>(c + 4), c, static_cast<uint16_t>(c + 4)});
    t.predicted.insert(t.predicted.end(), {kNoExpert, kNoExpert, c, static_cast<uint16_t>(7 - c)});
  }
  const RoutingStats st = routing_stats(t);
  EXPECT_FALSE(st.layers[0].has_lookahead);
  ASSERT_TRUE(st.layers[1].has_lookahead);
  EXPECT_DOUBLE_EQ(st.layers[1].lookahead_precision, 0.5);
  EXPECT_DOUBLE_EQ(st.layers[1].lookahead_recall, 0.5);
  ASSERT_EQ(st.overall.lookahead_rank_precision.size(), 2u);
  EXPECT_DOUBLE_EQ(st.overall.lookahead_rank_precision[0], 1.0);
  EXPECT_DOUBLE_EQ(st.overall.lookahead_rank_precision[1], 0.0);
}

TEST(RoutingStats, UniformBaselineReusesItsShareAndBeladyBoundsEveryPolicy) {
  RoutingTrace t;
  t.n_layer = 3;
  t.n_expert = 64;
  t.n_used = 8;
  t.rows.resize(3000);
  t.chosen.assign(t.rows.size() * 3 * 8, 0);
  for (int il = 0; il < 3; ++il)  // a valid placeholder; uniform_like redraws every row
    for (size_t r = 0; r < t.rows.size(); ++r)
      for (int k = 0; k < 8; ++k) t.chosen[(r * 3 + il) * 8 + k] = static_cast<uint16_t>(k);
  const RoutingStats st = routing_stats(uniform_like(t, 7));
  EXPECT_NEAR(st.overall.reuse_prev, 8.0 / 64, 0.01);
  EXPECT_NEAR(st.overall.reuse_within_8, 1 - std::pow(1 - 8.0 / 64, 8), 0.015);
  for (size_t i = 0; i < kCacheFractions.size(); ++i) {
    // A cache of a fraction f of uniformly routed experts hits about f, whatever the policy.
    EXPECT_NEAR(st.overall.hit_rate.at("lru")[i], kCacheFractions[i], 0.03);
    for (const EvictionPolicy p : kEvictionPolicies)
      EXPECT_GE(st.overall.hit_rate.at("belady")[i],
                st.overall.hit_rate.at(eviction_policy_name(p))[i]);
  }
}

TEST(RoutingTrace, FileRoundTripAndPreciseErrors) {
  RoutingTrace t;
  t.n_layer = 2;
  t.n_expert = 16;
  t.n_used = 2;
  t.has_predictions = true;
  t.rows = {{5, 0, 0}, {9, 1, 0}, {3, 0, 1}};
  t.chosen = {1, 2, kNoExpert, kNoExpert, 3, 4, kNoExpert, kNoExpert, 15, 0, kNoExpert, kNoExpert};
  t.predicted = {kNoExpert, kNoExpert, kNoExpert, kNoExpert, kNoExpert, kNoExpert,
                 kNoExpert, kNoExpert, kNoExpert, kNoExpert, kNoExpert, kNoExpert};
  const std::string path = (test::scratch_dir() / "roundtrip.trace").string();
  write_routing_trace(path, t);
  const RoutingTrace back = read_routing_trace(path);
  EXPECT_EQ(back.n_layer, 2);
  EXPECT_EQ(back.n_expert, 16);
  EXPECT_TRUE(back.has_predictions);
  ASSERT_EQ(back.n_rows(), 3u);
  EXPECT_EQ(back.rows[2].seq, 1);
  EXPECT_EQ(back.rows[1].token, 9);
  EXPECT_EQ(back.chosen, t.chosen);
  EXPECT_EQ(back.predicted, t.predicted);
  EXPECT_TRUE(back.layer_routed(0));
  EXPECT_FALSE(back.layer_routed(1));
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 3 * (12 + 2 * 2 * 2 * 2));

  // Cut into the last record.
  const std::string cut = (test::scratch_dir() / "cut.trace").string();
  std::filesystem::copy_file(path, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(path) - 5);
  try {
    read_routing_trace(cut);
    FAIL() << "a truncated trace was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 2 is truncated"), std::string::npos) << e.what();
  }
  // An expert twice in one row.
  RoutingTrace bad = t;
  bad.chosen[1] = 1;
  EXPECT_THROW(write_routing_trace((test::scratch_dir() / "bad.trace").string(), bad), Error);
  // Not a trace at all.
  const std::string other = (test::scratch_dir() / "other.trace").string();
  std::ofstream(other) << "GGUF and more bytes than a header needs, surely enough of them";
  try {
    read_routing_trace(other);
    FAIL() << "a foreign file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a routing trace"), std::string::npos) << e.what();
  }
}

TEST(ReplayIds, MappedIntoTheTargetRangeDistinctAndStable) {
  const uint16_t src[8] = {0, 5, 17, 64, 100, 127, 3, 90};
  int32_t same[8];
  map_replay_ids(src, 8, 128, same, 8, 128);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(same[k], src[k]);  // same shape: identity
  // Into 256 experts top-6, 8 experts top-2 (collisions step on), 384 top-12 (variants).
  for (const auto& [e_dst, k_dst] : {std::pair{256, 6}, {8, 2}, {384, 12}, {16, 8}}) {
    std::vector<int32_t> dst(k_dst), again(k_dst);
    map_replay_ids(src, 8, 128, dst.data(), k_dst, e_dst);
    map_replay_ids(src, 8, 128, again.data(), k_dst, e_dst);
    EXPECT_EQ(dst, again);
    EXPECT_EQ(std::set<int32_t>(dst.begin(), dst.end()).size(), static_cast<size_t>(k_dst));
    for (const int32_t id : dst) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, e_dst);
    }
  }
}

// nextuse ranks rarely used experts by their history: X, used again more recently than Y, is kept
// when D needs a slot, though both were used less often than the request's share of the experts
// (1/16), the floor the policy once took as a maximum, which tied them and evicted the first slot
// (X's).
TEST(CacheSim, NextUseKeepsTheMoreRecentOfTwoRarelyUsedExperts) {
  auto run = [](bool ask_x_again) {
    CacheRequests reqs;
    reqs.n_layer = 1;
    reqs.n_expert = 16;
    const int32_t x = 0, c = 1, y = 2, d = 3;
    auto add = [&](int32_t e, int times) {
      for (int i = 0; i < times; ++i) reqs.add(0, &e, 1);
    };
    add(x, 1), add(c, 1), add(y, 1), add(c, 5), add(x, 1), add(c, 40), add(d, 1);
    if (ask_x_again) add(x, 1);
    return simulate_cache(reqs, 3, EvictionPolicy::kNextUse).hits;
  };
  EXPECT_EQ(run(true), run(false) + 1);
}

}  // namespace
}  // namespace sluice
