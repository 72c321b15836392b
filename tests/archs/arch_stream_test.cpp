// Streaming the routed experts from disk must not change a single bit of the forward pass: for each
// MoE reference model, the logits of a teacher-forced prompt and of a few single-token decode
// steps with experts streamed through a cache a little larger than one token's experts per layer
// (so nearly every layer evicts and re-reads) equal those with every expert in RAM.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

struct StreamCase {
  const char* model;  // file stem in testdata/reference
  const char* prompt;
};

// The reference prompt's tokens, as the reference engine tokenized them.
std::vector<int32_t> prompt_tokens(const fs::path& json) {
  std::ifstream in(json);
  return nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
}

// Bytes of one routed expert (gate + up + down slices) in the first layer that has experts.
uint64_t expert_bytes(const std::string& path) {
  auto f = gguf::File::open(path);
  const int64_t n_layer = f->get_int(f->get_string("general.architecture") + ".block_count");
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".ffn_";
    if (!f->find_tensor(p + "gate_exps.weight")) continue;
    uint64_t sum = 0;
    for (const char* role : {"gate", "up", "down"}) {
      const gguf::TensorInfo& t = f->tensor(p + role + "_exps.weight");
      sum += t.nbytes / t.ne[2];
    }
    return sum;
  }
  ADD_FAILURE() << path << " has no merged routed experts";
  return 0;
}

// Logits after every prompt token, then after each of `n_decode` greedy tokens evaluated alone.
std::vector<float> run(Engine& engine, const std::vector<int32_t>& prompt, int n_decode) {
  auto session = engine.new_session();
  std::vector<float> out = session->evaluate_all(prompt);
  const size_t n_vocab = engine.info().n_vocab;
  std::vector<int32_t> ctx = prompt;
  std::vector<float> last(out.end() - n_vocab, out.end());
  for (int i = 0; i < n_decode; ++i) {
    ctx.push_back(argmax(last));
    auto l = session->evaluate(ctx);
    last.assign(l.begin(), l.end());
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

class ArchStream : public ::testing::TestWithParam<StreamCase> {};

TEST_P(ArchStream, StreamedExpertsAreBitIdenticalToRam) {
  const StreamCase& c = GetParam();
  const fs::path dir = fs::path(SLUICE_TESTDATA) / "reference";
  const fs::path model = dir / (std::string(c.model) + ".gguf");
  const fs::path json = dir / (std::string(c.model) + "." + c.prompt + ".json");
  ASSERT_TRUE(fs::exists(model) && fs::exists(json)) << model << " or " << json << " is missing";
  // The stream store writes a heat profile when it closes; keep it out of the user's cache.
  const fs::path heat = fs::temp_directory_path() / ("sluice-arch-stream-" + std::to_string(getpid()));
  setenv("SLUICE_HEAT_DIR", heat.c_str(), 1);
  const std::vector<int32_t> prompt = prompt_tokens(json);
  constexpr int kDecode = 6;

  EngineOptions ram;
  ram.model_path = model.string();
  ram.n_ctx = static_cast<int>(prompt.size()) + kDecode + 1;
  ram.experts = "ram";
  auto in_ram = Engine::load(ram);
  const std::vector<float> expected = run(*in_ram, prompt, kDecode);
  const int n_used = in_ram->info().n_expert_used;
  const uint64_t n_experts_total = static_cast<uint64_t>(in_ram->info().n_expert) * in_ram->info().n_layer;
  in_ram.reset();

  EngineOptions st = ram;
  st.experts = "stream";
  // One slot more than a token needs; each slot is the expert's bytes widened to the direct-I/O
  // alignment at both ends of its three reads, which this bound covers.
  st.cache_bytes = (n_used + 1) * (expert_bytes(model.string()) + 3 * 2 * 4096);
  st.cold = true;
  st.lock_memory = false;
  auto streamed = Engine::load(st);
  ASSERT_EQ(streamed->info().experts_mode, "stream");
  const std::vector<float> got = run(*streamed, prompt, kDecode);
  const ExpertStats stats = streamed->expert_stats();
  streamed.reset();
  fs::remove_all(heat);

  ASSERT_EQ(got.size(), expected.size());
  size_t differ = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0) {
      if (first == got.size()) first = i;
      ++differ;
    }
  EXPECT_EQ(differ, 0u) << "first differing logit at " << first << ": " << got[first] << " vs " << expected[first];
  // More reads than there are experts: the cache evicted and read experts again.
  EXPECT_GT(stats.misses, n_experts_total) << "requests " << stats.requests << ", hits " << stats.hits;
  std::printf("[%s.%s] %zu logits identical; experts: %llu requests, %llu misses, %llu bytes read\n", c.model, c.prompt,
              got.size(), static_cast<unsigned long long>(stats.requests), static_cast<unsigned long long>(stats.misses),
              static_cast<unsigned long long>(stats.bytes_read));
}

INSTANTIATE_TEST_SUITE_P(Reference, ArchStream,
                         ::testing::Values(StreamCase{"qwen3moe-f32", "prompt1"}, StreamCase{"gptoss-f32", "prompt2"},
                                           StreamCase{"gptoss-mxfp4", "prompt1"}, StreamCase{"glm4moe-f32", "prompt1"}),
                         [](const ::testing::TestParamInfo<StreamCase>& i) {
                           std::string s = std::string(i.param.model) + "_" + i.param.prompt;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
