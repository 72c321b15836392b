// A generation under a grammar (runtime/request.h): masking before greedy and top-k sampling,
// log-probabilities of the masked distribution, end-of-generation only where the text may end,
// completion (kGrammar), max_tokens inside the grammar (kLength), stop strings, and speculative
// drafts cut at the first token the grammar refuses — on the shipped model's vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gguf/gguf.h"
#include "runtime/request.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;

namespace {

const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";

class GrammarGeneration : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = gguf::File::open(kModel);
    tk_ = Tokenizer::from_gguf(*file_);
    vocab_ = std::make_shared<const grammar::VocabTrie>(*tk_, tk_->n_vocab());
  }
  std::shared_ptr<const grammar::TokenGrammar> compile(const std::string& gbnf) const {
    return std::make_shared<const grammar::TokenGrammar>(gbnf, vocab_);
  }
  // Random logits that favour `token` strongly (it is the argmax).
  std::vector<float> favour(int32_t token, uint64_t seed = 1) const {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> l(tk_->n_vocab());
    for (float& x : l) x = n(rng);
    if (token >= 0) l[token] = 30.0f;
    return l;
  }
  int32_t token(const std::string& text) const {
    const int32_t id = tk_->find_token(byte_level::encode(text));
    EXPECT_GE(id, 0) << text;
    return id;
  }
  GenerateOptions options(int max_tokens, float temperature = 0) const {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = temperature;
    o.draft.mode = DraftMode::kNone;
    return o;
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tk_;
  std::shared_ptr<const grammar::VocabTrie> vocab_;
};

}  // namespace

TEST_F(GrammarGeneration, GreedyAndSampledTokensStayInTheGrammar) {
  const auto g = compile("root ::= \"yes\" | \"no\"\n");
  const std::vector<int32_t> prompt = {token("The")};
  // The model wants " the"; greedy takes the best allowed token instead.
  Generation greedy(*tk_, options(8), prompt, 0, g);
  std::string text;
  while (!greedy.finished()) text += greedy.sample(favour(token(" the"))).text;
  std::string tail;
  const GenerateResult r = greedy.finish(&tail);
  text += tail;
  EXPECT_TRUE(text == "yes" || text == "no") << text;
  EXPECT_EQ(r.finish, FinishReason::kGrammar);
  EXPECT_EQ(r.text, text);
  EXPECT_GT(r.grammar_seconds, 0.0);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    GenerateOptions o = options(8, 1.0f);
    o.sampling.seed = seed;
    o.sampling.top_k = 0;
    o.sampling.top_p = 1;
    o.sampling.min_p = 0;
    Generation s(*tk_, o, prompt, 0, g);
    while (!s.finished()) s.sample(favour(-1, seed));
    const GenerateResult rs = s.finish(&tail);
    EXPECT_TRUE(rs.text == "yes" || rs.text == "no") << rs.text;
  }
}

TEST_F(GrammarGeneration, LogprobsComeFromTheMaskedDistribution) {
  const auto g = compile("root ::= [xyz] \".\"\n");
  GenerateOptions o = options(4);
  o.logprobs = 20;
  Generation gen(*tk_, o, std::vector<int32_t>{token("The")}, 0, g);
  gen.sample(favour(token(" the")));
  const std::vector<TokenLogprob> lps = gen.take_logprobs();
  ASSERT_EQ(lps.size(), 1u);
  // Only the allowed tokens are alternatives, and their probabilities sum to 1.
  double total = 0;
  for (const auto& [id, lp] : lps[0].top) {
    const std::string b = tk_->token_bytes(id);
    EXPECT_TRUE(b == "x" || b == "y" || b == "z" || b == "x." || b == "y." || b == "z.") << b;
    total += std::exp(lp);
  }
  EXPECT_GE(lps[0].top.size(), 3u);
  EXPECT_NEAR(total, 1.0, 1e-4);
  EXPECT_LE(lps[0].logprob, 0.0f);
}

TEST_F(GrammarGeneration, EndOfGenerationOnlyWhereTheTextMayEnd) {
  const int32_t eos = tk_->eos();
  ASSERT_GE(eos, 0);
  const auto g = compile("root ::= \"ab\" \"c\"*\n");
  Generation gen(*tk_, options(10), std::vector<int32_t>{token("The")}, 0, g);
  const Generation::Sampled first = gen.sample(favour(eos));
  EXPECT_NE(first.token, eos);  // "ab" must come first
  while (!gen.finished()) gen.sample(favour(eos));
  std::string tail;
  const GenerateResult r = gen.finish(&tail);
  EXPECT_EQ(r.finish, FinishReason::kEog);
  EXPECT_TRUE(r.text.starts_with("ab") && r.text.find_first_not_of('c', 2) == std::string::npos)
      << r.text;
  // Without the end-of-generation rule (ignore_eos) the end token is never offered.
  GenerateOptions o = options(6);
  o.stop_at_eog = false;
  Generation ignore(*tk_, o, std::vector<int32_t>{token("The")}, 0, g);
  while (!ignore.finished()) EXPECT_NE(ignore.sample(favour(eos)).token, eos);
  const GenerateResult ri = ignore.finish(&tail);
  EXPECT_EQ(ri.finish, FinishReason::kLength);
  EXPECT_TRUE(ri.text.starts_with("abc")) << ri.text;
}

TEST_F(GrammarGeneration, MaxTokensInsideTheGrammarIsLength) {
  const auto g = compile("root ::= \"[\" [a-z ]{0,500} \"]\"\n");
  Generation gen(*tk_, options(3), std::vector<int32_t>{token("The")}, 0, g);
  while (!gen.finished()) gen.sample(favour(token(" the")));
  std::string tail;
  const GenerateResult r = gen.finish(&tail);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_TRUE(r.text.starts_with("[")) << r.text;
}

TEST_F(GrammarGeneration, StopStringsStillEndTheText) {
  const auto g = compile("root ::= [a-z ]{0,40} \".\"\n");
  GenerateOptions o = options(30);
  o.stop = {"the"};
  Generation gen(*tk_, o, std::vector<int32_t>{token("The")}, 0, g);
  while (!gen.finished()) gen.sample(favour(token(" the")));
  std::string tail;
  const GenerateResult r = gen.finish(&tail);
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.text, " ");
}

TEST_F(GrammarGeneration, DraftsStopAtTheFirstRefusedToken) {
  // The context repeats " the the the ..." so n-gram lookup drafts more " the"; the grammar allows
  // "the" at most three times, then a period.
  const auto g = compile("root ::= (\" the\"){1,3} \".\"\n");
  GenerateOptions o = options(20);
  o.draft.mode = DraftMode::kNgram;
  o.draft.adaptive = false;
  o.draft.max = 8;
  const int32_t the = token(" the");
  std::vector<int32_t> ctx(12, the);
  Generation gen(*tk_, o, ctx, 0, g);
  // The first token is sampled alone; then drafts.
  const Generation::Sampled first = gen.sample(favour(the));
  ASSERT_EQ(first.token, the);
  ctx.push_back(first.token);
  const std::vector<int32_t> drafts = gen.propose(ctx, 1000);
  ASSERT_EQ(drafts.size(), 2u);  // two more " the", then the grammar wants "."
  // Verify: every row favours " the"; the grammar takes both drafts and then the period.
  std::vector<float> rows;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    const std::vector<float> l = favour(the, i + 2);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  const Generation::Step step = gen.take(rows, drafts, static_cast<int>(ctx.size()), 1000, {});
  EXPECT_EQ(step.n_accepted, 2);
  ASSERT_EQ(step.tokens.size(), 3u);
  EXPECT_EQ(tk_->token_bytes(step.tokens.back()), ".");
  EXPECT_TRUE(gen.finished());
  std::string tail;
  EXPECT_EQ(gen.finish(&tail).finish, FinishReason::kGrammar);
}
