// The hub's naming rules without a server: repository names, quant tags read from file names, the
// choice of a GGUF by tag (every part of a split model, the quants listed when the tag is missing),
// and the cache directory the environment names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "hub/cache.h"
#include "hub/hub.h"

using sluice::hub::RepoFile;
using sluice::hub::RepoRef;

namespace {

std::string error_of(const std::vector<RepoFile>& files, const std::string& ref) {
  try {
    sluice::hub::select_gguf(files, RepoRef::parse(ref), "");
  } catch (const sluice::Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> paths(const std::vector<RepoFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path);
  return out;
}

}  // namespace

TEST(HubNames, QuantTagsComeFromTheFileName) {
  EXPECT_EQ(sluice::hub::quant_of("Qwen3-30B-A3B-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(sluice::hub::quant_of("Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"), "Q4_K_M");
  EXPECT_EQ(sluice::hub::quant_of("model.iq2_xxs.gguf"), "IQ2_XXS");
  EXPECT_EQ(sluice::hub::quant_of("DeepSeek-V3-UD-Q2_K_XL.gguf"), "Q2_K_XL");
  EXPECT_EQ(sluice::hub::quant_of("gpt-oss-20b-BF16.gguf"), "BF16");
  EXPECT_EQ(sluice::hub::quant_of("tokenizer.gguf"), "");
}

TEST(HubNames, RepositoryReferences) {
  const RepoRef r = RepoRef::parse("unsloth/Qwen3-30B-A3B-GGUF:q4_k_m");
  EXPECT_EQ(r.repo, "unsloth/Qwen3-30B-A3B-GGUF");
  EXPECT_EQ(r.quant, "q4_k_m");
  EXPECT_EQ(RepoRef::parse("org/name").quant, "");
  EXPECT_THROW(RepoRef::parse("just-a-name"), sluice::Error);
  EXPECT_THROW(RepoRef::parse("org/../etc"), sluice::Error);
  EXPECT_THROW(RepoRef::parse("org/name:"), sluice::Error);
}

TEST(HubNames, TheTagPicksEveryPartAndAMissingTagListsTheQuants) {
  const std::vector<RepoFile> files = {
      {"README.md", 10, ""},
      {"m-Q8_0.gguf", 100, "a"},
      {"Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", 60, "b"},
      {"Q4_K_M/m-Q4_K_M-00002-of-00002.gguf", 40, "c"},
      {"mmproj-m-F16.gguf", 5, "d"},
  };
  EXPECT_EQ(paths(sluice::hub::select_gguf(files, RepoRef::parse("o/m:q4_k_m"), "")),
            (std::vector<std::string>{"Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf"}));
  EXPECT_EQ(paths(sluice::hub::select_gguf(files, RepoRef::parse("o/m:Q8_0"), "")),
            (std::vector<std::string>{"m-Q8_0.gguf"}));
  EXPECT_EQ(paths(sluice::hub::select_gguf(files, RepoRef::parse("o/m"), "m-Q8_0.gguf")),
            (std::vector<std::string>{"m-Q8_0.gguf"}));
  EXPECT_NE(error_of(files, "o/m").find("its quants: Q4_K_M, Q8_0"), std::string::npos) << error_of(files, "o/m");
  EXPECT_NE(error_of(files, "o/m:Q6_K").find("has no Q6_K GGUF"), std::string::npos);
  // A split model missing a part is an error, not a partial download.
  const std::vector<RepoFile> broken = {{"m-Q4_K_M-00001-of-00002.gguf", 1, "b"}};
  EXPECT_NE(error_of(broken, "o/m:Q4_K_M").find("lacks m-Q4_K_M-00002-of-00002.gguf"), std::string::npos);
}

TEST(HubNames, TheCacheFollowsTheHubsEnvironment) {
  setenv("HF_HUB_CACHE", "/x/hub-cache", 1);
  setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  EXPECT_EQ(sluice::hub::HubConfig::from_env().cache_dir, "/x/hub-cache");
  EXPECT_EQ(sluice::hub::HubConfig::from_env().endpoint, "http://127.0.0.1:9");
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", "/y/hf", 1);
  EXPECT_EQ(sluice::hub::HubConfig::from_env().cache_dir, "/y/hf/hub");
  unsetenv("HF_HOME");
  unsetenv("HF_ENDPOINT");
  EXPECT_EQ(sluice::hub::RepoCache("/c", "org/name").dir(), "/c/models--org--name");
}
