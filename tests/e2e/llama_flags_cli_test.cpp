// llama.cpp's spellings through the `sluice` binary: multi-letter short flags are flags, not
// bundles of one-letter ones; those that mean nothing without a GPU backend run with one warning;
// an unknown or misspelled flag exits 2 naming it and the nearest known flag.
#include <gtest/gtest.h>

#include <string>

#include "../unit/test_util.h"

namespace {

const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";

using Result = sluice::test::ShellResult;

Result run(const std::string& args) { return sluice::test::sh(std::string(SLUICE_BIN) + " " + args); }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(LlamaFlags, GpuFlagsRunWithOneWarning) {
  const Result r = run("run -m " + kModel + " -p \"In the beginning\" -n 4 --temp 0 -ngl 99 -fa on -t 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning"), 1u) << r.out;
  EXPECT_NE(r.out.find("-ngl 99 (no GPU backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-fa on"), std::string::npos) << r.out;
  // A bare -fa (older llama.cpp) means on and does not swallow the next flag.
  const Result bare = run("run -m " + kModel + " -p hi -n 2 --temp 0 -fa -t 2 -ot exps=CPU");
  ASSERT_EQ(bare.status, 0) << bare.out;
  EXPECT_EQ(count(bare.out, "warning"), 1u) << bare.out;
  EXPECT_NE(bare.out.find("-ot exps=CPU"), std::string::npos) << bare.out;
}

TEST(LlamaFlags, MeaningfulFlagsAreMappedWithoutWarnings) {
  const std::string base = "run -m " + kModel + " -p \"In the beginning God created\" -n 6 --temp 0 -t 2";
  const Result plain = run(base);
  ASSERT_EQ(plain.status, 0) << plain.out;
  // A 3-token forward pass over the prompt decodes the same greedy text.
  const Result mapped = run(base + " -ub 3 -b 64 -tb 2 --no-mmap --mlock -ngl 0 -fa auto");
  ASSERT_EQ(mapped.status, 0) << mapped.out;
  EXPECT_EQ(count(mapped.out, "warning"), 0u) << mapped.out;
  // The generated line starts with the prompt; the log lines go around it.
  const auto text = [](const std::string& out) {
    const size_t at = out.find("In the beginning God created");
    return at == std::string::npos ? std::string("(no text)") : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(text(plain.out), "(no text)") << plain.out;
  EXPECT_EQ(text(mapped.out), text(plain.out));
  // --no-mmap is --experts ram, so it contradicts streaming; --mlock contradicts --no-mlock.
  Result r = run(base + " --no-mmap --experts stream");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--no-mmap: reads the experts into RAM, but --experts stream"), std::string::npos) << r.out;
  r = run(base + " --mlock --no-mlock");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--mlock"), std::string::npos) << r.out;
  // A forward pass takes at most 512 prompt tokens: a larger -ub is capped, and said.
  r = run(base + " -ub 2048");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("-ub 2048 beyond 512"), std::string::npos) << r.out;
}

TEST(LlamaFlags, MisspellingsNameTheFlagAndTheNearestKnownOne) {
  const std::string base = "run -m " + kModel + " -p hi -n 1 ";
  struct Case {
    const char* typed;
    const char* expect;
  } cases[] = {{"-ngll 99", "-ngll: unknown flag; did you mean -ngl?"},
               {"--n-predcit 4", "--n-predict"},
               {"--temperature 0", "--temperature: unknown flag; did you mean --temp?"},
               {"-fx", "-fx: unknown flag"},
               {"--no-mmpa", "did you mean --no-mmap?"},
               {"-np 2", "-np: unknown flag"}};  // serve's, not run's
  for (const auto& c : cases) {
    const Result r = run(base + c.typed);
    EXPECT_EQ(r.status, 2) << c.typed << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.typed << "\n" << r.out;
  }
  // A value that begins with a dash is a value, and -n64 is still -n 64.
  const Result neg = run("run -m " + kModel + " -p -hello -n2 --temp 0");
  EXPECT_EQ(neg.status, 0) << neg.out;
}
