// Progress output (issue 15, item 10): gen-model, perplexity and a streamed model's expert preload
// report through the one Progress helper — plain lines when stderr is not a terminal, nothing with
// --quiet. SLUICE_PROGRESS_DELAY=0 shows progress from the start instead of after 2 s, so the
// test stays short.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "../unit/test_util.h"

namespace {

const std::string kSource = SLUICE_SOURCE_DIR;
const std::string kModel = kSource + "/models/sluice-tiny-moe.gguf";

std::pair<int, std::string> run(const std::string& args) {
  const auto [status, out] =
      sluice::test::sh("SLUICE_PROGRESS_DELAY=0 " + std::string(SLUICE_BIN) + " " + args + " </dev/null");
  return {status, out};
}

TEST(Progress, LinesWithoutATerminalAndNothingWhenQuiet) {
  const std::string out = (sluice::test::scratch_dir() / "progress.gguf").string();
  auto [st, text] =
      run("gen-model --preset qwen3-30b-a3b --layers 2 --embd 256 --ff-exp 256 --experts 8 --vocab "
          "4096 --force -o " +
          out);
  ASSERT_EQ(st, 0) << text;
  EXPECT_NE(text.find("writing " + out + ": done"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "a bar was drawn on a pipe";

  std::tie(st, text) =
      run("gen-model --preset qwen3-30b-a3b --layers 2 --embd 256 --ff-exp 256 --experts 8 --vocab "
          "4096 --force -q -o " +
          out);
  ASSERT_EQ(st, 0) << text;
  EXPECT_EQ(text.find("writing "), std::string::npos) << text;

  const std::string ppl =
      "perplexity -m " + kModel + " -f " + kSource + "/README.md --window 64 --stride 64";
  std::tie(st, text) = run(ppl);
  ASSERT_EQ(st, 0) << text;
  EXPECT_NE(text.find("perplexity: done"), std::string::npos) << text;
  std::tie(st, text) = run(ppl + " --quiet");
  ASSERT_EQ(st, 0) << text;
  EXPECT_EQ(text.find("perplexity: "), std::string::npos) << text;

  std::tie(st, text) = run("run -m " + out + " --experts stream -p hi -n 1");
  ASSERT_EQ(st, 0) << text;
  EXPECT_NE(text.find("preloading experts: done"), std::string::npos) << text;
}

}  // namespace
