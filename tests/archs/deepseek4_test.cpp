// DeepSeek V4 on the reference model (testdata/reference/deepseek4-f32.gguf): the cache's state
// machine gives the same logits whatever the batching (one-shot prefill, token by token, chunks,
// two sequences in one batch), a session continuing or rewinding a prompt matches a fresh
// evaluation, and the engine's KV allocation is what `sluice inspect` estimates.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "kv/ds4_cache.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "plan/sizing.h"
#include "sluice/serving.h"
#include "sluice/sluice.h"

using namespace sluice;

namespace {

const std::string kModel = std::string(SLUICE_TESTDATA) + "/reference/deepseek4-f32.gguf";

std::vector<int32_t> prompt_tokens(size_t n) {
  std::ifstream in(std::string(SLUICE_TESTDATA) + "/reference/deepseek4-f32.prompt2.json");
  std::vector<int32_t> t = nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
  t.resize(std::min(n, t.size()));
  return t;
}

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<ExpertStore> experts;
};

Loaded load() {
  Loaded l;
  l.file = gguf::File::open(kModel);
  l.model = load_model(*l.file);
  l.experts = make_in_place_store(l.model->expert_layout(), "mmap");
  return l;
}

// Logits of every token of `toks` (sequence `seq`), evaluated in chunks of `chunk` tokens.
std::vector<float> run(Model& m, ExpertStore& experts, ThreadPool& pool, KvCache& kv, const std::vector<int32_t>& toks,
                       int chunk, int seq = 0) {
  std::vector<float> all, out;
  for (size_t s = 0; s < toks.size(); s += chunk) {
    Batch b;
    for (size_t i = s; i < std::min(toks.size(), s + chunk); ++i)
      b.add(toks[i], static_cast<int32_t>(i), seq, true);
    m.forward(pool, b, kv, experts, out);
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

class Deepseek4 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not found";
  }
};

}  // namespace

TEST_F(Deepseek4, DecodeTokenByTokenEqualsOneShotPrefill) {
  // 300 tokens: past the window (64), two ratio-128 blocks, indexer choosing 16 of up to 75 blocks.
  Loaded l = load();
  ThreadPool pool(2);
  const std::vector<int32_t> toks = prompt_tokens(300);
  auto kv1 = l.model->make_kv_cache(512), kv2 = l.model->make_kv_cache(512),
       kv3 = l.model->make_kv_cache(512);
  const std::vector<float> once = run(*l.model, *l.experts, pool, *kv1, toks, 300);
  const std::vector<float> single = run(*l.model, *l.experts, pool, *kv2, toks, 1);
  const std::vector<float> chunks = run(*l.model, *l.experts, pool, *kv3, toks, 37);
  EXPECT_LE(max_diff(once, single), 1e-4);
  EXPECT_LE(max_diff(once, chunks), 1e-4);
  EXPECT_EQ(kv1->length(0), 300);
}

TEST_F(Deepseek4, TwoSequencesInOneBatchEqualSeparateRuns) {
  Loaded l = load();
  ThreadPool pool(2);
  const std::vector<int32_t> all = prompt_tokens(400);
  const std::vector<int32_t> a(all.begin(), all.begin() + 150),
      b(all.begin() + 200, all.begin() + 400);
  auto kva = l.model->make_kv_cache(512), kvb = l.model->make_kv_cache(512);
  const std::vector<float> ra = run(*l.model, *l.experts, pool, *kva, a, 150);
  const std::vector<float> rb = run(*l.model, *l.experts, pool, *kvb, b, 200);
  // Shared cache, sequence ids 3 and 1; steps of 50 tokens of each, interleaved in one batch.
  auto kv = l.model->make_kv_cache(512);
  std::vector<float> ja, jb, out;
  const int64_t n_vocab = l.model->hparams().n_vocab;
  for (int s = 0; s < 200; s += 50) {
    Batch batch;
    for (int i = s; i < std::min(s + 50, 150); ++i) batch.add(a[i], i, 3, true);
    const int na = static_cast<int>(batch.size());
    for (int i = s; i < s + 50; ++i) batch.add(b[i], i, 1, true);
    l.model->forward(pool, batch, *kv, *l.experts, out);
    ja.insert(ja.end(), out.begin(), out.begin() + na * n_vocab);
    jb.insert(jb.end(), out.begin() + na * n_vocab, out.end());
  }
  EXPECT_LE(max_diff(ra, ja), 1e-4);
  EXPECT_LE(max_diff(rb, jb), 1e-4);
  // A copied prefix continues like the original, bit for bit.
  kv->copy_prefix(1, 5, 200);
  EXPECT_EQ(kv->length(5), 200);
  auto continue_seq = [&](int seq) {
    std::vector<float> got, step;
    for (int i = 200; i < 210; ++i) {
      Batch batch;
      batch.add(all[i], i, seq, true);
      l.model->forward(pool, batch, *kv, *l.experts, step);
      got.insert(got.end(), step.begin(), step.end());
    }
    return got;
  };
  const std::vector<float> copied = continue_seq(5);
  EXPECT_EQ(max_diff(continue_seq(1), copied), 0.0);
}

TEST_F(Deepseek4, CacheKeepsShortRewindsAndRestartsLongOnes) {
  Loaded l = load();
  ThreadPool pool(2);
  const std::vector<int32_t> toks = prompt_tokens(200);
  auto kv = l.model->make_kv_cache(512);
  run(*l.model, *l.experts, pool, *kv, toks, 200);
  kv->truncate(0, 200 - Ds4CacheShape::kRollback);
  EXPECT_EQ(kv->length(0), 200 - Ds4CacheShape::kRollback);
  kv->truncate(0, 100);
  EXPECT_EQ(kv->length(0), 0);  // the rings no longer hold what position 100 needs
  // A step that starts writing and never finishes (an exception mid-forward) leaves nothing usable.
  run(*l.model, *l.experts, pool, *kv, toks, 200);
  static_cast<Ds4KvCache&>(*kv).begin_step(0);
  EXPECT_EQ(kv->length(0), 0);
  kv->truncate(0, 150);
  EXPECT_EQ(kv->length(0), 0);
}

TEST_F(Deepseek4, SessionContinuingOrRewindingMatchesFreshEvaluation) {
  EngineOptions eo;
  eo.model_path = kModel;
  eo.n_ctx = 512;
  eo.n_threads = 2;
  auto engine = Engine::load(eo);
  const std::vector<int32_t> toks = prompt_tokens(320);
  auto fresh = [&](size_t n) {
    auto s = engine->new_session();
    auto l = s->evaluate(std::span<const int32_t>(toks.data(), n));
    return std::vector<float>(l.begin(), l.end());
  };
  auto session = engine->new_session();
  for (size_t n :
       {200, 320, 310, 311, 90, 250}) {  // continue, rewind ≤ 16, step, long rewind, continue
    auto l = session->evaluate(std::span<const int32_t>(toks.data(), n));
    const std::vector<float> got(l.begin(), l.end());
    EXPECT_LE(max_diff(got, fresh(n)), 1e-4) << "prompt of " << n << " tokens";
  }
}

TEST_F(Deepseek4, EngineAllocationEqualsInspectEstimate) {
  auto file = gguf::File::open(kModel);
  SizingOptions so;
  so.ctx = 1024;
  so.ram = uint64_t{1} << 40;
  const ModelReport r = analyze_model(*file, so);
  // 2 ratio-4 layers × (128 + 64) / 4 + 2 ratio-128 layers × 128 / 128 = 98 floats per token.
  EXPECT_EQ(r.kv.bytes_per_token, 98u * 4);
  Loaded l = load();
  auto kv = l.model->make_kv_cache(1024);
  EXPECT_EQ(kv->bytes_per_position(), r.kv.bytes_per_token);
  EXPECT_EQ(kv->bytes_for(1024), r.kv.bytes);
  ThreadPool pool(2);
  run(*l.model, *l.experts, pool, *kv, prompt_tokens(512), 512);
  EXPECT_EQ(kv->allocated_bytes(), r.kv.fixed_bytes + 512 * r.kv.bytes_per_token);

  EngineOptions eo;
  eo.model_path = kModel;
  eo.n_ctx = 1024;
  EXPECT_EQ(Engine::load(eo)->info().kv_bytes, r.kv.bytes);
}

TEST_F(Deepseek4, SchedulerBatchesSequencesLikeSessions) {
  // Three prompts sharing prefixes (the scheduler copies or truncates a slot's cache), prefilled in
  // chunks mixed with the others' decode rows: greedy tokens equal Session::generate alone.
  using namespace std::chrono_literals;
  EngineOptions eo;
  eo.model_path = kModel;
  eo.n_ctx = 512;
  eo.n_threads = 2;
  auto engine = Engine::load(eo);
  const std::vector<int32_t> toks = prompt_tokens(300);
  const std::vector<std::vector<int32_t>> prompts = {{toks.begin(), toks.begin() + 150},
                                                     {toks.begin(), toks.begin() + 230},
                                                     {toks.begin() + 40, toks.begin() + 140}};
  GenerateOptions g;
  g.max_tokens = 8;
  g.sampling.temperature = 0;
  g.stop_at_eog = false;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts)
    alone.push_back(engine->new_session()->generate(p, g, nullptr).tokens);
  Scheduler sched(*engine, {.n_parallel = 2, .max_queue = 4, .prefill_chunk = 40});
  for (int round = 0; round < 2; ++round) {  // the second round reuses the slots' cached prefixes
    std::vector<std::shared_ptr<CompletionHandle>> handles;
    for (const auto& p : prompts)
      handles.push_back(sched.submit({.prompt = p, .options = g}).handle);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CompletionEvent ev;
      bool done = false;
      for (int k = 0; k < 1200 && !done; ++k)
        done = handles[i]->next(ev, 100ms) && ev.kind != CompletionEvent::Kind::kText;
      ASSERT_TRUE(done) << "request " << i;
      ASSERT_EQ(ev.kind, CompletionEvent::Kind::kDone) << ev.text;
      EXPECT_EQ(ev.result.tokens, alone[i]) << "round " << round << " request " << i;
    }
  }
}
