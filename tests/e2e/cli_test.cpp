// End-to-end checks through the `sluice` binary on the shipped model: perplexity on the held-out
// text equals PyTorch's evaluation of the same weights within 1 % (models/*.eval.json), `run`
// prints a continuation, and bad flags fail with a precise message instead of crashing.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../unit/test_util.h"

namespace {

const std::string kSource = SLUICE_SOURCE_DIR;
const std::string kModel = kSource + "/models/sluice-tiny-moe.gguf";

using Result = sluice::test::ShellResult;

// The column of every '|' in a table line, counting UTF-8 characters (not bytes).
std::vector<size_t> bar_columns(const std::string& line) {
  std::vector<size_t> at;
  size_t col = 0;
  for (unsigned char ch : line) {
    if ((ch & 0xC0) == 0x80) continue;  // a continuation byte
    if (ch == '|') at.push_back(col);
    ++col;
  }
  return at;
}

Result run(const std::string& args) { return sluice::test::sh(std::string(SLUICE_BIN) + " " + args); }

}  // namespace

TEST(Cli, PerplexityMatchesPyTorchWithinOnePercent) {
  std::ifstream in(kSource + "/models/sluice-tiny-moe.eval.json");
  ASSERT_TRUE(in) << "models/sluice-tiny-moe.eval.json is missing";
  const auto ref = nlohmann::json::parse(in);
  const auto& proto = ref["protocol"];
  const Result r =
      run(("perplexity -m " + kModel + " -f " + kSource + "/" + ref["text"].get<std::string>() +
           " --window " + std::to_string(proto["ctx"].get<int>()) + " --stride " +
           std::to_string(proto["stride"].get<int>()) + " --json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto line = r.out.substr(r.out.rfind('{'));
  const auto got = nlohmann::json::parse(line);
  EXPECT_EQ(got["n_scored"].get<int64_t>(), ref["n_scored"].get<int64_t>());
  const double ours = got["perplexity"].get<double>(), theirs = ref["perplexity"].get<double>();
  std::printf("perplexity: sluice %.4f, PyTorch %.4f (%.3f %%)\n", ours, theirs,
              100.0 * (ours - theirs) / theirs);
  EXPECT_NEAR(ours, theirs, 0.01 * theirs);
}

// sluice-moe-128 (models/README.md): held-out perplexity of each domain's committed sample, as
// evaluate.py computed it from the GGUF weights, within 1 %.
TEST(Cli, MoE128PerplexityPerDomainMatchesPyTorchWithinOnePercent) {
  std::ifstream in(kSource + "/models/sluice-moe-128.eval.json");
  ASSERT_TRUE(in) << "models/sluice-moe-128.eval.json is missing";
  const auto refs = nlohmann::json::parse(in);
  ASSERT_EQ(refs.size(), 3u);
  for (const auto& ref : refs) {
    const auto& proto = ref["protocol"];
    const Result r = run("perplexity -m " + kSource + "/" + ref["model"].get<std::string>() +
                         " -f " + kSource + "/" + ref["text"].get<std::string>() + " --window " +
                         std::to_string(proto["ctx"].get<int>()) + " --stride " +
                         std::to_string(proto["stride"].get<int>()) + " --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto got = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
    EXPECT_EQ(got["n_scored"].get<int64_t>(), ref["n_scored"].get<int64_t>());
    const double ours = got["perplexity"].get<double>(), theirs = ref["perplexity"].get<double>();
    std::printf("%s: sluice %.4f, PyTorch %.4f (%.3f %%)\n", ref["text"].get<std::string>().c_str(),
                ours, theirs, 100.0 * (ours - theirs) / theirs);
    EXPECT_NEAR(ours, theirs, 0.01 * theirs) << ref["text"];
  }
}

TEST(Cli, RunPrintsAContinuation) {
  const Result r = run("run -m " + kModel + " -p \"In the beginning\" -n 24 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("In the beginning"), std::string::npos);
  EXPECT_NE(r.out.find("decode: "), std::string::npos) << r.out;
}

TEST(Cli, BadInputsGivePreciseErrors) {
  Result r = run("run -m /nonexistent.gguf -p hi");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("File does not exist: /nonexistent.gguf"), std::string::npos) << r.out;
  // A bad size is an argument error like any bad value (it exited 1).
  r = run("run -m " + kModel + " -p hi --ssd-streaming-cache-experts 12XB");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("sluice run: --ssd-streaming-cache-experts: unknown unit 'xb' in '12XB'"), std::string::npos)
      << r.out;
  r = run("serve -m " + kModel + " --max-body 4QB");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--max-body: unknown unit 'qb'"), std::string::npos) << r.out;
  r = run("inspect -m " + kModel + " --ram lots");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--ram: 'lots' is not a size"), std::string::npos) << r.out;
  r = run("run -m " + kModel + " -p hi --experts sideways");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--experts"), std::string::npos) << r.out;
  r = run("nosuchcommand");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown command 'nosuchcommand'"), std::string::npos);
}

TEST(Cli, ContextPastTheTrainedLengthIsAllowedWithAWarningAndAFullContextIsReported) {
  // The tiny model was trained at 128 positions.
  Result r = run("run -m " + kModel + " -p \"In the beginning\" -n 150 --temp 0 -c 256");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("warning: context 256 exceeds the model's trained context 128"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("decode: 150 tokens"), std::string::npos) << r.out;
  r = run("run -m " + kModel + " -p \"In the beginning\" -n 200 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("warning: context"), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find("generation stopped after 125 of 200 tokens: the context of 128 tokens is full"),
      std::string::npos)
      << r.out;
}

TEST(Cli, BenchDefaultsFitTheModel) {
  const Result r = run("bench -m " + kModel + " -r 1 --no-warmup -o csv");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("test of 512 tokens shortened to 127 to fit the context of 128"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pp127"), std::string::npos) << r.out;
}

TEST(Cli, FlagsSpelledAsInLlamaCppAndArgumentErrorsExit2NamingTheFlag) {
  Result r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("sluice ", 0), 0u) << r.out;
  // -f - reads standard input; -s and --predict are llama.cpp's --seed and -n.
  const std::string prompt = testing::TempDir() + "/sluice-cli-prompt.txt";
  std::ofstream(prompt) << "In the beginning";
  r = run("run -m " + kModel + " -f - -s 3 --predict 4 --temp 0 < " + prompt);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("decode: 4 tokens"), std::string::npos) << r.out;
  r = run("inspect -m " + kModel);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("qwen3moe"), std::string::npos) << r.out;
  // -np goes to --parallel, whose range check names it.
  r = run("serve -m " + kModel + " -np 0");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("sluice serve: --parallel: Value 0 not in range 1 to 256"),
            std::string::npos)
      << r.out;
  r = run("run -m " + kModel + " -p hi --top-p 2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("sluice run: --top-p: Value 2 not in range"), std::string::npos) << r.out;
  r = run("run -m " + kModel + " -p hi --no-such-flag");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("sluice run: "), std::string::npos) << r.out;
  // Contradictory flags.
  r = run("run -m " + kModel + " -p hi --ssd-streaming --experts ram");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(
      r.out.find("sluice run: --ssd-streaming: streams experts, but --experts ram was also given"),
      std::string::npos)
      << r.out;
  r = run("run -m " + kModel + " -p hi --experts mmap --ssd-streaming-cache-experts 1MiB");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--ssd-streaming-cache-experts: sizes the streaming cache, which --experts "
                       "mmap does not use"),
            std::string::npos)
      << r.out;
  r = run("run -m " + kModel +
          " -p hi --experts stream --ssd-streaming-cache-experts 2GiB --mem-limit 1GiB");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--ssd-streaming-cache-experts: 2GiB is larger than --mem-limit 1GiB"),
            std::string::npos)
      << r.out;
}

// --help and `help` go to standard output (`sluice --help | less` showed nothing), and
// `sluice help CMD` is `sluice CMD --help`.
TEST(Cli, HelpGoesToStandardOutput) {
  // run() appends 2>&1 to the pipeline's last command: grep sees only what went to stdout.
  Result r = run("--help 2>/dev/null | grep -c '^  [a-z]'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_GE(std::stoi(r.out), 12) << r.out;
  r = run("help 2>/dev/null | grep 'generate text from a prompt'");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("help help 2>/dev/null | grep 'generate text from a prompt'");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("help run 2>/dev/null | grep -e '--session-overwrite'");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("help serve 2>/dev/null | grep -e '--max-reading-per-client'");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("help nosuchcommand");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("sluice help: unknown command 'nosuchcommand'"), std::string::npos) << r.out;
}

// -q leaves nothing on stderr for a run that goes well (the model, weights, KV, prefill and draft
// lines printed anyway).
TEST(Cli, QuietIsQuiet) {
  // Only stderr comes back: run() appends 2>&1 after the group, whose stdout goes nowhere.
  const std::string args = "run -m " + kModel + " -p 'In the beginning' -n 4 --temp 0";
  const Result r = run(args + " -q 2>/dev/stdout >/dev/null </dev/null | cat");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "");
  const Result loud = run(args + " 2>/dev/stdout >/dev/null </dev/null | cat");
  EXPECT_NE(loud.out.find("prefill: "), std::string::npos) << loud.out;
}

// Every model command takes the model as -m or as its first argument, default the shipped one.
TEST(Cli, EveryModelCommandTakesTheModelTheSameWay) {
  Result r = run("inspect");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("qwen3moe"), std::string::npos) << r.out;
  r = run("tokenize -p 'In the beginning' --ids");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("tokenize " + kModel + " -p 'In the beginning' --ids");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("run " + kModel + " -p 'In the beginning' -n 2 --temp 0");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run("run " + kModel + " -m " + kModel + " -p hi");
  EXPECT_EQ(r.status, 2) << r.out;  // both ways at once
}

// The lines of a printed table (those starting with '|').
std::vector<std::string> table_rows(const std::string& out) {
  std::vector<std::string> rows;
  size_t at = 0;
  while (at < out.size()) {
    const size_t eol = out.find('\n', at);
    const std::string line = out.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    if (line.rfind("|", 0) == 0) rows.push_back(line);
    at = eol == std::string::npos ? out.size() : eol + 1;
  }
  return rows;
}

// bench: one "experts:" line (it printed "experts: experts: ram"), and the table's columns line up.
TEST(Cli, BenchTableLinesUp) {
  const Result r = run("bench -m " + kModel + " -p 16 -n 4 -r 2 -o table");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("experts: experts:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("experts: ram"), std::string::npos) << r.out;
  const std::vector<std::string> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // header, rule, pp16, tg4
  for (const std::string& row : rows) EXPECT_EQ(bar_columns(row), bar_columns(rows[0])) << row << "\n" << r.out;
}

// -d: every test again at each depth, named as llama-bench names them, the depth in every format;
// the table's columns still line up with the longer names; each depth is evaluated once; a depth
// the context cannot hold is an error before anything runs.
TEST(Cli, BenchRunsEachTestAtEachDepth) {
  Result r = run("bench -m " + kModel + " -p 16 -n 4 -d 0,48 -r 1 -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(j.size(), 4u) << r.out;
  const char* names[] = {"pp16", "tg4", "pp16@d48", "tg4@d48"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j[i]["test"], names[i]) << r.out;
    EXPECT_EQ(j[i]["depth"].get<int>(), i < 2 ? 0 : 48) << r.out;
    EXPECT_GT(j[i]["tps_mean"].get<double>(), 0.0) << r.out;
  }
  r = run("bench -m " + kModel + " -p 16 -n 4 -d 48 -r 1 -o table");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<std::string> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // header, rule, pp16@d48, tg4@d48: -d 48 alone runs no depth 0
  for (const std::string& row : rows) EXPECT_EQ(bar_columns(row), bar_columns(rows[0])) << row << "\n" << r.out;
  // Each depth is evaluated once for all its tests and repetitions (each rolls back to it).
  r = run("bench -m " + kModel + " -p 8,16 -n 4 -d 40,72 -r 2 -o csv");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* depth : {"depth 40: evaluated in", "depth 72: evaluated in"}) {
    const size_t at = r.out.find(depth);
    EXPECT_NE(at, std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(depth, at + 1), std::string::npos) << r.out;
  }
  r = run("bench -m " + kModel + " -d 1000 -c 128");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("depth 1000 leaves no room in the context of 128"), std::string::npos) << r.out;
  r = run("bench -m " + kModel + " -d 64 -f " + kSource + "/tests/data/heldout-kjv.txt");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--n-depth"), std::string::npos) << r.out;
}

// --stats: sizes in one unit (MiB, as the other lines), and the read bytes and prefetch figures
// say what they count.
TEST(Cli, StatsSayWhatTheyCount) {
  const Result r = run("run -m " + kModel + " -p 'In the beginning' -n 8 --temp 0 --experts stream --stats");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("MiB read from disk"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("misses and prefetches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("precision"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(read-ahead experts that were used)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(expert requests a read-ahead served)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" MB"), std::string::npos) << r.out;
}
