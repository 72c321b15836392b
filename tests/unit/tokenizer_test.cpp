// Tokenizer units on a small synthetic byte-level vocabulary written with gguf::Writer: merges,
// special-token splitting (control only with parse_special, user-defined always), EOG, error
// messages for broken vocabularies, invalid UTF-8, the GPT-2 byte alphabet, every pre-tokenizer's
// coverage of its input, and StreamDecoder never emitting part of a UTF-8 character.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace sluice;

namespace {

// 256 byte tokens (id = byte), then merges building "hello", then three special tokens.
struct Synthetic {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o"};
  Synthetic() {
    for (int b = 0; b < 256; ++b) tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
    for (const char* t : {"he", "ll", "hell", "hello"}) tokens.emplace_back(t);
    types.assign(tokens.size(), 1);
    tokens.emplace_back("<|im_end|>");     // 260, control
    tokens.emplace_back("<think>");        // 261, user-defined
    tokens.emplace_back("<|endoftext|>");  // 262, control
    types.insert(types.end(), {3, 4, 3});
  }
  // Writes the vocabulary with `edit` applied to the writer last.
  std::string write(const std::string& name, const std::function<void(gguf::Writer&)>& edit = {}) const {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::str("vocab"));
    w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::Value::str("qwen2"));
    w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
    w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));
    w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(262));
    if (edit) edit(w);
    const std::string path = (test::scratch_dir() / name).string();
    w.write(path);
    return path;
  }
};

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto f = gguf::File::open(path);
  return Tokenizer::from_gguf(*f);
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8::valid_char_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, MergesByRank) {
  auto tok = load(Synthetic().write("merge.gguf"));
  EXPECT_EQ(tok->encode("hello", false, false), std::vector<int32_t>({259}));
  // No merge starts with "Ġ", so " hello" is the space byte and then the letters as merged.
  auto want = bytes_of(" ");
  want.push_back(259);
  EXPECT_EQ(tok->encode(" hello", false, false), want);
  EXPECT_EQ(tok->encode("hellhe", false, false), std::vector<int32_t>({258, 256}));
  EXPECT_EQ(tok->n_vocab(), 263);
}

TEST(Tokenizer, ControlTokensOnlyWithParseSpecialUserDefinedAlways) {
  auto tok = load(Synthetic().write("special.gguf"));
  const auto parsed = tok->encode("hi<|im_end|><think>", false, true);
  auto want = bytes_of("hi");
  want.insert(want.end(), {260, 261});
  EXPECT_EQ(parsed, want);
  const auto plain = tok->encode("hi<|im_end|><think>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 260), 0);
  EXPECT_EQ(plain.back(), 261) << "user-defined tokens are split out even without parse_special";
  EXPECT_EQ(tok->decode(plain), "hi<|im_end|><think>");
}

TEST(Tokenizer, EndOfGenerationAndSpecialIds) {
  auto tok = load(Synthetic().write("eog.gguf"));
  EXPECT_EQ(tok->eos(), 262);
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_TRUE(tok->is_eog(262));
  EXPECT_TRUE(tok->is_eog(260)) << "<|im_end|> ends a turn";
  EXPECT_FALSE(tok->is_eog(261));
  EXPECT_FALSE(tok->is_eog('h'));
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_FALSE(tok->is_eog(100000));
  EXPECT_EQ(tok->token_text(260), "<|im_end|>");
  EXPECT_EQ(tok->token_type(261), TokenType::kUserDefined);
  EXPECT_NE(error_of([&] { tok->token_text(263); }).find("263"), std::string::npos);
}

TEST(Tokenizer, AddSpecialFollowsKeys) {
  Synthetic s;
  auto tok = load(s.write("bos.gguf", [](gguf::Writer& w) {
    w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(262));
    w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
    w.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(true));
  }));
  EXPECT_EQ(tok->encode("hello", true, false), std::vector<int32_t>({262, 259, 262}));
  EXPECT_EQ(tok->encode("hello", false, false), std::vector<int32_t>({259}));
  EXPECT_EQ(tok->encode("", true, false), std::vector<int32_t>({262, 262}));
}

TEST(Tokenizer, BrokenVocabulariesFailWithTheKey) {
  Synthetic s;
  auto msg = [&](const std::string& name, const std::function<void(gguf::Writer&)>& edit) {
    return error_of([&] { load(s.write(name, edit)); });
  };
  EXPECT_NE(msg("nobos.gguf", [](gguf::Writer& w) { w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true)); })
                .find("bos_token_id"),
            std::string::npos);
  EXPECT_NE(msg("nomerges.gguf", [](gguf::Writer& w) { w.set("tokenizer.ggml.merges", gguf::Value::str_array({})); })
                .find("tokenizer.ggml.merges"),
            std::string::npos);
  EXPECT_NE(msg("badpre.gguf", [](gguf::Writer& w) { w.set("tokenizer.ggml.pre", gguf::Value::str("nonesuch")); })
                .find("nonesuch"),
            std::string::npos);
  EXPECT_NE(msg("badmodel.gguf", [](gguf::Writer& w) { w.set("tokenizer.ggml.model", gguf::Value::str("t5")); })
                .find("'t5'"),
            std::string::npos);
  EXPECT_NE(msg("types.gguf", [](gguf::Writer& w) { w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1})); })
                .find("tokenizer.ggml.token_type"),
            std::string::npos);
  Synthetic dup;
  dup.tokens[256] = "hell";
  EXPECT_NE(error_of([&] { load(dup.write("dup.gguf")); }).find("duplicate token 'hell'"), std::string::npos);

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("llama"));
  const std::string path = (test::scratch_dir() / "novocab.gguf").string();
  w.write(path);
  EXPECT_NE(error_of([&] { load(path); }).find("tokenizer.ggml.model"), std::string::npos);
}

TEST(Tokenizer, InvalidUtf8RoundTrips) {
  auto tok = load(Synthetic().write("invalid.gguf"));
  const std::string text = "a\xff\xfe b\xe4\xbd";  // stray bytes and a truncated character
  const auto ids = tok->encode(text, false, false);
  EXPECT_EQ(ids, bytes_of(text));
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(ByteLevel, AlphabetRoundTrips) {
  EXPECT_EQ(byte_level::encode(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level::encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level::encode("A"), "A");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level::decode(byte_level::encode(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level::decode("\xE4\xBD\xA0", &back)) << "U+4F60 is not in the byte alphabet";
}

TEST(PreTokenizer, EveryFamilyCoversItsInputExactly) {
  std::ifstream f(std::string(SLUICE_SOURCE_DIR) + "/tests/data/tokenizer/multilingual.txt", std::ios::binary);
  const std::string corpus(std::istreambuf_iterator<char>(f), {});
  ASSERT_FALSE(corpus.empty());
  for (const std::string& name : PreTokenizer::known_names()) {
    PreTokenizer pre(name);
    std::string joined;
    for (std::string_view p : pre.split(corpus)) {
      EXPECT_FALSE(p.empty()) << name;
      joined.append(p);
    }
    EXPECT_EQ(joined, corpus) << name;
  }
  EXPECT_NE(error_of([] { PreTokenizer p("nonesuch"); }).find("nonesuch"), std::string::npos);
}

TEST(PreTokenizer, SplitsAsTheFamilyRegexSays) {
  auto pieces = [](const char* name, std::string_view text) {
    std::vector<std::string> out;
    for (auto p : PreTokenizer(name).split(text)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("llama-bpe", "Hello world 12345 it's"), V({"Hello", " world", " ", "123", "45", " it", "'s"}));
  EXPECT_EQ(pieces("qwen2", "x 123"), V({"x", " ", "1", "2", "3"}));
  EXPECT_EQ(pieces("gpt-2", "a  b"), V({"a", " ", " b"}));
  // Kimi-K2 keeps Han apart from Latin letters (class intersection rewritten as a lookahead).
  EXPECT_EQ(pieces("kimi-k2", "你好world"), V({"你好", "world"}));
  // deepseek-llm: newlines are isolated first, trailing whitespace ends a line.
  EXPECT_EQ(pieces("deepseek-llm", "ab\ncd"), V({"ab", "\n", "cd"}));
}

TEST(StreamDecoder, NeverSplitsUtf8) {
  auto tok = load(Synthetic().write("stream.gguf"));
  const std::string text = "Zürich 你好 🦙😶‍🌫️ done";
  const auto ids = tok->encode(text, false, false);
  ASSERT_GT(ids.size(), 20u);  // multi-byte characters arrive one byte token at a time
  StreamDecoder sd(*tok);
  std::string out;
  size_t held_back = 0;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "partial character emitted";
    held_back += piece.empty();
    out += piece;
  }
  out += sd.flush();
  EXPECT_EQ(out, text);
  EXPECT_GT(held_back, 0u);
}

TEST(StreamDecoder, InvalidAndUnfinishedBytesBecomeReplacement) {
  auto tok = load(Synthetic().write("stream2.gguf"));
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.push('a'), "a");
  EXPECT_EQ(sd.push(0xE4), "");  // first byte of 你
  EXPECT_EQ(sd.push(0xBD), "");
  EXPECT_EQ(sd.push('b'), "\xEF\xBF\xBD" "b");  // the character was cut short by 'b'
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.flush(), "");
}

TEST(SpmTokenizer, Stories260KBosSpacePrefixAndByteFallback) {
  const std::string path = test::testdata("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "stories260K.gguf not in testdata";
  auto tok = load(path);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kSpm);
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  const auto ids = tok->encode("Once upon", true, false);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok->decode({ids.begin() + 1, ids.end()}), " Once upon");
  // A character the 512-token vocabulary lacks falls back to its UTF-8 bytes.
  const auto cjk = tok->encode("你", false, false);
  std::string bytes;
  for (int32_t id : cjk) bytes += tok->token_bytes(id);
  EXPECT_EQ(bytes, " 你");
  EXPECT_TRUE(tok->is_eog(2));
}

}  // namespace

namespace {

// Random text mixing ASCII, multi-byte characters and stray bytes, from a fixed seed.
std::string random_text(std::mt19937& rng, size_t n_chars) {
  static const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\n", "\t", "3", "'s", "é", "你", "🦙",
                                                    "\xCC\x81", "\xFF", "\xE4\xBD", "<", "|", "."};
  std::string s;
  for (size_t i = 0; i < n_chars; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

}  // namespace

TEST(Tokenizer, RandomTextRoundTripsThroughEveryReferenceVocab) {
  std::mt19937 rng(1234);
  size_t checked = 0;
  for (const char* name : {"reference/qwen3moe-f32.gguf", "reference/mixtral-f32.gguf", "reference/deepseek2-f32.gguf",
                           "reference/gptoss-f32.gguf", "reference/glm4moe-f32.gguf", "models/stories260K.gguf"}) {
    const std::string path = test::testdata(name);
    if (!std::filesystem::exists(path)) continue;
    auto tok = load(path);
    for (int iter = 0; iter < 50; ++iter) {
      const std::string text = random_text(rng, 1 + rng() % 40);
      const auto ids = tok->encode(text, false, false);
      std::string back = tok->decode(ids);
      // SPM prefixes a space to the text it encodes.
      if (tok->kind() == Tokenizer::Kind::kSpm) back.erase(0, 1);
      ASSERT_EQ(back, text) << name;
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab()) << name;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no reference vocabularies in testdata";
}
