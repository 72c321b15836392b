// `sluice route-stats` and the routing-trace flags through the binary on the shipped model: the
// JSON has every figure scripts read, in range, Belady bounds every policy overall (not per layer:
// the optimum maximises all hits, and may give up some of one layer's), the uniform baseline
// reuses its share (k/E) and the trained router reuses more; a trace written by `perplexity
// --routing-trace` is read back by `route-stats --trace`; `bench --replay-routing` says that it
// replays in every output format; `bench --decode-text` reads a text one token a step, past the
// end of the context, and its timeline accounts for every expert request; a draft run's trace
// (sluice-moe-128, n-gram drafts of --draft-fixed length on repetitive code, streamed) holds
// verify passes of several rows, and route-stats simulates its measured part at the run's own
// cache size, each pass asking each layer for its rows' union.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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
  EXPECT_NE(r.out.find("," + trace + ",0\n"), std::string::npos) << r.out;  // replayed_routing, depth

  r = cli("route-stats --trace " + kModel);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("not a routing trace"), std::string::npos) << r.out;
  r = cli("route-stats -m " + kModel);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("-f FILE"), std::string::npos) << r.out;
}

// Teacher-forced decode: 300 tokens of the held-out text through a context of 128 (two new
// sessions on the way), one row a step: each step asks for every layer's top-2 (6 × 2 requests),
// in the text's order, the trace has a row per step, and the table's hit rate is the timeline's.
TEST(RouteStatsCli, BenchDecodeTextReadsTheTextOneTokenAStep) {
  const std::string dir = sluice::test::scratch_dir().string();
  const std::string trace = dir + "/td.trace", timeline = dir + "/td.csv";
  auto r = cli("bench -q -m " + kModel + " -c 128 -p 0 -n 300 -r 1 --no-warmup -o json --experts stream " +
               "--ssd-streaming-cold --ssd-streaming-cache-experts 1MiB --decode-text " + kText +
               " --timeline " + timeline + " --routing-trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["test"], "td300");

  auto ids = cli("tokenize -m " + kModel + " -f " + kText + " --ids");
  ASSERT_EQ(ids.status, 0) << ids.out;
  std::istringstream id_stream(ids.out);
  std::vector<std::string> text_ids;
  for (std::string id; id_stream >> id;) text_ids.push_back(id);
  ASSERT_GE(text_ids.size(), 300u);

  std::istringstream csv(sluice::test::read_file(timeline));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("test,rep,step,token,seconds,requests,hits,misses,bytes_read", 0), 0u) << line;
  long requests = 0, hits = 0;
  int step = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string cell; std::getline(ls, cell, ',');) f.push_back(cell);
    ASSERT_EQ(f.size(), 12u) << line;
    EXPECT_EQ(f[0], "td300");
    EXPECT_EQ(std::stoi(f[2]), step) << line;
    EXPECT_EQ(f[3], text_ids[static_cast<size_t>(step)]) << line;
    EXPECT_EQ(std::stol(f[5]), 12) << line;
    EXPECT_EQ(std::stol(f[6]) + std::stol(f[7]), std::stol(f[5])) << line;
    requests += std::stol(f[5]);
    hits += std::stol(f[6]);
    ++step;
  }
  EXPECT_EQ(step, 300);
  EXPECT_NEAR(j[0]["hit_rate"].get<double>(), 100.0 * hits / requests, 1e-3);
  EXPECT_LT(j[0]["hit_rate"].get<double>(), 100.0);  // 1 MiB holds few of the experts

  r = cli("route-stats --trace " + trace + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(last_json(r.out)["rows"].get<int>(), 300);

  r = cli("bench -m " + kModel + " -p 0 -n 8 --timeline " + timeline);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--timeline: it records td tests; give --decode-text FILE"), std::string::npos) << r.out;
  r = cli("bench -m " + kModel + " -p 0 -n 100000 --decode-text " + kText);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("td100000: " + kText + " has"), std::string::npos) << r.out;
}

// A draft run streamed at 19 MiB (a quarter of sluice-moe-128's experts) records its verify passes:
// the trace has fewer passes than rows, bench names the measured rows, and route-stats at the
// run's slot count counts one union request per (pass, layer), fewer experts than its rows chose.
// --draft-fixed drafts every lookup candidate whatever the timings: the adaptive policy may
// decline to draft on a loaded machine, where its measured verify passes cost more.
TEST(RouteStatsCli, DraftRunTraceHasVerifyPassesOfSeveralRows) {
  const std::string moe = kSource + "/models/sluice-moe-128.gguf";
  const std::string prompt = kSource + "/bench/prompts/repetitive-code.txt";
  const std::string trace = (sluice::test::scratch_dir() / "draft.trace").string();
  const std::string args = "bench -m " + moe + " -c 1024 -t 1 -p 0 -n 96 -r 1 -o json -f " + prompt;
  auto r = cli(args + " --draft ngram --draft-fixed --experts stream --ssd-streaming-cache-experts 19MiB --routing-trace " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t at = r.out.find("[{");
  ASSERT_NE(at, std::string::npos) << r.out;
  const nlohmann::json run = nlohmann::json::parse(r.out.substr(at, r.out.find("]\n", at) + 1 - at));
  EXPECT_GT(run[0]["tokens_per_step"].get<double>(), 1.5) << r.out;  // drafts were accepted
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"((\d+) slots × )"))) << r.out;
  const std::string slots = m[1];
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(tg96 rep 0: routing trace rows (\d+):(\d+))"))) << r.out;
  const std::string rows = m[1].str() + ":" + m[2].str();

  r = cli("route-stats --trace " + trace + " --json --rows " + rows + " --cache-slots " + slots);
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json j = last_json(r.out);
  EXPECT_LT(j["passes_in_trace"].get<int>(), j["rows"].get<int>());
  const nlohmann::json& c = j["counted"];
  EXPECT_EQ(c["first_row"].get<uint64_t>(), std::stoull(m[1].str()));
  EXPECT_LT(c["passes"].get<int>(), c["rows"].get<int>());  // verify passes of several rows
  EXPECT_LT(c["passes"].get<int>(), 96);
  EXPECT_EQ(c["layer_requests"].get<int>(), c["passes"].get<int>() * j["routed_layers"].size());
  EXPECT_LT(c["experts_requested"].get<int>(), c["row_experts"].get<int>());  // rows share experts
  const std::string key = slots + " slots";
  ASSERT_EQ(j["cache_keys"].back(), key);
  const double belady = j["overall"]["hit_rate"]["belady"][key].get<double>();
  EXPECT_GT(belady, 0.0);
  for (const char* policy : {"lru", "lfu", "nextuse"})
    EXPECT_LE(j["overall"]["hit_rate"][policy][key].get<double>(), belady + 1e-12) << policy;
  // Row by row, as before passes were recorded, the same rows ask for more experts.
  r = cli("route-stats --trace " + trace + " --json --row-passes --rows " + rows);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GT(last_json(r.out)["counted"]["layer_requests"].get<int>(), c["layer_requests"].get<int>());

  // A fixed length with nothing to draft is an argument error (bench decodes plainly by default).
  r = cli(args + " --draft-fixed");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--draft-fixed: drafting is off (--draft none); give --draft ngram, mtp or auto"),
            std::string::npos) << r.out;
  r = cli(args + " --draft ngram --draft-max 0 --draft-fixed");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--draft-fixed: --draft-max 0 drafts nothing; give --draft-max 1 to 64"), std::string::npos)
      << r.out;

  r = cli("route-stats --trace " + trace + " --rows 5:2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--rows 5:2: END must be after FIRST"), std::string::npos) << r.out;
  r = cli("route-stats --trace " + trace + " --rows 99999999");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("but the trace has"), std::string::npos) << r.out;
}

}  // namespace
