// The shipped model's trained MTP block (models/sluice-tiny-moe-mtp.gguf, written by
// tools/train-tiny-moe/train_mtp.py, loaded with --mtp): greedy output with its drafts is
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

std::string model_path() {
  return std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";
}
std::string mtp_path() {
  return std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe-mtp.gguf";
}

std::unique_ptr<Engine> load(ExpertMode mode) {
  EngineOptions eo;
  eo.model_path = model_path();
  eo.mtp_path = mtp_path();
  eo.n_ctx = 128;
  eo.experts = mode;
  eo.lock_memory = false;
  eo.draft = DraftMode::kMtp;
  return Engine::load(eo);
}

void expect_exact_and_accepted(ExpertMode mode) {
  constexpr int kGen = 64;
  auto engine = load(mode);
  int drafted = 0, accepted = 0;
  for (const char* text : {"And the king said unto his servants, Go ye",
                           "In the beginning God created the heaven and the earth."}) {
    const std::vector<int32_t> prompt = engine->tokenize(text, false);
    const GenerateResult plain =
        engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kNone), {});
    const GenerateResult mtp =
        engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kMtp), {});
    std::printf("[%s] \"%s\": %d drafted, %d accepted, %d passes for %d tokens\n",
                expert_mode_name(mode), text, mtp.n_drafted, mtp.n_accepted, mtp.n_steps, kGen);
    EXPECT_EQ(mtp.tokens, plain.tokens) << text;
    EXPECT_EQ(mtp.n_steps + mtp.n_accepted, kGen);
    drafted += mtp.n_drafted;
    accepted += mtp.n_accepted;
  }
  // Up to 4 chained drafts per pass; the block is trained for the first only (train_mtp.py), yet
  // greedy output loops and the chain follows it: 50 of 50 stood on each prompt when the block was
  // trained (models/README.md). A block trained on the text's tokens instead reached 54 %, a
  // mis-wired one almost none.
  ASSERT_GT(drafted, 0);
  EXPECT_GE(static_cast<double>(accepted) / drafted, 0.6) << accepted << " of " << drafted;
}

TEST(ShippedMtp, GreedyOutputIsExactAndDraftsAreAccepted) {
  expect_exact_and_accepted(ExpertMode::kRam);
}

TEST(ShippedMtp, GreedyOutputIsExactAndDraftsAreAcceptedStreamed) {
  expect_exact_and_accepted(ExpertMode::kStream);
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
