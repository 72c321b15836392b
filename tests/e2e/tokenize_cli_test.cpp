// `sluice tokenize` and `sluice convert-tokenizer` as a user runs them: output formats, flags,
// error exits, and a tokenizer.json converted and used end to end.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../unit/test_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;

namespace {

using CliResult = test::ShellResult;  // status, then stdout and stderr together

CliResult sluice_cli(const std::string& args) { return test::sh(std::string(SLUICE_BIN) + " " + args); }

const std::string kStories = test::testdata("models/stories260K.gguf");

class TokenizeCli : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "stories260K.gguf not in testdata";
    file_ = gguf::File::open(kStories);
    tok_ = Tokenizer::from_gguf(*file_);
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizeCli, IdsJsonAndPieces) {
  const std::string text = "Once upon a time, Lily 你";
  const auto want = tok_->encode(text, true, false);

  const CliResult ids = sluice_cli("tokenize -m " + kStories + " -p '" + text + "' --ids");
  ASSERT_EQ(ids.status, 0) << ids.out;
  EXPECT_EQ(ids.out, fmt::format("{}\n", fmt::join(want, " ")));

  const CliResult js = sluice_cli("tokenize -m " + kStories + " -p '" + text + "' --json");
  ASSERT_EQ(js.status, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j.at("ids").get<std::vector<int32_t>>(), want);
  ASSERT_EQ(j.at("pieces").size(), want.size());
  EXPECT_EQ(j["pieces"][1].get<std::string>(), tok_->token_bytes(want[1]));

  const CliResult plain = sluice_cli("tokenize -m " + kStories + " -p 'Once'");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_EQ(plain.out, fmt::format("1 '<s>'\n{} ' Once'\n", tok_->encode("Once", false, false).at(0)));
}

TEST_F(TokenizeCli, NoBosAndFileInput) {
  const std::string path = (test::scratch_dir() / "prompt.txt").string();
  std::ofstream(path) << "line one\nline two\n";
  const CliResult r = sluice_cli("tokenize -m " + kStories + " -f " + path + " --ids --no-bos");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, fmt::format("{}\n", fmt::join(tok_->encode("line one\nline two\n", false, false), " ")));
}

TEST_F(TokenizeCli, ErrorsExitNonZeroWithAMessage) {
  const CliResult none = sluice_cli("tokenize -m " + kStories);
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.out.find("-p TEXT or -f FILE"), std::string::npos) << none.out;
  const CliResult both = sluice_cli("tokenize -m " + kStories + " -p a -f b");
  EXPECT_NE(both.status, 0);
  const CliResult missing = sluice_cli("tokenize -m /nonexistent.gguf -p a");
  EXPECT_EQ(missing.status, 2);  // an argument error, as for every model command
  EXPECT_NE(missing.out.find("File does not exist: /nonexistent.gguf"), std::string::npos) << missing.out;
}

// A tiny byte-level BPE in HF's format: ByteLevel pre-tokenizer (GPT-2 regex), string merges, one
// special added token named as EOS by the config.
void write_tiny_hf(const std::filesystem::path& dir, const std::string& pre_tokenizer) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"version":"1.0","added_tokens":[{"id":10,"content":"<|eos|>","special":true}],
    "normalizer":null,"pre_tokenizer":)" << pre_tokenizer << R"(,
    "decoder":{"type":"ByteLevel"},
    "model":{"type":"BPE","vocab":{"h":0,"e":1,"l":2,"o":3,"Ġ":4,"he":5,"ll":6,"hell":7,"hello":8,"Ġhello":9},
             "merges":["h e","l l","he ll",["hell","o"],"Ġ hello"]}})";
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token":"<|eos|>","bos_token":null,"add_bos_token":false})";
}

TEST(ConvertTokenizerCli, ConvertsAndTokenizes) {
  const auto dir = test::scratch_dir() / "tiny-hf";
  write_tiny_hf(dir, R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})");
  const std::string out = (dir / "vocab.gguf").string();
  const CliResult conv = sluice_cli("convert-tokenizer " + (dir / "tokenizer.json").string() + " " +
                              (dir / "tokenizer_config.json").string() + " -o " + out);
  ASSERT_EQ(conv.status, 0) << conv.out;
  EXPECT_NE(conv.out.find("pre-tokenizer 'gpt-2'"), std::string::npos) << conv.out;

  const CliResult ids = sluice_cli("tokenize -m " + out + " -p 'hello hello<|eos|>' --special --ids");
  ASSERT_EQ(ids.status, 0) << ids.out;
  EXPECT_EQ(ids.out, "8 9 10\n");
  auto f = gguf::File::open(out);
  auto tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->eos(), 10);
  EXPECT_TRUE(tok->is_eog(10));
  EXPECT_EQ(tok->token_type(10), TokenType::kControl);
}

TEST(ConvertTokenizerCli, UnknownPreTokenizerNeedsAName) {
  const auto dir = test::scratch_dir() / "tiny-hf-odd";
  write_tiny_hf(dir, R"({"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false})");
  const std::string out = (dir / "vocab.gguf").string();
  const CliResult conv = sluice_cli("convert-tokenizer " + (dir / "tokenizer.json").string() + " -o " + out);
  EXPECT_EQ(conv.status, 1);
  EXPECT_NE(conv.out.find("pass the pre-tokenizer name"), std::string::npos) << conv.out;
  const CliResult forced = sluice_cli("convert-tokenizer " + (dir / "tokenizer.json").string() + " -o " + out + " --pre gpt-2");
  EXPECT_EQ(forced.status, 0) << forced.out;
}

}  // namespace
