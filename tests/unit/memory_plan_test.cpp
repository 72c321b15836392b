// The memory planner as a pure function (placement, cache size, margins, reasons, the decode
// estimate), and the promise it exists for: `inspect` plans exactly what Engine::load does.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "plan/memory_plan.h"
#include "plan/sizing.h"
#include "sluice/sluice.h"
#include "test_util.h"

using namespace sluice;

namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

MemoryFacts facts() {
  MemoryFacts f;
  f.resident_bytes = 500 * kMiB;
  f.routed_bytes = 4 * kGiB;
  f.expert_bytes = 2 * kMiB;
  f.n_expert = 128;
  f.n_expert_used = 8;
  f.kv_bytes_per_token = 16384;
  return f;
}

PlanRequest hard(uint64_t bytes, int64_t ctx = 4096) { return {.budget = {bytes, true, "--mem-limit"}, .n_ctx = ctx}; }

}  // namespace

TEST(MemoryPlan, StreamsWhatDoesNotFitWithTheRestOfTheBudget) {
  const MemoryPlan p = plan_memory(facts(), hard(2 * kGiB));
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_EQ(p.placement, Placement::kStream);
  EXPECT_EQ(p.usable, 2 * kGiB / 100 * 95);
  EXPECT_EQ(p.margin, 256 * kMiB);
  EXPECT_EQ(p.kv_bytes, 16384ull * 4096);
  EXPECT_EQ(p.fixed, 500 * kMiB + 64 * kMiB + 256 * kMiB);
  EXPECT_EQ(p.cache_bytes, p.usable - p.fixed);
  EXPECT_EQ(p.headroom, 0u);
  EXPECT_DOUBLE_EQ(p.fit_fraction, static_cast<double>(p.cache_bytes) / (4 * kGiB));
  EXPECT_EQ(p.reason, "95 % of --mem-limit (2.00 GiB) minus resident weights, KV and margin");
}

TEST(MemoryPlan, RamWhenEverythingFitsAndSharedBudgetsUseEightyPercent) {
  MemoryPlan p = plan_memory(facts(), hard(8 * kGiB));
  EXPECT_EQ(p.placement, Placement::kRam);
  EXPECT_EQ(p.cache_bytes, 0u);
  EXPECT_EQ(p.headroom, p.usable - p.fixed - 4 * kGiB);
  EXPECT_EQ(p.reason.rfind("the model fits in 95 % of --mem-limit", 0), 0u) << p.reason;
  // The same 8 GiB as MemAvailable (shared) leaves 80 %: not enough for all experts.
  PlanRequest shared = hard(6 * kGiB);
  shared.budget.hard = false;
  shared.budget.source = "available memory";
  p = plan_memory(facts(), shared);
  EXPECT_EQ(p.usable, 6 * kGiB / 100 * 80);
  EXPECT_EQ(p.placement, Placement::kStream);
  EXPECT_EQ(p.reason.rfind("80 % of available memory", 0), 0u) << p.reason;
}

TEST(MemoryPlan, SlotsAndContextScaleTheKvCache) {
  PlanRequest r = hard(2 * kGiB, 1000);
  r.n_slots = 3;
  const MemoryPlan p = plan_memory(facts(), r);
  EXPECT_EQ(p.kv_bytes, 16384ull * 1000 * 3);
  EXPECT_EQ(p.cache_bytes, p.usable - (500 * kMiB + p.kv_bytes + 256 * kMiB));
}

// A server's own threads (EngineOptions::overhead_bytes) are a fixed cost like the KV cache: the
// expert cache gets what is left after them (issue 34: the soak peaked at its cgroup limit).
TEST(MemoryPlan, FrontEndOverheadIsSetAsideBeforeTheCache) {
  PlanRequest r = hard(2 * kGiB);
  const MemoryPlan without = plan_memory(facts(), r);
  r.overhead = 21 * kMiB;
  const MemoryPlan with = plan_memory(facts(), r);
  ASSERT_TRUE(with.ok) << with.reason;
  EXPECT_EQ(with.overhead, 21 * kMiB);
  EXPECT_EQ(with.fixed, without.fixed + 21 * kMiB);
  EXPECT_EQ(with.cache_bytes, without.cache_bytes - 21 * kMiB);
  EXPECT_EQ(with.reason, "95 % of --mem-limit (2.00 GiB) minus resident weights, KV, front-end overhead and margin");
  // Too much of it for the budget is refused, saying how much it was.
  r.overhead = 2 * kGiB;
  const MemoryPlan none = plan_memory(facts(), r);
  EXPECT_FALSE(none.ok);
  EXPECT_NE(none.reason.find("2.00 GiB of front-end overhead"), std::string::npos) << none.reason;
}

TEST(MemoryPlan, SmallBudgetsKeepAnEighthAsMargin) {
  MemoryFacts f = facts();
  f.resident_bytes = 10 * kMiB;
  f.kv_bytes_per_token = 0;
  const MemoryPlan p = plan_memory(f, hard(800 * kMiB));
  EXPECT_EQ(p.margin, 100 * kMiB);
  EXPECT_EQ(p.cache_bytes, 800 * kMiB / 100 * 95 - 110 * kMiB);
}

TEST(MemoryPlan, ForcedModesAndExplicitCache) {
  PlanRequest r = hard(8 * kGiB);
  r.forced = Placement::kMmap;
  MemoryPlan p = plan_memory(facts(), r);
  EXPECT_EQ(p.placement, Placement::kMmap);
  EXPECT_EQ(p.reason, "set by --experts");
  r.forced = Placement::kStream;
  p = plan_memory(facts(), r);
  EXPECT_EQ(p.placement, Placement::kStream);
  EXPECT_EQ(p.cache_bytes, 4 * kGiB + 64 * kMiB);  // capped: more than every expert buys nothing
  // An explicit cache size means streaming in auto mode, at that size.
  r.forced.reset();
  r.cache_bytes = 300 * kMiB;
  p = plan_memory(facts(), r);
  EXPECT_EQ(p.placement, Placement::kStream);
  EXPECT_EQ(p.cache_bytes, 300 * kMiB);
  EXPECT_EQ(p.reason, "cache size set by --ssd-streaming-cache-experts");
  // No routed experts: nothing to stream.
  MemoryFacts dense = facts();
  dense.routed_bytes = 0;
  r.cache_bytes = 0;
  r.forced = Placement::kStream;
  EXPECT_EQ(plan_memory(dense, r).placement, Placement::kRam);
}

TEST(MemoryPlan, BudgetTooSmallForTheFixedCostsIsRefusedWithTheNumbers) {
  const MemoryPlan p = plan_memory(facts(), hard(512 * kMiB));
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.placement, Placement::kStream);
  EXPECT_NE(p.reason.find("leaves no room for an expert cache after 500.00 MiB of resident weights"), std::string::npos)
      << p.reason;
  EXPECT_EQ(suggested_flags(facts(), p), "--experts stream");
}

TEST(MemoryPlan, BudgetFromTheSystem) {
  MemInfo mi;
  EXPECT_EQ(memory_budget(mi, 3 * kGiB, "--mem-limit").bytes, 3 * kGiB);
  EXPECT_TRUE(memory_budget(mi, 3 * kGiB, "--mem-limit").hard);
  const MemoryBudget unknown = memory_budget(mi, 0, "");
  EXPECT_EQ(unknown.bytes, 8 * kGiB);
  EXPECT_FALSE(unknown.hard);
  mi.mem_available = 10 * kGiB;
  EXPECT_FALSE(memory_budget(mi, 0, "").hard);
  EXPECT_EQ(memory_budget(mi, 0, "").source, "available memory");
  mi.cgroup_limit = 4 * kGiB;
  mi.cgroup_usage = 1 * kGiB;  // 3 GiB headroom binds before 10 GiB available
  const MemoryBudget cg = memory_budget(mi, 0, "");
  EXPECT_TRUE(cg.hard);
  EXPECT_EQ(cg.bytes, 3 * kGiB);
  EXPECT_EQ(cg.source, "the cgroup limit's headroom");
}

TEST(MemoryPlan, DecodeEstimateFromFitFractionAndDiskRate) {
  const MemoryFacts f = facts();
  const MemoryPlan p = plan_memory(f, hard(2 * kGiB));
  const DecodeEstimate d = estimate_decode(f, p, 1e9);
  EXPECT_DOUBLE_EQ(d.hit_rate, p.fit_fraction);
  // Active routed bytes per token: 8 of 128 experts of the 4 GiB; misses are the rest of the hits.
  const double active = 4.0 * kGiB * 8 / 128;
  EXPECT_EQ(d.miss_bytes_per_token, static_cast<uint64_t>(active * (1 - p.fit_fraction)));
  EXPECT_DOUBLE_EQ(d.io_tokens_per_second, 1e9 / static_cast<double>(d.miss_bytes_per_token));
  EXPECT_DOUBLE_EQ(d.tokens_per_second, d.io_tokens_per_second);  // the I/O ceiling without compute
  // With the in-RAM decode speed, a token costs its compute plus its reads.
  const DecodeEstimate c = estimate_decode(f, p, 1e9, 10.0);
  EXPECT_DOUBLE_EQ(c.tokens_per_second, 1.0 / (0.1 + static_cast<double>(d.miss_bytes_per_token) / 1e9));
  EXPECT_EQ(estimate_decode(f, p, 0).tokens_per_second, 0);  // no disk rate, no estimate
  const DecodeEstimate ram = estimate_decode(f, plan_memory(f, hard(16 * kGiB)), 1e9);
  EXPECT_EQ(ram.miss_bytes_per_token, 0u);
  EXPECT_EQ(ram.tokens_per_second, 0);
  EXPECT_DOUBLE_EQ(estimate_decode(f, plan_memory(f, hard(16 * kGiB)), 1e9, 7.5).tokens_per_second, 7.5);
  // A file's expert_used_count outside 0..expert_count (found by the GGUF fuzzer: inspect plans
  // any file) reads none or all of the routed bytes rather than a negative or impossible amount.
  MemoryFacts odd = f;
  odd.n_expert_used = -7;
  EXPECT_EQ(estimate_decode(odd, p, 1e9).miss_bytes_per_token, 0u);
  odd.n_expert_used = 1000;
  EXPECT_EQ(estimate_decode(odd, p, 1e9).miss_bytes_per_token,
            static_cast<uint64_t>(4.0 * kGiB * (1 - p.fit_fraction)));
}

TEST(MemoryPlan, SuggestedFlagsSayWhatTheEngineDoes) {
  EXPECT_EQ(suggested_flags(facts(), plan_memory(facts(), hard(16 * kGiB))), "--experts ram");
  const MemoryPlan s = plan_memory(facts(), hard(2 * kGiB));
  EXPECT_EQ(suggested_flags(facts(), s), "--experts stream --ssd-streaming-cache-experts " + format_flag_size(s.cache_bytes));
  MemoryFacts dense = facts();
  dense.routed_bytes = 0;
  EXPECT_EQ(suggested_flags(dense, plan_memory(dense, hard(16 * kGiB))), "");
}

// The same per stored KV type (and with gpt-oss's rings, at a context longer than a ring).
TEST(MemoryPlan, InspectPlansWhatEngineLoadDoesPerKvType) {
  for (const char* rel : {"reference/gptoss-mxfp4.gguf", "reference/deepseek2-q8_0.gguf"}) {
    const std::string path = test::testdata(rel);
    auto file = gguf::File::open(path);
    const uint64_t budget = uint64_t{256} << 20;
    for (KvType t : {KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0}) {
      SCOPED_TRACE(std::string(rel) + " " + kv_type_name(t));
      SizingOptions o{1024, budget, 2};
      o.kv = engine_kv_config(t, KvType::kQ8_0);
      const ModelReport r = analyze_model(*file, o);
      auto engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 1024, .kv_slots = 2, .mem_limit = budget,
                                  .cold = true, .lock_memory = false, .kv_type_k = t, .kv_type_v = KvType::kQ8_0});
      EXPECT_EQ(engine->info().kv_bytes, r.plan.kv_bytes);
      EXPECT_EQ(engine->info().expert_cache_bytes, r.plan.cache_bytes);
      EXPECT_EQ(r.plan.kv_bytes, 2 * r.kv.bytes);
    }
  }
}

// deepseek4's keys are its values: inspect refuses a value type other than the key type with the
// engine's message, and sizes a q8_0 cache.
TEST(MemoryPlan, InspectRefusesKvTypesTheEngineRefuses) {
  const std::string path = test::testdata("reference/deepseek4-f32.gguf");
  auto file = gguf::File::open(path);
  SizingOptions o{512, uint64_t{256} << 20, 1};
  o.kv = engine_kv_config(KvType::kF32, KvType::kQ8_0);
  std::string inspect_err, engine_err;
  try {
    analyze_model(*file, o);
  } catch (const Error& e) {
    inspect_err = e.what();
  }
  try {
    Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 512, .kv_type_v = KvType::kQ8_0});
  } catch (const Error& e) {
    engine_err = e.what();
  }
  EXPECT_NE(inspect_err.find("--cache-type-v q8_0"), std::string::npos) << inspect_err;
  EXPECT_NE(engine_err.find(inspect_err), std::string::npos) << engine_err;
  o.kv = engine_kv_config(KvType::kF32, KvType::kF32);
  const uint64_t f32 = analyze_model(*file, o).kv.bytes;
  o.kv = engine_kv_config(KvType::kQ8_0, KvType::kQ8_0);
  const uint64_t q8 = analyze_model(*file, o).kv.bytes;
  EXPECT_GT(f32, 0u);
  EXPECT_LT(q8 * 3, f32 * 2) << "q8_0 rows should be ~0.27x f32; states stay f32";
}

// inspect --ram B and run --mem-limit B on the same file and context: same placement, cache and KV.
TEST(MemoryPlan, InspectPlansWhatEngineLoadDoes) {
  for (const char* rel : {"reference/qwen3moe-256-q4km.gguf", "reference/gptoss-mxfp4.gguf",
                          "reference/glm4moe-f32.gguf", "reference/deepseek2-q8_0.gguf"}) {
    const std::string path = test::testdata(rel);
    auto file = gguf::File::open(path);
    const MemoryFacts f = memory_facts(*file);
    // Budgets around the model: too small, streaming, and everything in RAM.
    const uint64_t base = f.resident_bytes + f.routed_bytes;
    for (uint64_t budget : {base / 2, base, base + base / 4, 4 * base}) {
      SCOPED_TRACE(std::string(rel) + " budget " + std::to_string(budget));
      const ModelReport r = analyze_model(*file, {.ctx = 64, .ram = budget});
      std::string error;
      std::unique_ptr<Engine> engine;
      try {
        engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 64, .mem_limit = budget, .cold = true,
                               .lock_memory = false});
      } catch (const Error& e) {
        error = e.what();
      }
      if (!r.plan.ok) {
        // The same refusal with the same numbers; only the flag named as the budget's source differs.
        std::string expected = r.plan.reason;
        expected.replace(expected.find("--ram"), 5, "--mem-limit");
        EXPECT_EQ(error, expected);
        continue;
      }
      ASSERT_TRUE(engine) << error;
      EXPECT_EQ(engine->info().experts_mode, placement_name(r.plan.placement));
      EXPECT_EQ(engine->info().expert_cache_bytes, r.plan.cache_bytes);
      EXPECT_EQ(engine->info().kv_bytes, r.plan.kv_bytes);
      EXPECT_EQ(engine->info().resident_bytes, r.facts.resident_bytes);
      EXPECT_EQ(engine->info().routed_bytes, r.facts.routed_bytes);
    }
  }
  // Serving slots: each reserves a full KV cache in both.
  const std::string path = test::testdata("reference/qwen3moe-256-q4km.gguf");
  auto file = gguf::File::open(path);
  const MemoryFacts f = memory_facts(*file);
  const uint64_t budget = f.resident_bytes + f.routed_bytes;
  const ModelReport r = analyze_model(*file, {.ctx = 64, .ram = budget, .slots = 3});
  auto engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 64, .kv_slots = 3, .mem_limit = budget,
                              .cold = true, .lock_memory = false});
  EXPECT_EQ(r.plan.kv_bytes, 3 * 64 * f.kv_bytes_per_token);
  EXPECT_EQ(engine->info().kv_bytes, r.plan.kv_bytes);
  EXPECT_EQ(engine->info().expert_cache_bytes, r.plan.cache_bytes);
}

// Expert parallel: each rank reads (and plans for) only its rows of an untied output head, the
// ranks' rows together being the head once; a head tied to the token embedding stays whole on
// every rank (each embeds its input tokens from it).
TEST(MemoryPlan, ExpertParallelRanksLeaveOutTheOtherRanksHeadRows) {
  auto untied = gguf::File::open(test::testdata("reference/qwen3moe-256-q8_0.gguf"));
  const gguf::TensorInfo* head = untied->find_tensor("output.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(unread_head_bytes(*untied, 0, 1), 0u);
  for (int n : {2, 3, 5}) {
    uint64_t read = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t unread = unread_head_bytes(*untied, r, n);
      EXPECT_LT(unread, head->nbytes);
      EXPECT_EQ((head->nbytes - unread) % head->row_bytes(), 0u) << "whole rows";
      read += head->nbytes - unread;
    }
    EXPECT_EQ(read, head->nbytes) << n << " ranks";
  }
  EXPECT_EQ(unread_head_bytes(*untied, 0, 2), head->nbytes - head->row_bytes() * (head->ne[1] / 2));
  auto tied = gguf::File::open(test::testdata("reference/qwen3moe-f32.gguf"));
  ASSERT_EQ(tied->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(unread_head_bytes(*tied, 0, 2), 0u);
}
