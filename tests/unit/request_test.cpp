// The generation state Session::generate and the Scheduler share: length, context, stop-string,
// end-of-generation and cancellation rules, the text they emit, and prefix reuse.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "runtime/request.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;

namespace {

const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = gguf::File::open(kModel);
    tk_ = Tokenizer::from_gguf(*file_);
  }
  // Greedy logits that choose `token`.
  std::vector<float> pick(int32_t token) const {
    std::vector<float> l(tk_->n_vocab(), 0.0f);
    l[token] = 10.0f;
    return l;
  }
  // A token of the word "the" whose text is whole (no partial UTF-8).
  int32_t the() const { return tk_->encode("the", false, false).back(); }
  std::string text_of(int32_t t) const { return tk_->decode({t}); }
  GenerateOptions greedy(int max_tokens) const {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0;
    return o;
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tk_;
};

}  // namespace

TEST_F(GenerationTest, EndsAtMaxTokensAndFullContext) {
  const std::vector<int32_t> prompt = {the()};
  Generation g(*tk_, greedy(2), prompt, 0);
  EXPECT_FALSE(g.limit_reached(1, 100));
  EXPECT_FALSE(g.sample(pick(the())).text.empty());
  EXPECT_FALSE(g.finished());
  g.sample(pick(the()));
  EXPECT_TRUE(g.finished());  // the second token is the last: it is not evaluated
  std::string tail;
  GenerateResult r = g.finish(&tail);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(r.n_prompt, 1);

  Generation full(*tk_, greedy(10), prompt, 0);
  EXPECT_TRUE(full.limit_reached(8, 8));  // no position left for another token
  EXPECT_EQ(full.finish(&tail).finish, FinishReason::kLength);
  Generation none(*tk_, greedy(0), prompt, 0);
  EXPECT_TRUE(none.limit_reached(1, 100));
}

TEST_F(GenerationTest, StopStringsAreWithheldAndEndTheRequest) {
  GenerateOptions o = greedy(10);
  const std::string word = text_of(the());
  ASSERT_FALSE(word.empty());
  o.stop = {word};
  const std::vector<int32_t> prompt = {the()};
  Generation g(*tk_, o, prompt, 0);
  const Generation::Sampled s = g.sample(pick(the()));
  EXPECT_TRUE(s.emitted);
  EXPECT_TRUE(g.finished());
  std::string tail = "x";
  GenerateResult r = g.finish(&tail);
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(tail, "");
  EXPECT_EQ(r.text, "");
}

TEST_F(GenerationTest, EndOfGenerationEmitsNoTextAndCancelWins) {
  ASSERT_GE(tk_->eos(), 0);
  const std::vector<int32_t> prompt = {the()};
  Generation g(*tk_, greedy(10), prompt, 0);
  const Generation::Sampled s = g.sample(pick(tk_->eos()));
  EXPECT_FALSE(s.emitted);
  EXPECT_TRUE(s.text.empty());
  std::string tail;
  EXPECT_EQ(g.finish(&tail).finish, FinishReason::kEog);

  Generation c(*tk_, greedy(1), prompt, 0);
  c.sample(pick(the()));  // finished by length ...
  c.cancel();                 // ... but the caller cancelled: nothing withheld is flushed
  EXPECT_EQ(c.finish(&tail).finish, FinishReason::kCancelled);
  EXPECT_EQ(tail, "");
}

// A pipeline stage without logits takes each step's token from the last stage: it counts the
// same steps (issue 34: rank 1 printed "32 tokens in 0 forward passes").
TEST_F(GenerationTest, TokensSampledElsewhereCountAsSteps) {
  const std::vector<int32_t> prompt = {the()};
  Generation last(*tk_, greedy(3), prompt, 0), other(*tk_, greedy(3), prompt, 0);
  std::string emitted;
  for (int i = 0; i < 3; ++i) {
    const Generation::Step st = last.take(pick(the()), {}, 1 + i, 100, nullptr);
    ASSERT_EQ(st.tokens.size(), 1u);
    const Generation::Step got = other.take_sampled(st.tokens[0], [&](const Generation::Sampled& s) {
      emitted += s.text;
      return true;
    });
    EXPECT_EQ(got.tokens, st.tokens);
  }
  std::string tail;
  const GenerateResult a = last.finish(&tail), b = other.finish(&tail);
  EXPECT_EQ(a.n_steps, 3);
  EXPECT_EQ(b.n_steps, a.n_steps);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(emitted + tail, a.text);
}

TEST(ReusablePrefix, CommonPrefixOneShortOfThePrompt) {
  const std::vector<int32_t> cached = {1, 2, 3, 4};
  EXPECT_EQ(reusable_prefix(cached, std::vector<int32_t>{1, 2, 9}), 2);
  EXPECT_EQ(reusable_prefix(cached, std::vector<int32_t>{1, 2, 3, 4}), 3);  // the last token runs again
  EXPECT_EQ(reusable_prefix(cached, std::vector<int32_t>{1, 2, 3, 4, 5}), 4);
  EXPECT_EQ(reusable_prefix(cached, std::vector<int32_t>{7}), 0);
  EXPECT_EQ(reusable_prefix({}, std::vector<int32_t>{1, 2}), 0);
}
