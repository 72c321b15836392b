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

TEST(CacheSim, NeverFullCountsFromTheStartOrTheCountedPart) {
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
  EXPECT_THROW(simulate_belady(reqs, 0), Error);
  // Counting only requests 1.. (a measured part): the first request is simulated, not counted.
  reqs.count_begin = 1;
  const CacheSimResult part = simulate_cache(reqs, 8, EvictionPolicy::kNextUse);
  EXPECT_EQ(part.requests, 4u);
  EXPECT_EQ(part.hits, 2u);
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
  t.rows = {{5, 0, 0}, {9, 1, 0}, {3, 0, 1, true}};  // rows 1 and 2: one pass
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
  EXPECT_FALSE(back.rows[0].joins_pass);
  EXPECT_FALSE(back.rows[1].joins_pass);
  EXPECT_TRUE(back.rows[2].joins_pass);
  EXPECT_EQ(back.n_passes(), 2u);
  EXPECT_EQ(back.chosen, t.chosen);
  EXPECT_EQ(back.predicted, t.predicted);
  EXPECT_TRUE(back.layer_routed(0));
  EXPECT_FALSE(back.layer_routed(1));
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 3 * (16 + 2 * 2 * 2 * 2));

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
  // A pass number that skips one (record 2 in pass 3 after pass 1), and one that goes back.
  for (const auto& [pass, expected] : {std::pair<uint32_t, const char*>{3, "record 2 is in pass 3, expected 1 or 2"},
                                       {0, "record 2 is in pass 0, expected 1 or 2"}}) {
    const std::string skip = (test::scratch_dir() / "skip.trace").string();
    std::filesystem::copy_file(path, skip, std::filesystem::copy_options::overwrite_existing);
    std::fstream f(skip, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + 2 * (16 + 16) + 12);
    f.write(reinterpret_cast<const char*>(&pass), 4);
    f.close();
    try {
      read_routing_trace(skip);
      FAIL() << "pass " << pass << " was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  // Another version.
  {
    const std::string v3 = (test::scratch_dir() / "v3.trace").string();
    std::filesystem::copy_file(path, v3, std::filesystem::copy_options::overwrite_existing);
    std::fstream f(v3, std::ios::in | std::ios::out | std::ios::binary);
    const uint32_t three = 3;
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&three), 4);
    f.close();
    try {
      read_routing_trace(v3);
      FAIL() << "version 3 was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("format version 3, this sluice reads 1 and 2"), std::string::npos)
          << e.what();
    }
  }
  // The first row cannot join a pass.
  RoutingTrace first = t;
  first.rows[0].joins_pass = true;
  EXPECT_THROW(write_routing_trace((test::scratch_dir() / "first.trace").string(), first), Error);
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

// Version 1 (no pass field, 12-byte record heads) still reads: every row a pass of its own.
TEST(RoutingTrace, VersionOneReadsWithEveryRowItsOwnPass) {
  const std::string path = (test::scratch_dir() / "v1.trace").string();
  {
    std::ofstream f(path, std::ios::binary);
    auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
    auto u16 = [&](uint16_t v) { f.write(reinterpret_cast<const char*>(&v), 2); };
    f.write("SLUICERT", 8);
    for (const uint32_t v : {1u, 1u, 8u, 2u, 0u, 0u}) u32(v);  // version, layers, experts, used, flags
    const uint16_t ids[3][2] = {{0, 1}, {1, 2}, {7, 3}};
    for (int r = 0; r < 3; ++r) {
      for (const uint32_t v : {100u + r, static_cast<uint32_t>(r), 0u}) u32(v);  // token, pos, seq
      u16(ids[r][0]), u16(ids[r][1]);
    }
  }
  const RoutingTrace t = read_routing_trace(path);
  ASSERT_EQ(t.n_rows(), 3u);
  EXPECT_EQ(t.n_passes(), 3u);
  EXPECT_EQ(t.rows[2].token, 102);
  EXPECT_EQ(t.rows[2].pos, 2);
  EXPECT_EQ(t.chosen_at(2, 0)[0], 7);
  for (const auto& row : t.rows) EXPECT_FALSE(row.joins_pass);
  // Cut: 12-byte heads, so 3 records of 16 bytes; 5 bytes less leaves record 2 torn.
  std::filesystem::resize_file(path, 32 + 3 * 16 - 5);
  try {
    read_routing_trace(path);
    FAIL() << "a truncated v1 trace was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 2 is truncated"), std::string::npos) << e.what();
  }
}

// A pass of several rows asks each layer once for the union of its rows' experts. One layer, 3
// slots; passes P0 = rows {0,1},{1,2}; P1 = {3,0}; P2 = {1,3}; P3 = {1,0},{0,3}.
//  As passes: P0 [0,1,2] fills the cache (warm-up); P1 [3,0]: 0 hits, 3 evicts 1 (LRU: tied with
//  2 at P0, the first slot goes) or 2 (Belady: never used again); P2 [1,3]: LRU hits 3 and evicts
//  2 for 1, Belady hits both; P3 [1,0,3]: all hit. LRU 5 of 7, Belady 6 of 7.
//  Row by row: the cache fills at {1,2}; then [3,0] (1 hit, as above), [1,3] (LRU 1, Belady 2),
//  [1,0] and [0,3] (2 + 2): LRU 6 of 8, Belady 7 of 8 — P3's second row finds 0 that its first
//  row just asked for, which one union request does not count twice.
TEST(CacheSim, APassAsksEachLayerOnceForItsRowsUnion) {
  RoutingTrace t = one_layer(8, 2, {{0, 1}, {1, 2}, {3, 0}, {1, 3}, {1, 0}, {0, 3}});
  t.rows[1].joins_pass = t.rows[5].joins_pass = true;
  EXPECT_EQ(t.n_passes(), 4u);
  const CacheRequests passes = cache_requests(t, {0}, false);
  ASSERT_EQ(passes.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(passes.ids.begin(), passes.ids.begin() + 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(passes.ids.end() - 3, passes.ids.end()), (std::vector<int32_t>{1, 0, 3}));
  const CacheSimResult lru = simulate_cache(passes, 3, EvictionPolicy::kLru);
  EXPECT_EQ(lru.warmup_requests, 1u);
  EXPECT_EQ(lru.requests, 7u);
  EXPECT_EQ(lru.hits, 5u);
  const CacheSimResult opt = simulate_belady(passes, 3);
  EXPECT_EQ(opt.requests, 7u);
  EXPECT_EQ(opt.hits, 6u);

  const CacheRequests rows = cache_requests(t, {0}, true);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(simulate_cache(rows, 3, EvictionPolicy::kLru).hits, 6u);
  EXPECT_EQ(simulate_cache(rows, 3, EvictionPolicy::kLru).requests, 8u);
  EXPECT_EQ(simulate_belady(rows, 3).hits, 7u);

  // routing_stats takes the passes, counts from row 2 (P1 on), and simulates 3 slots on request.
  RoutingStatsOptions o;
  o.slots = {3};
  o.first_row = 2;
  const RoutingStats st = routing_stats(t, o);
  EXPECT_EQ(st.passes, 3u);
  EXPECT_EQ(st.pass_rows, 4u);
  EXPECT_EQ(st.layer_requests, 3u);
  EXPECT_EQ(st.experts_requested, 7u);
  EXPECT_EQ(st.row_experts, 8u);
  ASSERT_EQ(st.cache_keys.back(), "3 slots");
  EXPECT_DOUBLE_EQ(st.overall.hit_rate.at("belady").back(), 6.0 / 7);
  EXPECT_DOUBLE_EQ(st.overall.hit_rate.at("lru").back(), 5.0 / 7);
  // Counting from row 1 (inside P0) starts at the next pass that begins there: P1.
  o.first_row = 1;
  EXPECT_EQ(routing_stats(t, o).passes, 3u);
  o.first_row = 6;
  EXPECT_THROW(routing_stats(t, o), Error);
}

// route-stats --timeline: the same passes one by one, each with its first row, the experts it
// asked for and each policy's hits, which add up to the totals above.
TEST(CacheSim, TimelineGivesEachPassItsHits) {
  RoutingTrace t = one_layer(8, 2, {{0, 1}, {1, 2}, {3, 0}, {1, 3}, {1, 0}, {0, 3}});
  t.rows[1].joins_pass = t.rows[5].joins_pass = true;
  RoutingStatsOptions o;
  const CacheTimeline tl = cache_timeline(t, o, 3);
  ASSERT_EQ(tl.policies.back(), "belady");
  const size_t lru = std::find(tl.policies.begin(), tl.policies.end(), "lru") - tl.policies.begin();
  ASSERT_LT(lru, tl.policies.size());
  ASSERT_EQ(tl.passes.size(), 4u);
  std::vector<size_t> rows;
  std::vector<uint64_t> requested, lru_hits, belady_hits;
  for (const CacheTimeline::Pass& p : tl.passes) {
    rows.push_back(p.row);
    requested.push_back(p.requested);
    lru_hits.push_back(p.hits[lru]);
    belady_hits.push_back(p.hits.back());
  }
  EXPECT_EQ(rows, (std::vector<size_t>{0, 2, 3, 4}));
  EXPECT_EQ(requested, (std::vector<uint64_t>{3, 2, 2, 3}));
  // P0 fills the cache; then LRU hits 5 of 7 (0 of P1's, both of P2's: 1 and 3, all of P3's) and
  // Belady 6.
  EXPECT_EQ(lru_hits, (std::vector<uint64_t>{0, 1, 1, 3}));
  EXPECT_EQ(belady_hits[0], 0u);
  EXPECT_EQ(belady_hits[1] + belady_hits[2] + belady_hits[3], 6u);
  // Counting from row 2 keeps the cache simulated from row 0 and lists the passes from P1 on.
  o.first_row = 2;
  const CacheTimeline from = cache_timeline(t, o, 3);
  ASSERT_EQ(from.passes.size(), 3u);
  EXPECT_EQ(from.passes[0].row, 2u);
  EXPECT_EQ(from.passes[0].hits, tl.passes[1].hits);
}

// A request larger than the cache (a prompt pass's union) recycles the slot of its own expert
// handed out first, as the store does: [0,1,2] in 2 slots leaves 1 and 2.
TEST(CacheSim, ARequestLargerThanTheCacheRecyclesItsFirstExpert) {
  for (const auto& [next, hits] : {std::pair<int32_t, uint64_t>{0, 0}, {1, 1}, {2, 1}}) {
    CacheRequests reqs;
    reqs.n_layer = 1;
    reqs.n_expert = 4;
    const int32_t big[3] = {0, 1, 2};
    reqs.add(0, big, 3);
    reqs.add(0, &next, 1);
    for (const EvictionPolicy p : kEvictionPolicies) EXPECT_EQ(simulate_cache(reqs, 2, p).hits, hits) << next;
    EXPECT_EQ(simulate_belady(reqs, 2).hits, hits) << next;
    EXPECT_EQ(simulate_belady(reqs, 2).requests, 1u);
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
