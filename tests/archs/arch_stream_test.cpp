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

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "gen/gen_model.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "runtime/expert_setup.h"
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

// Bytes of one routed expert (gate + up + down slices, and their biases where the file has them)
// in the first layer that has experts, plus the widening of each slice to the direct-I/O
// alignment at both ends.
uint64_t expert_bytes(const std::string& path) {
  auto f = gguf::File::open(path);
  const int64_t n_layer = f->get_int(f->get_string("general.architecture") + ".block_count");
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".ffn_";
    if (!f->find_tensor(p + "gate_exps.weight")) continue;
    uint64_t sum = 0;
    for (const char* role : {"gate", "up", "down"}) {
      const gguf::TensorInfo& t = f->tensor(p + role + "_exps.weight");
      sum += t.nbytes / t.ne[2] + 2 * 4096;
      if (const gguf::TensorInfo* b = f->find_tensor(p + role + "_exps.bias")) sum += b->nbytes / b->ne[1] + 2 * 4096;
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
  // One slot more than a token needs.
  st.cache_bytes = (n_used + 1) * expert_bytes(model.string());
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
  std::printf("[%s.%s] %zu logits identical; experts: %llu requests, %llu misses, %llu bytes read, %llu/%llu certain "
              "prefetches used\n",
              c.model, c.prompt, got.size(), static_cast<unsigned long long>(stats.requests),
              static_cast<unsigned long long>(stats.misses), static_cast<unsigned long long>(stats.bytes_read),
              static_cast<unsigned long long>(stats.certain_used), static_cast<unsigned long long>(stats.certain_issued));
}

INSTANTIATE_TEST_SUITE_P(Reference, ArchStream,
                         ::testing::Values(StreamCase{"qwen3moe-f32", "prompt1", "lfu"},
                                           StreamCase{"qwen3moe-f32", "prompt1", "lru"},
                                           StreamCase{"qwen3moe-f32", "prompt1", "nextuse"},
                                           StreamCase{"gptoss-f32", "prompt2", "lfu"},
                                           StreamCase{"gptoss-mxfp4", "prompt1", "nextuse"},
                                           StreamCase{"glm4moe-f32", "prompt1", "lfu"},
                                           StreamCase{"deepseek4-f32", "prompt1", "lru"},
                                           StreamCase{"deepseek4-q2", "prompt1", "nextuse"}),
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
    o.cache_bytes = static_cast<uint64_t>(spec.n_layer * spec.n_expert / 2) * (expert_bytes(model) - 3 * 4096);
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

// Passes every call to a real store and checks the order of the calls: a lookahead prefetch for
// layer p must come while layer p−1's request is open (begun, its experts pinned, not ended).
// Issued before begin(p−1), its reads could evict under LRU or LFU an expert layer p−1 is about
// to use.
class OrderCheckingStore final : public ExpertStore {
 public:
  explicit OrderCheckingStore(std::unique_ptr<ExpertStore> inner) : inner_(std::move(inner)) {}
  void begin(int il, std::span<const int32_t> ids) override {
    open_ = il;
    inner_->begin(il, ids);
  }
  bool next(int* index, ExpertWeights* w) override { return inner_->next(index, w); }
  void end() override {
    open_ = -1;
    inner_->end();
  }
  void prefetch(int il, std::span<const int32_t> ids, PrefetchHint hint) override {
    ++prefetches;
    if (open_ != il - 1) ++out_of_order;
    inner_->prefetch(il, ids, hint);
  }
  std::string describe() const override { return inner_->describe(); }
  int prefetches = 0, out_of_order = 0;

 private:
  std::unique_ptr<ExpertStore> inner_;
  int open_ = -1;
};

TEST(StreamOrder, LookaheadIsIssuedAfterTheCurrentLayerIsPinned) {
  const fs::path model = fs::path(SLUICE_TESTDATA) / "reference" / "qwen3moe-f32.gguf";
  ASSERT_TRUE(fs::exists(model)) << model << " is missing";
  auto file = gguf::File::open(model.string());
  auto m = load_model(*file);
  auto store = std::make_unique<OrderCheckingStore>(make_in_place_store(m->expert_layout(), "ram"));
  OrderCheckingStore& spy = *store;
  m->set_prefetch(true);
  ThreadPool pool(1);
  auto kv = m->make_kv_cache(16);
  std::vector<float> logits;
  Batch prefill, decode;
  for (int i = 0; i < 5; ++i) prefill.add(3 + 7 * i, i, 0, i == 4);
  m->forward(pool, prefill, *kv, spy, logits);
  decode.add(11, 5, 0, true);
  m->forward(pool, decode, *kv, spy, logits);
  EXPECT_EQ(spy.prefetches, 2 * (m->hparams().n_layer - 1));
  EXPECT_EQ(spy.out_of_order, 0) << "of " << spy.prefetches << " lookahead prefetches";
}

// Bytes of one routed expert in each layer (0 for a layer without merged experts).
std::vector<uint64_t> expert_bytes_per_layer(const std::string& path) {
  auto f = gguf::File::open(path);
  const int64_t n_layer = f->get_int(f->get_string("general.architecture") + ".block_count");
  std::vector<uint64_t> out;
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".ffn_";
    uint64_t sum = 0;
    if (f->find_tensor(p + "gate_exps.weight"))
      for (const char* role : {"gate", "up", "down"}) {
        const gguf::TensorInfo& t = f->tensor(p + role + "_exps.weight");
        sum += t.nbytes / t.ne[2];
      }
    out.push_back(sum);
  }
  return out;
}

// A small qwen3moe whose layers mix expert types as real 2-bit builds do: IQ2_XXS gate/up and
// Q2_K down on even layers, Q4_K experts on odd layers.
GenSpec mixed_spec() {
  GenSpec spec = gen_preset("tiny");
  spec.n_layer = 4;
  spec.n_embd = 256;
  spec.n_ff_exp = 256;
  spec.n_expert = 16;
  spec.n_expert_used = 4;
  spec.type_experts = GgmlType::IQ2_XXS;
  spec.type_experts_down = GgmlType::Q2_K;
  spec.type_experts_mixed = GgmlType::Q4_K;
  spec.vocab_from = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
  return spec;
}

// Streaming a file with two expert sizes through a cache of a few slots of each size gives the
// in-RAM logits bit for bit, and the arena (slots sized per class) stays within the budget.
TEST(StreamMixed, MixedExpertSizesStreamBitIdenticalWithinBudget) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-mixed-" + std::to_string(getpid()));
  fs::create_directories(dir);
  setenv("SLUICE_HEAT_DIR", dir.c_str(), 1);
  const GenSpec spec = mixed_spec();
  const std::string model = (dir / "mixed.gguf").string();
  write_random_model(spec, model);
  const std::vector<uint64_t> per_layer = expert_bytes_per_layer(model);
  ASSERT_EQ(per_layer.size(), 4u);
  ASSERT_EQ(per_layer[0], per_layer[2]);
  ASSERT_EQ(per_layer[1], per_layer[3]);
  ASSERT_LT(per_layer[0] * 3 / 2, per_layer[1]) << "Q4_K experts should be much larger than IQ2_XXS/Q2_K ones";
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back((i * 37 + 11) % 200);

  EngineOptions ram;
  ram.model_path = model;
  ram.n_ctx = 40;
  ram.experts = ExpertMode::kRam;
  auto in_ram = Engine::load(ram);
  const std::vector<float> expected = run(*in_ram, prompt, 4);
  in_ram.reset();

  EngineOptions st = ram;
  st.experts = ExpertMode::kStream;
  st.cold = true;
  st.lock_memory = false;
  st.cache_policy = EvictionPolicy::kLru;
  // One slot more than a token needs of each size; the widening to the direct-I/O alignment adds
  // at most 2 pages per slice.
  const uint64_t pad = 3 * 2 * 4096;
  st.cache_bytes = (spec.n_expert_used + 1) * (per_layer[0] + pad + per_layer[1] + pad);
  auto streamed = Engine::load(st);
  ASSERT_EQ(streamed->info().experts_mode, "stream");
  const std::string detail = streamed->info().experts_detail;
  const std::vector<float> got = run(*streamed, prompt, 4);
  const ExpertStats stats = streamed->expert_stats();
  streamed.reset();
  fs::remove_all(dir);

  EXPECT_NE(detail.find(" + "), std::string::npos) << "expected two size classes: " << detail;
  EXPECT_GT(stats.cache_bytes, 0u);
  EXPECT_LE(stats.cache_bytes, st.cache_bytes) << detail;
  // As many slots of the largest expert's size would not fit the budget.
  uint64_t n_slots = 0;
  for (size_t at = 0; (at = detail.find(" slots ×", at)) != std::string::npos; ++at) {
    size_t from = at;
    while (from > 0 && std::isdigit(static_cast<unsigned char>(detail[from - 1]))) --from;
    n_slots += std::stoull(detail.substr(from, at - from));
  }
  EXPECT_GT(n_slots * per_layer[1], st.cache_bytes) << detail;
  EXPECT_GT(stats.misses, static_cast<uint64_t>(spec.n_layer) * spec.n_expert) << "the cache should evict and re-read";
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << detail;
}

// Certain prefetches (hash-routed layers) are read whatever the precision gate says, counted,
// and survive the eviction pressure of the layers that run before theirs; the same experts
// prefetched as an unordered set are evicted by it.
TEST(StreamMixed, CertainPrefetchesAreKeptUntilUsed) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-certain-" + std::to_string(getpid()));
  fs::create_directories(dir);
  setenv("SLUICE_HEAT_DIR", dir.c_str(), 1);
  GenSpec spec = mixed_spec();
  spec.type_experts_mixed.reset();
  const std::string path = (dir / "uniform.gguf").string();
  write_random_model(spec, path);
  auto file = gguf::File::open(path);
  auto model = load_model(*file);
  const int n_used = spec.n_expert_used;
  EngineOptions o;
  o.model_path = path;
  o.cold = true;
  o.lock_memory = false;
  o.cache_policy = EvictionPolicy::kLru;
  ExpertPlan plan;
  plan.memory.placement = Placement::kStream;
  // n_used + 3 slots: up to 3 can be reserved.
  plan.memory.cache_bytes = (n_used + 3) * (expert_bytes_per_layer(path)[0] + 3 * 2 * 4096);

  auto layer = [&](ExpertStore& store, int il, std::vector<int32_t> ids) {
    store.begin(il, ids);
    int index = 0;
    ExpertWeights w;
    while (store.next(&index, &w)) {
    }
    store.end();
  };
  auto scenario = [&](PrefetchHint hint) {
    auto store = make_expert_store(*file, *model, o, plan);
    const std::vector<int32_t> certain = {14, 15};
    store->prefetch(3, certain, hint);
    // Layers 0..2 read experts 0..3 each: 12 demand reads through the other slots.
    for (int il = 0; il < 3; ++il) layer(*store, il, {0, 1, 2, 3});
    const ExpertStoreStats before = store->stats();
    layer(*store, 3, certain);
    const ExpertStoreStats after = store->stats();
    return std::pair{after, after.misses - before.misses};
  };
  const auto [certain_stats, certain_misses] = scenario(PrefetchHint::kCertain);
  const auto [set_stats, set_misses] = scenario(PrefetchHint::kSet);
  fs::remove_all(dir);
  EXPECT_EQ(certain_stats.certain_issued, 2u);
  EXPECT_EQ(certain_stats.certain_used, 2u);
  EXPECT_EQ(certain_stats.prefetch_used, 2u);
  EXPECT_EQ(certain_misses, 0u) << "certain prefetches were evicted before their layer ran";
  EXPECT_EQ(set_stats.certain_issued, 0u);
  EXPECT_EQ(set_stats.prefetch_issued, 2u);
  EXPECT_EQ(set_misses, 2u) << "lru should have evicted the unreserved prefetches";
}

// One definition of a routed expert: the layout's file ranges cover every routed tensor of the
// file (gpt-oss expert biases included) exactly, so the placement counts each tensor once, as
// resident or as routed, and the stream store reads biases with their expert.
TEST(RoutedExperts, EveryTensorIsResidentOrRoutedOnce) {
  for (const char* name : {"gptoss-f32", "qwen3moe-f32", "deepseek4-q2"}) {
    const fs::path path = fs::path(SLUICE_TESTDATA) / "reference" / (std::string(name) + ".gguf");
    ASSERT_TRUE(fs::exists(path)) << path;
    auto file = gguf::File::open(path.string());
    auto model = load_model(*file);
    EngineOptions o;
    o.experts = ExpertMode::kRam;
    const ExpertPlan plan = plan_experts(*file, *model, o, *model->make_kv_cache(16), 16);
    uint64_t total = 0, biases = 0;
    for (const auto& t : file->tensors()) {
      total += t.nbytes;
      if (t.name.find("_exps.bias") != std::string::npos) biases += t.nbytes;
    }
    EXPECT_EQ(plan.facts.resident_bytes + plan.facts.routed_bytes, total) << name;
    const ExpertLayout& layout = model->expert_layout();
    // The file's classification (what inspect and the planner count) and the layout the store
    // streams agree on every routed byte.
    EXPECT_EQ(plan.facts.routed_bytes, layout.routed_bytes()) << name;
    uint64_t bias_ranges = 0;
    for (int il = 0; il < model->hparams().n_layer; ++il)
      if (layout.has_layer(il))
        for (int e = 0; e < layout.n_expert; ++e) {
          const ExpertRanges r = layout.file_ranges(il, e);
          bias_ranges += r[kGateBias].length + r[kUpBias].length + r[kDownBias].length;
          // The ranges point at the bytes the tensors view through the mmap.
          const gguf::TensorInfo* gate = file->find_tensor("blk." + std::to_string(il) + ".ffn_gate_exps.weight");
          ASSERT_NE(gate, nullptr);
          EXPECT_EQ(r[kGate].offset - gate->file_offset, static_cast<uint64_t>(layout.in_place(il, e).gate.data - gate->data));
        }
    EXPECT_EQ(bias_ranges, biases) << name;
    if (std::string(name) == "gptoss-f32") {
      EXPECT_GT(biases, 0u);
    }
  }
}

