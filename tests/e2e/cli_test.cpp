// End-to-end checks through the `sluice` binary on the shipped model: perplexity on the held-out
// text equals PyTorch's evaluation of the same weights within 1 % (models/*.eval.json), `run`
// prints a continuation, and bad flags fail with a precise message instead of crashing.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

const std::string kSource = SLUICE_SOURCE_DIR;
const std::string kModel = kSource + "/models/sluice-tiny-moe.gguf";

struct Result {
  int status;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(SLUICE_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

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
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("cannot open '/nonexistent.gguf'"), std::string::npos) << r.out;
  r = run("run -m " + kModel + " -p hi --ssd-streaming-cache-experts 12XB");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("unknown unit 'xb'"), std::string::npos) << r.out;
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
