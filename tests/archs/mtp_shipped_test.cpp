// The shipped models' trained MTP blocks (models/sluice-tiny-moe-mtp.gguf and
// sluice-moe-128-mtp.gguf, written by tools/train-tiny-moe/train_mtp.py, loaded with --mtp): greedy
// output with its drafts is
// token-identical to plain decoding, in RAM and with experts streamed from both files through one
// store, and a real share of the drafts is accepted, which random or mis-wired blocks (a swapped
// concatenation, the wrong hidden row, the wrong head) do not reach; the MTP file given as the
// model is a precise error.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "mtp_support.h"
#include "sluice/sluice.h"

using namespace sluice;
using namespace sluice::mtp_test;

namespace {

std::string mtp_path() {
  return std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe-mtp.gguf";
}

// A shipped model, its MTP block, prompts in its training text's styles and the share of drafts
// that must stand.
struct Pair {
  std::string model, mtp;
  int n_ctx;
  std::vector<const char*> prompts;
  double min_acceptance;
};

std::unique_ptr<Engine> load(const Pair& p, ExpertMode mode) {
  EngineOptions eo;
  eo.model_path = std::string(SLUICE_SOURCE_DIR) + "/models/" + p.model;
  eo.mtp_path = std::string(SLUICE_SOURCE_DIR) + "/models/" + p.mtp;
  eo.n_ctx = p.n_ctx;
  eo.experts = mode;
  eo.lock_memory = false;
  eo.draft = DraftMode::kMtp;
  return Engine::load(eo);
}

void expect_exact_and_accepted(const Pair& p, ExpertMode mode) {
  constexpr int kGen = 64;
  auto engine = load(p, mode);
  int drafted = 0, accepted = 0;
  for (const char* text : p.prompts) {
    const std::vector<int32_t> prompt = engine->tokenize(text, false);
    const GenerateResult plain =
        engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kNone), {});
    const GenerateResult mtp =
        engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kMtp), {});
    std::printf("[%s %s] \"%s\": %d drafted, %d accepted, %d passes for %d tokens\n",
                p.model.c_str(), expert_mode_name(mode), text, mtp.n_drafted, mtp.n_accepted,
                mtp.n_steps, kGen);
    EXPECT_EQ(mtp.tokens, plain.tokens) << text;
    EXPECT_EQ(mtp.n_steps + mtp.n_accepted, kGen);
    drafted += mtp.n_drafted;
    accepted += mtp.n_accepted;
  }
  ASSERT_GT(drafted, 0);
  EXPECT_GE(static_cast<double>(accepted) / drafted, p.min_acceptance)
      << accepted << " of " << drafted;
}

// Up to 4 chained drafts per pass; the block is trained for the first only (train_mtp.py), yet
// greedy output loops and the chain follows it: 50 of 50 stood on each prompt when the block was
// trained (models/README.md). A block trained on the text's tokens instead reached 54 %, a
// mis-wired one almost none.
const Pair kTiny{"sluice-tiny-moe.gguf",
                 "sluice-tiny-moe-mtp.gguf",
                 128,
                 {"And the king said unto his servants, Go ye",
                  "In the beginning God created the heaven and the earth."},
                 0.6};

// sluice-moe-128's block, trained for a shorter time on three domains (models/README.md): its first
// draft agrees with greedy 55 % of the time on held-out text, and chained drafts stand less often
// than first ones; a mis-wired block stays near 0.
const Pair kMoe128{
    "sluice-moe-128.gguf",
    "sluice-moe-128-mtp.gguf",
    256,
    {"And the LORD said unto Moses,", "The -f option causes", "def read_config(path):"},
    0.3};

TEST(ShippedMtp, GreedyOutputIsExactAndDraftsAreAccepted) {
  expect_exact_and_accepted(kTiny, ExpertMode::kRam);
}

TEST(ShippedMtp, GreedyOutputIsExactAndDraftsAreAcceptedStreamed) {
  expect_exact_and_accepted(kTiny, ExpertMode::kStream);
}

TEST(ShippedMtp, Moe128GreedyOutputIsExactAndDraftsAreAcceptedStreamed) {
  expect_exact_and_accepted(kMoe128, ExpertMode::kStream);
}

TEST(ShippedMtp, TheMtpFileAsTheModelIsAnError) {
  EngineOptions eo;
  eo.model_path = mtp_path();
  eo.lock_memory = false;
  try {
    Engine::load(eo);
    FAIL() << "loaded an MTP-only file as a model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give this file with --mtp"), std::string::npos)
        << e.what();
  }
}

}  // namespace
