// Routing traces: a trace written by the engine holds one record per evaluated row with its token,
// position and forward pass; a trace written while the shipped model runs, replayed into the same model over
// other tokens, makes exactly the recorded calls to the expert store (every request and every
// lookahead prefetch, in order), which those tokens alone do not; a trace of fixed experts replayed
// through the engine drives the streaming store to those experts only; bad combinations are precise
// errors.
#include "experts/routing_trace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "runtime/routing_taps.h"
#include "sluice/sluice.h"

using namespace sluice;

namespace {

std::string model_path() {
  return std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";
}

EngineOptions streamed() {
  EngineOptions eo;
  eo.model_path = model_path();
  eo.n_ctx = 128;
  eo.experts = ExpertMode::kStream;
  eo.cache_bytes = 3ull << 20;  // about a quarter of the routed experts
  eo.cold = true;               // no heat-profile preload: both runs start from an empty cache
  eo.lock_memory = false;
  return eo;
}

// A prompt evaluated in one pass, then greedy decoding one row per pass.
struct Outcome {
  std::vector<int32_t> prompt, generated;
  ExpertStats stats;
  std::string routing;  // ModelInfo::routing
};
Outcome drive(const EngineOptions& eo) {
  auto engine = Engine::load(eo);
  Outcome o;
  o.prompt = engine->tokenize("And the king said unto his servants, Go ye and see", false);
  GenerateOptions go;
  go.max_tokens = 24;
  go.sampling.temperature = 0;
  go.stop_at_eog = false;
  go.draft.mode = DraftMode::kNone;
  o.generated = engine->new_session()->generate(o.prompt, go, {}).tokens;
  o.stats = engine->expert_stats();
  o.routing = engine->info().routing;
  return o;
}

TEST(RoutingTrace, HoldsEveryEvaluatedRow) {
  const std::string trace = (test::scratch_dir() / "shipped.trace").string();
  EngineOptions rec = streamed();
  rec.routing_trace = trace;
  const Outcome a = drive(rec);
  EXPECT_NE(a.routing.find("routing trace written to"), std::string::npos) << a.routing;

  const RoutingTrace t = read_routing_trace(trace);
  EXPECT_EQ(t.n_layer, 6);
  EXPECT_EQ(t.n_expert, 16);
  EXPECT_EQ(t.n_used, 2);
  EXPECT_TRUE(t.has_predictions);
  // The prompt's rows, then one row per decode step (the last sampled token is never evaluated).
  ASSERT_EQ(t.n_rows(), a.prompt.size() + a.generated.size() - 1);
  for (size_t r = 0; r < t.n_rows(); ++r) {
    EXPECT_EQ(t.rows[r].pos, static_cast<int32_t>(r));
    // The prompt is one pass (its rows after the first join it); each decode step is its own.
    EXPECT_EQ(t.rows[r].joins_pass, r > 0 && r < a.prompt.size()) << "row " << r;
    const int32_t want = r < a.prompt.size() ? a.prompt[r] : a.generated[r - a.prompt.size()];
    EXPECT_EQ(t.rows[r].token, want) << "row " << r;
  }
  for (int il = 0; il < t.n_layer; ++il) EXPECT_TRUE(t.layer_routed(il));
  // Layer 0 has no lookahead (nothing before it predicts it); the others do.
  EXPECT_EQ(t.predicted_at(0, 0)[0], kNoExpert);
  EXPECT_NE(t.predicted_at(0, 1)[0], kNoExpert);
}

// An in-place store that logs every call the model makes to it.
class LoggingStore final : public ExpertStore {
 public:
  LoggingStore(const ExpertLayout& layout, std::vector<std::string>& log)
      : inner_(make_in_place_store(layout, "ram")), log_(log) {}
  void begin(int il, std::span<const int32_t> ids) override {
    log_.push_back(line("begin", il, ids));
    inner_->begin(il, ids);
  }
  bool next(int* index, ExpertWeights* w) override { return inner_->next(index, w); }
  void end() override { inner_->end(); }
  bool handed_weights_persist() const override { return inner_->handed_weights_persist(); }
  void prefetch(int il, std::span<const int32_t> ids, PrefetchHint hint) override {
    log_.push_back(line(hint == PrefetchHint::kRanked ? "ranked" : "set", il, ids));
  }
  std::string describe() const override { return "logging"; }

 private:
  static std::string line(const char* what, int il, std::span<const int32_t> ids) {
    std::string s = std::string(what) + " L" + std::to_string(il) + ":";
    for (const int32_t e : ids) s += " " + std::to_string(e);
    return s;
  }
  std::unique_ptr<ExpertStore> inner_;
  std::vector<std::string>& log_;
};

TEST(RoutingTrace, ReplayedTraceMakesTheSameStoreCalls) {
  auto file = gguf::File::open(model_path());
  auto model = load_model(*file);
  model->set_prefetch(true);
  ThreadPool pool(2);
  const HParams& hp = model->hparams();
  // A 9-token prefill, then 6 single-token steps (teacher-forced).
  const std::vector<int32_t> tokens{100, 2000, 37, 512, 9,  4000, 77, 1234,
                                    5,   60,   61, 62,  63, 64,   65};
  std::vector<int32_t> others(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) others[t] = (tokens[t] * 7 + 311) % hp.n_vocab;
  auto run = [&](RoutingTap* tap, const std::vector<int32_t>& tokens,
                 std::vector<std::string>& log) {
    model->set_routing_tap(tap);
    LoggingStore store(model->expert_layout(), log);
    auto kv = model->make_kv_cache(64);
    std::vector<float> logits;
    Batch b;
    for (int t = 0; t < 9; ++t) b.add(tokens[t], t, 0, t == 8);
    model->forward(pool, b, *kv, store, logits);
    for (int t = 9; t < static_cast<int>(tokens.size()); ++t) {
      b.clear();
      b.add(tokens[t], t, 0, true);
      model->forward(pool, b, *kv, store, logits);
    }
    model->set_routing_tap(nullptr);
  };
  const std::string trace = (test::scratch_dir() / "model.trace").string();
  std::vector<std::string> recorded, replayed, own;
  {
    auto rec = make_trace_recorder(trace, hp.n_layer, hp.n_expert, hp.n_expert_used, true);
    run(rec.get(), tokens, recorded);
  }  // the trace is complete when the recorder goes
  std::vector<int> routed;
  for (int il = 0; il < hp.n_layer; ++il) routed.push_back(il);
  std::string what;
  auto rep = make_routing_replay(trace, hp.n_expert, hp.n_expert_used, routed, &what);
  run(rep.get(), others, replayed);
  run(nullptr, others, own);
  EXPECT_EQ(read_routing_trace(trace).n_rows(), tokens.size());
  ASSERT_EQ(recorded.size(), 7u * hp.n_layer + 7u * (hp.n_layer - 1));  // requests + lookaheads
  EXPECT_EQ(replayed, recorded);
  EXPECT_NE(own, recorded);
}

TEST(RoutingTrace, ReplayDrivesTheStoreToTheTracesExperts) {
  // Every row routes to experts 3 and 9 of every layer: after the first pass all are hits.
  RoutingTrace t;
  t.n_layer = 4;
  t.n_expert = 16;
  t.n_used = 2;
  for (int r = 0; r < 3; ++r) {
    t.rows.push_back({0, r, 0});
    for (int il = 0; il < 4; ++il) t.chosen.insert(t.chosen.end(), {3, 9});
  }
  const std::string path = (test::scratch_dir() / "fixed.trace").string();
  write_routing_trace(path, t);
  EngineOptions eo = streamed();
  eo.replay_routing = path;
  eo.prefetch = false;
  const Outcome o = drive(eo);
  EXPECT_NE(o.routing.find("not the model's"), std::string::npos) << o.routing;
  // 6 layers (the trace's 4 cycled), 2 experts each, read once and then always found.
  EXPECT_EQ(o.stats.misses, 6u * 2);
  EXPECT_EQ(o.stats.requests, o.stats.misses + o.stats.hits);
  EXPECT_GT(o.stats.hits, 6u * 2 * 20);
}

TEST(RoutingTrace, WritingAndReplayingTogetherIsAnError) {
  EngineOptions eo = streamed();
  eo.routing_trace = (test::scratch_dir() / "x.trace").string();
  eo.replay_routing = (test::scratch_dir() / "fixed.trace").string();
  try {
    Engine::load(eo);
    FAIL() << "both taps were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("together"), std::string::npos) << e.what();
  }
}

}  // namespace
