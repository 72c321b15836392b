// The reference models' prompts: for every testdata/reference/MODEL.PROMPT.json whose GGUF is
// present, encoding the prompt with the JSON's add_special must give its `tokens`, and decoding
// its `greedy` ids must give `greedy_bytes_hex`. Covers the 1026-token BPE vocabularies of each
// pre-tokenizer (qwen2, llama-bpe, deepseek-v3, gpt-4o, glm4) and stories260K's SPM vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "../unit/test_util.h"
#include "gguf/gguf.h"
#include "tokenizer_cases.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// MODEL.PROMPT.json files; the models subdirectory holds stories260K.gguf.
std::vector<std::string> reference_jsons() {
  std::vector<std::string> names;
  const fs::path dir = test::testdata("reference");
  if (!fs::is_directory(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string model_path(const std::string& model) {
  for (const char* sub : {"reference/", "models/"}) {
    const std::string p = test::testdata(sub + model);
    if (fs::exists(p)) return p;
  }
  return "";
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

class ReferencePrompt : public testing::TestWithParam<std::string> {};

TEST_P(ReferencePrompt, EncodeAndDecodeMatch) {
  const auto j = nlohmann::json::parse(test::slurp_file(test::testdata("reference/" + GetParam())));
  const std::string model = j.at("model").get<std::string>();
  const std::string path = model_path(model);
  if (path.empty()) GTEST_SKIP() << model << " is not in testdata";
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);

  const std::string prompt = j.at("prompt").get<std::string>();
  const bool add_special = j.value("add_special", false);
  const auto want = j.at("tokens").get<std::vector<int32_t>>();
  const auto got = tok->encode(prompt, add_special, false);
  EXPECT_EQ(got, want) << GetParam();
  std::printf("[reference] %s (%s, pre '%s'): %zu tokens %s\n", GetParam().c_str(), model.c_str(), tok->pre().c_str(),
              want.size(), got == want ? "identical" : "DIFFER");

  const auto greedy = j.at("greedy").get<std::vector<int32_t>>();
  EXPECT_EQ(tok->decode(greedy), from_hex(j.at("greedy_bytes_hex").get<std::string>())) << GetParam();
  // The prompt round-trips; SPM adds one leading space (its space prefix) and BOS renders as text.
  std::string back = tok->decode(add_special ? std::vector<int32_t>(got.begin() + 1, got.end()) : got);
  if (tok->kind() == Tokenizer::Kind::kSpm) back.erase(0, 1);
  EXPECT_EQ(back, prompt) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(All, ReferencePrompt, testing::ValuesIn(reference_jsons()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The prompt files are what the JSONs hold (so tools that tokenize the files see the same text).
TEST(ReferencePromptFiles, MatchJsonPrompts) {
  const auto j = nlohmann::json::parse(test::slurp_file(test::testdata("reference/qwen3moe-f32.prompt1.json")));
  std::string file = test::slurp_file(test::testdata("reference/prompt1.txt"));
  EXPECT_EQ(file, j.at("prompt").get<std::string>());
}

}  // namespace
