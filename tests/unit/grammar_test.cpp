// The grammar engine: GBNF parsing and its errors (position and reason), matching text with the
// features of llama.cpp's example grammars (arithmetic, JSON, lists, chess moves, Unicode ranges),
// and token masks checked against a brute-force test of every token on random walks through a
// grammar, on a small byte-level vocabulary and on Qwen3's 151k-token one.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "grammar/token_grammar.h"
#include "qwen3_model.h"
#include "runtime/request.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;
using namespace sluice::grammar;

namespace {

bool matches(const std::string& gbnf, const std::string& text) {
  const Automaton a(parse_gbnf(gbnf));
  return advance(a, start_state(a), text).can_end;
}

// Whether `text` can still grow into a match.
bool viable(const std::string& gbnf, const std::string& text) {
  const Automaton a(parse_gbnf(gbnf));
  return !advance(a, start_state(a), text).dead();
}

std::string error_of(const std::string& gbnf) {
  try {
    Automaton a(parse_gbnf(gbnf));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The example grammars (tests/data/structured/gbnf): the features of llama.cpp's.
std::string example(const std::string& name) {
  return test::read_file(std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/data/structured/gbnf" /
                         (name + ".gbnf"));
}
const std::string kArithmetic = example("arithmetic");
const std::string kJson = example("json");
const std::string kList = example("list");
const std::string kChess = example("chess");
const std::string kJapanese = example("japanese");

}  // namespace

TEST(GrammarParse, ErrorsNameLineColumnAndReason) {
  EXPECT_NE(error_of("root ::= \"a\"\nitem := \"b\"\n")
                .find("line 2, column 6: expected '::=' after 'item'"),
            std::string::npos)
      << error_of("root ::= \"a\"\nitem := \"b\"\n");
  EXPECT_NE(
      error_of("root ::= foo\n").find("line 1, column 10: rule 'foo' is used but never defined"),
      std::string::npos);
  EXPECT_NE(error_of("item ::= \"x\"\n").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"\n")
                .find("line 2, column 1: rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= \"abc\n").find("line 1, column 10: this literal is not closed"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= [a-z\n").find("not closed"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("line 1, column 11: unknown escape '\\q'"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]\n").find("ends before it starts"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}\n").find("maximum below its minimum"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{2001}\n").find("at most 2000"), std::string::npos);
  EXPECT_NE(error_of("root ::= * \"a\"\n").find("nothing before it to repeat"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\" \"b\"\n").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\uD800\"\n").find("not a Unicode scalar value"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n")
                .find("rule 'expr' is left-recursive"),
            std::string::npos);
  // Left recursion through a rule that may match nothing.
  EXPECT_NE(error_of("root ::= a\na ::= b a \"x\" | \"y\"\nb ::= \"z\"?\n").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= a\na ::= \"x\" a\n").find("matches no text"), std::string::npos);
  EXPECT_EQ(error_of(kArithmetic), "");
  EXPECT_EQ(error_of(kJson), "");
}

TEST(GrammarMatch, ArithmeticRecursesThroughParentheses) {
  EXPECT_TRUE(matches(kArithmetic, "1 + 2 = 3\n"));
  EXPECT_TRUE(matches(kArithmetic, "(a_1 * (b - 2.5)) / c = -7\nx=y\n"));
  EXPECT_FALSE(matches(kArithmetic, "1 + = 3\n"));
  EXPECT_FALSE(matches(kArithmetic, "(1 + 2 = 3\n"));
  EXPECT_FALSE(matches(kArithmetic, "1.2345 = 1\n"));  // at most 3 decimals
  EXPECT_TRUE(viable(kArithmetic, "((((1"));
  EXPECT_FALSE(viable(kArithmetic, "1 ++"));
}

TEST(GrammarMatch, JsonWithEscapesAndNesting) {
  EXPECT_TRUE(
      matches(kJson, R"({"a": [1, -2.5e+3, {"b": null}], "c\n\u00e9": "x\"y", "d": true})"));
  EXPECT_TRUE(matches(kJson, "{}"));
  EXPECT_TRUE(matches(kJson, "{\"é😀\":\"ü\"}"));
  EXPECT_FALSE(matches(kJson, R"({"a": 01})"));
  EXPECT_FALSE(matches(kJson, R"({"a": "\x"})"));
  EXPECT_FALSE(matches(kJson, "{\"a\": \"line\nbreak\"}"));
  EXPECT_FALSE(matches(kJson, R"([1])"));  // root is an object
  // Invalid UTF-8 never matches a negated class.
  EXPECT_FALSE(viable(kJson, "{\"\xff"));
  EXPECT_FALSE(viable(kJson, "{\"\xc3\x28"));
  EXPECT_TRUE(viable(kJson, "{\"\xc3"));
}

TEST(GrammarMatch, ListsCountsAndChessMoves) {
  EXPECT_TRUE(matches(kList, "- eggs\n- milk\n"));
  EXPECT_FALSE(matches(kList, "- a\n- b\n- c\n- d\n- e\n"));
  EXPECT_FALSE(matches(kList, "- \n"));
  EXPECT_TRUE(matches(kChess, "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6"));
  EXPECT_TRUE(matches(kChess, "1. O-O O-O-O"));
  EXPECT_FALSE(matches(kChess, "1. e9 e5"));
  EXPECT_FALSE(matches(kChess, "1. e4 e5 2. d4 d5 3. c4 c5 4. b4 b5 5. a4 a5"));
}

TEST(GrammarMatch, UnicodeRangesAnyCharAndNegation) {
  EXPECT_TRUE(matches(kJapanese, "ひらがな、カタカナ、漢字。"));
  EXPECT_FALSE(matches(kJapanese, "ひらがなカタカナ。"));
  EXPECT_FALSE(matches(kJapanese, "abc。"));
  const std::string any = "root ::= . . [^a-c\\u00e9]\n";
  EXPECT_TRUE(matches(any, "x😀d"));
  EXPECT_TRUE(matches(any, "\n\x01\xe2\x82\xac"));
  EXPECT_FALSE(matches(any, "xyb"));
  EXPECT_FALSE(matches(any, "xy\xc3\xa9"));
  // Every code point of each encoded length at the edges of UTF-8's ranges.
  const std::string edges =
      "root ::= [\\x7f-\\u0080] [\\u07ff-\\u0800] [\\uffff-\\U00010000] [\\U0010FFFF]\n";
  EXPECT_TRUE(matches(edges, "\x7f\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(matches(edges, "\xc2\x80\xe0\xa0\x80\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(matches(edges, "\xc2\x7f\xe0\xa0\x80\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"));
  // Surrogates have no UTF-8 form, even inside a range that spans them.
  EXPECT_FALSE(viable("root ::= [\\ud000-\\ue000]\n", "\xed\xa0\x80"));
  EXPECT_TRUE(matches("root ::= [\\ud000-\\ue000]\n", "\xee\x80\x80"));
}

namespace {

std::unique_ptr<Tokenizer> tiny_tokenizer(std::unique_ptr<gguf::File>& file) {
  file = gguf::File::open(std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf");
  return Tokenizer::from_gguf(*file);
}

const Tokenizer& qwen3_tokenizer() {
  static std::unique_ptr<gguf::File> file = gguf::File::open(test::qwen3_vocab_gguf());
  static std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  return *tok;
}

// Walks `steps` random tokens through `gbnf`, checking each step's mask against every token tried
// one by one. Returns the text generated.
std::string check_masks(const Tokenizer& tok, const std::string& gbnf, int steps, uint64_t seed,
                        int padding = 7) {
  const int n_rows = tok.n_vocab() + padding;
  auto vocab = std::make_shared<const VocabTrie>(tok, n_rows);
  auto g = std::make_shared<const TokenGrammar>(gbnf, vocab);
  GrammarMatcher m(g);
  MatchState brute = start_state(g->automaton());
  std::mt19937_64 rng(seed);
  const std::vector<float> logits(n_rows, 0.0f);
  std::vector<float> out;
  std::string text;
  for (int step = 0; step < steps; ++step) {
    const bool any = m.mask(logits, out, true);
    std::vector<int32_t> allowed, other;
    for (int32_t id = 0; id < n_rows; ++id) {
      const bool eog = id < tok.n_vocab() && tok.is_eog(id);
      const std::string bytes = id < tok.n_vocab() && !eog ? tok.token_bytes(id) : std::string();
      bool expect =
          eog ? brute.can_end : !bytes.empty() && !advance(g->automaton(), brute, bytes).dead();
      // Control tokens count only where the grammar spells them; none of these grammars does.
      if (!eog && id < tok.n_vocab() && tok.token_type(id) == TokenType::kControl) expect = false;
      if (id < tok.n_vocab() && tok.token_type(id) == TokenType::kUnused) expect = false;
      EXPECT_EQ(std::isfinite(out[id]), expect)
          << "step " << step << " token " << id << " '" << bytes << "' after '" << text << "'";
      if (expect) (eog ? other : allowed).push_back(id);
    }
    EXPECT_EQ(any, !allowed.empty() || !other.empty());
    if (allowed.empty()) break;
    const int32_t pick = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept(pick));
    text += tok.token_bytes(pick);
    brute = advance(g->automaton(), brute, tok.token_bytes(pick));
    if (::testing::Test::HasFailure()) break;
  }
  return text;
}

}  // namespace

TEST(GrammarMask, MatchesBruteForceOnASmallVocabulary) {
  std::unique_ptr<gguf::File> file;
  auto tok = tiny_tokenizer(file);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const std::string text = check_masks(*tok, kJson, 40, seed);
    EXPECT_TRUE(viable(kJson, text)) << text;
  }
  check_masks(*tok, kArithmetic, 40, 5);
  check_masks(*tok, kChess, 30, 6);
  check_masks(*tok, kList, 30, 7);
}

TEST(GrammarMask, MatchesBruteForceOnQwen3Vocabulary) {
  if (test::qwen3_vocab_gguf().empty())
    GTEST_SKIP() << "tests/node/node_modules missing (scripts/install-deps)";
  const Tokenizer& tok = qwen3_tokenizer();
  ASSERT_GT(tok.n_vocab(), 150000);
  check_masks(tok, kJson, 6, 11, 267);
  check_masks(tok, kArithmetic, 4, 12, 0);
}

TEST(GrammarMask, ControlTokensOnlyWhereALiteralSpellsThem) {
  if (test::qwen3_vocab_gguf().empty())
    GTEST_SKIP() << "tests/node/node_modules missing (scripts/install-deps)";
  const Tokenizer& tok = qwen3_tokenizer();
  const int32_t im_start = tok.find_token("<|im_start|>");
  ASSERT_GE(im_start, 0);
  auto vocab = std::make_shared<const VocabTrie>(tok, tok.n_vocab());
  std::vector<float> logits(tok.n_vocab(), 0.0f), out;
  GrammarMatcher free_text(std::make_shared<const TokenGrammar>("root ::= [^\\n]{1,30}\n", vocab));
  free_text.mask(logits, out, true);
  EXPECT_FALSE(std::isfinite(out[im_start]));
  EXPECT_TRUE(std::isfinite(out[tok.find_token("<")]));
  GrammarMatcher spelled(
      std::make_shared<const TokenGrammar>("root ::= \"<|im_start|>\" [a-z]+\n", vocab));
  spelled.mask(logits, out, true);
  EXPECT_TRUE(std::isfinite(out[im_start]));
  EXPECT_TRUE(spelled.accept(im_start));
  EXPECT_FALSE(spelled.can_end());
}

TEST(GrammarMask, EndOfGenerationOnlyWhereTheTextMayEnd) {
  std::unique_ptr<gguf::File> file;
  auto tok = tiny_tokenizer(file);
  auto vocab = std::make_shared<const VocabTrie>(*tok, tok->n_vocab());
  ASSERT_FALSE(vocab->eog().empty());
  const int32_t eog = vocab->eog()[0];
  GrammarMatcher m(std::make_shared<const TokenGrammar>("root ::= \"ab\" \"c\"?\n", vocab));
  std::vector<float> logits(tok->n_vocab(), 1.0f), out;
  m.mask(logits, out, true);
  EXPECT_FALSE(std::isfinite(out[eog]));
  const std::vector<int32_t> ab = tok->encode("ab", false, false);
  GrammarMatcher m2(std::make_shared<const TokenGrammar>("root ::= \"ab\" \"c\"?\n", vocab));
  for (int32_t t : ab) ASSERT_TRUE(m2.accept(t));
  EXPECT_TRUE(m2.can_end());
  EXPECT_FALSE(m2.closed());
  m2.mask(logits, out, true);
  EXPECT_TRUE(std::isfinite(out[eog]));
  m2.mask(logits, out, false);
  EXPECT_FALSE(std::isfinite(out[eog]));
  EXPECT_TRUE(m2.accept(tok->encode("c", false, false)[0]));
  EXPECT_TRUE(m2.closed());
  // Drafts: the grammar cuts a run at its first refused token; an EOG ends it where allowed.
  GrammarMatcher m3(std::make_shared<const TokenGrammar>("root ::= \"ab\" \"c\"?\n", vocab));
  std::vector<int32_t> run = ab;
  run.push_back(eog);
  run.push_back(ab[0]);
  EXPECT_EQ(m3.valid_prefix(run, true), ab.size() + 1);
  EXPECT_EQ(m3.valid_prefix(run, false), ab.size());
  EXPECT_EQ(m3.valid_prefix(std::vector<int32_t>{eog}, true), 0u);
}

namespace {

// A vocabulary without byte tokens, which cannot spell every text: "a", "b", "ab", end of text.
std::unique_ptr<Tokenizer> ab_tokenizer(std::unique_ptr<gguf::File>& file) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("vocab"));
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::str("qwen2"));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array({"a", "b", "ab", "<|endoftext|>"}));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1, 1, 1, 3}));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array({"a b"}));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(3));
  const std::string path = (test::scratch_dir() / "ab-vocab.gguf").string();
  w.write(path);
  file = gguf::File::open(path);
  return Tokenizer::from_gguf(*file);
}

}  // namespace

TEST(GrammarMask, NoTokenCanStartIsAnError) {
  std::unique_ptr<gguf::File> file;
  auto tok = ab_tokenizer(file);
  auto vocab = std::make_shared<const VocabTrie>(*tok, tok->n_vocab());
  try {
    TokenGrammar g("root ::= \"c\" | [x-z]\n", vocab);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "no token of the model's vocabulary can begin the text it allows "
                  "(which starts with 'c', 'x', 'y', 'z')"),
              std::string::npos)
        << e.what();
  }
  GrammarMatcher m(std::make_shared<const TokenGrammar>("root ::= \"ab\"+\n", vocab));
  std::vector<float> logits(4, 0.0f), out;
  EXPECT_TRUE(m.mask(logits, out, true));
  EXPECT_TRUE(std::isfinite(out[0]) && std::isfinite(out[2]) && !std::isfinite(out[1]) &&
              !std::isfinite(out[3]));
}

TEST(GrammarMask, AVocabularyThatCannotContinueEndsTheTextUnfinished) {
  std::unique_ptr<gguf::File> file;
  auto tok = ab_tokenizer(file);
  auto g = std::make_shared<const TokenGrammar>("root ::= \"ab\" \"c\"\n",
                                                std::make_shared<const VocabTrie>(*tok, 4));
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.draft.mode = DraftMode::kNone;
  // The last stage: "ab" is sampled, then no token can write the "c".
  Generation last(*tok, o, std::vector<int32_t>{0}, 0, g);
  EXPECT_EQ(last.sample(std::vector<float>{0, 0, 5, 0}).token, 2);
  EXPECT_EQ(last.sample(std::vector<float>{0, 0, 5, 0}).token, -1);
  EXPECT_TRUE(last.finished());
  std::string tail;
  EXPECT_EQ(last.finish(&tail).finish, FinishReason::kLength);
  // A pipeline stage without logits reaches the same end.
  Generation follower(*tok, o, std::vector<int32_t>{0}, 0, g);
  EXPECT_FALSE(follower.grammar_blocked());
  follower.accept(2);
  EXPECT_TRUE(follower.grammar_blocked());
  EXPECT_EQ(follower.finish(&tail).finish, FinishReason::kLength);
}
