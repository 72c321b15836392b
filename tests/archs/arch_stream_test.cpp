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
#include "model/gen/gen_model.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

struct StreamCase {
  const char* model;  // file stem in testdata/reference
  const char* prompt;
  const char* policy;  // expert cache eviction policy
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
  ram.experts = ExpertMode::kRam;
  auto in_ram = Engine::load(ram);
  const std::vector<float> expected = run(*in_ram, prompt, kDecode);
  const int n_used = in_ram->info().n_expert_used;
  const uint64_t n_experts_total = static_cast<uint64_t>(in_ram->info().n_expert) * in_ram->info().n_layer;
  in_ram.reset();

  EngineOptions st = ram;
  st.experts = ExpertMode::kStream;
  // One slot more than a token needs; each slot is the expert's bytes widened to the direct-I/O
  // alignment at both ends of its three reads, which this bound covers.
  st.cache_bytes = (n_used + 1) * (expert_bytes(model.string()) + 3 * 2 * 4096);
  st.cold = true;
  st.lock_memory = false;
  st.cache_policy = *parse_eviction_policy(c.policy);
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
                         ::testing::Values(StreamCase{"qwen3moe-f32", "prompt1", "lfu"},
                                           StreamCase{"qwen3moe-f32", "prompt1", "lru"},
                                           StreamCase{"qwen3moe-f32", "prompt1", "nextuse"},
                                           StreamCase{"gptoss-f32", "prompt2", "lfu"},
                                           StreamCase{"gptoss-mxfp4", "prompt1", "nextuse"},
                                           StreamCase{"glm4moe-f32", "prompt1", "lfu"}),
                         [](const ::testing::TestParamInfo<StreamCase>& i) {
                           std::string s = std::string(i.param.model) + "_" + i.param.prompt + "_" + i.param.policy;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace

// Repeated prefill passes that route to more experts than the cache holds: LRU evicts exactly the
// experts the next layers need, so nearly every expert is read again on every pass; nextuse keeps
// a fixed set across passes and reads markedly less. A generated model (8 layers, 32 experts
// top-4) gives the sweep enough layers and experts for the difference to show; prefetch is off
// so only the eviction policy decides what is read.
TEST(StreamPolicy, NextUseBeatsLruOnPrefillSweeps) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-policy-" + std::to_string(getpid()));
  fs::create_directories(dir);
  setenv("SLUICE_HEAT_DIR", dir.c_str(), 1);
  GenSpec spec = gen_preset("tiny");
  spec.n_layer = 8;
  spec.n_expert = 32;
  spec.n_expert_used = 4;
  spec.vocab_from = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
  const std::string model = (dir / "sweep.gguf").string();
  write_random_model(spec, model);
  // 48 tokens route to nearly all 32 experts of every layer.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back((i * 37 + 11) % 200);
  auto run_policy = [&](const char* policy) {
    EngineOptions o;
    o.model_path = model;
    o.n_ctx = 64;
    o.experts = ExpertMode::kStream;
    o.cold = true;
    o.lock_memory = false;
    o.cache_policy = *parse_eviction_policy(policy);
    o.prefetch = false;
    o.cache_bytes = static_cast<uint64_t>(spec.n_layer * spec.n_expert / 2) * (expert_bytes(model) + 3 * 4096);
    auto engine = Engine::load(o);
    for (int pass = 0; pass < 4; ++pass) engine->new_session()->evaluate(prompt);
    return engine->expert_stats();
  };
  const ExpertStats lru = run_policy("lru"), next = run_policy("nextuse");
  fs::remove_all(dir);
  std::printf("4 prefill passes, cache of about half the experts: bytes read lru %llu, nextuse %llu\n",
              static_cast<unsigned long long>(lru.bytes_read), static_cast<unsigned long long>(next.bytes_read));
  EXPECT_EQ(lru.requests, next.requests);
  EXPECT_LT(next.bytes_read * 10, lru.bytes_read * 9) << "nextuse should read at least 10 % less than lru";
}
