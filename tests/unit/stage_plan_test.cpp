// Pipeline placement as a pure function: layers split by estimated time per stage (so a host with
// less memory and a slow disk takes fewer layers), each stage planned by the memory planner, and
// --stages parsed strictly.
#include "plan/stage_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace sluice;

namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

// 16 identical layers: 50 MiB resident and 1 GiB of routed experts (64 experts, 8 used) each, a
// 500 MiB embedding on the first stage and a 500 MiB head on the last.
MemoryFacts facts(LayerSpan s) {
  const int end = s.end < 0 ? 16 : s.end;
  const uint64_t n = static_cast<uint64_t>(end - s.begin);
  MemoryFacts f;
  f.resident_bytes = n * 50 * kMiB + (s.begin == 0 ? 500 * kMiB : 0) + (end == 16 ? 500 * kMiB : 0);
  f.routed_bytes = n * kGiB;
  f.expert_bytes = kGiB / 64;
  f.n_expert = 64;
  f.n_expert_used = 8;
  f.kv_bytes_per_token = n * 4096;
  return f;
}

HostFacts host(const char* name, uint64_t budget, double disk) {
  return {name, {budget, true, "--mem-limit"}, disk};
}

PlanRequest request() {
  PlanRequest r;
  r.n_ctx = 1024;
  return r;
}

}  // namespace

TEST(StagePlan, EqualHostsSplitEvenly) {
  const PipelinePlan p =
      plan_pipeline(facts, 16, {host("a", 64 * kGiB, 2e9), host("b", 64 * kGiB, 2e9)}, request());
  ASSERT_TRUE(p.ok) << p.reason;
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[0].span.begin, 0);
  EXPECT_EQ(p.stages[0].span.end, 8);
  EXPECT_EQ(p.stages[1].span.end, 16);
  EXPECT_EQ(p.stages[0].memory.placement, Placement::kRam);
  EXPECT_EQ(p.stages[0].facts.routed_bytes, 8 * kGiB);
}

TEST(StagePlan, ASmallHostWithASlowDiskTakesFewerLayers) {
  // Host a holds 6 GiB: with 8 layers it would stream most experts from a 0.5 GB/s disk; by bytes
  // alone (same file share) the split would be even.
  const PipelinePlan p =
      plan_pipeline(facts, 16, {host("a", 6 * kGiB, 0.5e9), host("b", 64 * kGiB, 2e9)}, request());
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_LT(p.stages[0].span.end, 8);
  EXPECT_EQ(p.stages[1].span.begin, p.stages[0].span.end);
  EXPECT_EQ(p.stages[1].memory.placement, Placement::kRam);
  // The chosen split is no slower than the even one.
  const PipelinePlan even = evaluate_pipeline(
      facts, {{0, 8}, {8, 16}}, {host("a", 6 * kGiB, 0.5e9), host("b", 64 * kGiB, 2e9)}, request());
  const double slowest = std::max(p.stages[0].seconds_per_token, p.stages[1].seconds_per_token);
  EXPECT_LT(slowest, std::max(even.stages[0].seconds_per_token, even.stages[1].seconds_per_token));
}

TEST(StagePlan, NoFitNamesTheStageAndHost) {
  const PipelinePlan p = plan_pipeline(
      facts, 16, {host("tiny", 256 * kMiB, 1e9), host("b", 64 * kGiB, 1e9)}, request());
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.reason.find("on tiny"), std::string::npos) << p.reason;
}

TEST(StagePlan, ParseStages) {
  const auto s = parse_stages("0:5,5:16", 16, 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].end, 5);
  EXPECT_EQ(s[1].begin, 5);
  EXPECT_THROW(parse_stages("0:5,6:16", 16, 2), Error);      // gap
  EXPECT_THROW(parse_stages("0:5,5:15", 16, 2), Error);      // short of the last layer
  EXPECT_THROW(parse_stages("0:16", 16, 2), Error);          // one range for two stages
  EXPECT_THROW(parse_stages("0:5,5:5,5:16", 16, 3), Error);  // empty range
  EXPECT_THROW(parse_stages("0-5,5:16", 16, 2), Error);      // not BEGIN:END
  EXPECT_THROW(parse_stages("0:5x,5:16", 16, 2), Error);
}
