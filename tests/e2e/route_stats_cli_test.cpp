// `sluice route-stats` and the routing-trace flags through the binary on the shipped model: the
// JSON has every figure scripts read, in range, Belady bounds every policy overall (not per layer:
// the optimum maximises all hits, and may give up some of one layer's), the uniform baseline
// reuses its share (k/E) and the trained router reuses more; a trace written by `perplexity
// --routing-trace` is read back by `route-stats --trace`; `bench --replay-routing` says that it
// replays in every output format.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../unit/test_util.h"

namespace {

const std::string kSource = SLUICE_SOURCE_DIR;
const std::string kModel = kSource + "/models/sluice-tiny-moe.gguf";
const std::string kText = kSource + "/tests/data/heldout-kjv.txt";

sluice::test::ShellResult cli(const std::string& args) {
  return sluice::test::sh(std::string(SLUICE_BIN) + " " + args);
}

nlohmann::json last_json(const std::string& out) {
  const size_t at = out.find("{\n");
  EXPECT_NE(at, std::string::npos) << out;
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at));
}

void expect_figures(const nlohmann::json& f, bool belady_bounds) {
  for (const char* key : {"reuse_prev", "reuse_within_8", "experts_share_50", "experts_share_90"}) {
    ASSERT_TRUE(f.contains(key)) << key;
    EXPECT_GE(f[key].get<double>(), 0.0) << key;
    EXPECT_LE(f[key].get<double>(), 1.0) << key;
  }
  for (const char* frac : {"0.125", "0.25", "0.5", "0.75"}) {
    const double belady = f["hit_rate"]["belady"][frac].get<double>();
    for (const char* policy : {"lru", "lfu", "nextuse"}) {
      const double h = f["hit_rate"][policy][frac].get<double>();
      EXPECT_GE(h, 0.0);
      EXPECT_LE(h, 1.0);
      if (belady_bounds) {
        EXPECT_LE(h, belady + 1e-12) << policy << " at " << frac;
      }
    }
  }
}

TEST(RouteStatsCli, ShippedModelOnHeldOutText) {
  const auto r = cli("route-stats -m " + kModel + " -f " + kText + " --window 128 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = last_json(r.out);
  EXPECT_EQ(j["n_expert"].get<int>(), 16);
  EXPECT_EQ(j["n_used"].get<int>(), 2);
  EXPECT_GT(j["rows"].get<int>(), 7000);
  ASSERT_EQ(j["layers"].size(), 6u);
  expect_figures(j["overall"], true);
  for (const auto& l : j["layers"]) expect_figures(l, false);
  expect_figures(j["uniform"]["overall"], true);
  const double uniform = j["uniform"]["overall"]["reuse_prev"].get<double>();
  EXPECT_NEAR(uniform, 2.0 / 16, 0.01);
  // The trained router keeps more of its experts from one token to the next than chance.
  EXPECT_GT(j["overall"]["reuse_prev"].get<double>(), uniform + 0.02);
  EXPECT_GT(j["overall"]["lookahead_precision"].get<double>(), 2.0 / 16);
}

TEST(RouteStatsCli, TraceFromPerplexityAndReplayInBench) {
  const std::string trace = (sluice::test::scratch_dir() / "ppl.trace").string();
  auto r = cli("perplexity -q -m " + kModel + " -f " + kText +
               " --window 128 --stride 128 --routing-trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  r = cli("route-stats --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("experts also chosen at the previous token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hit rate, 50 % cache (48 experts), belady"), std::string::npos) << r.out;

  r = cli("bench -m " + kModel + " -p 16 -n 4 -r 1 -o csv --replay-routing " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("routing replayed from " + trace), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tg4,4,1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("," + trace + "\n"), std::string::npos) << r.out;

  r = cli("route-stats --trace " + kModel);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("not a routing trace"), std::string::npos) << r.out;
  r = cli("route-stats -m " + kModel);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("-f FILE"), std::string::npos) << r.out;
}

}  // namespace
