// inspect's verdict is read off its memory plan, which is the plan Engine::load makes: on a GLM
// file whose nextn block the forward pass never reads (neither resident nor routed) and with
// several KV slots (each a full cache), the verdict, inspect's plan and the engine agree.
#include <gtest/gtest.h>

#include <string>

#include "gen/gen_model.h"
#include "gguf/gguf.h"
#include "plan/sizing.h"
#include "plan/tensor_class.h"
#include "sluice/sluice.h"
#include "test_util.h"

using namespace sluice;

namespace {

// glm-4.5-air cut down: one dense layer, three MoE layers and the preset's nextn block.
std::string glm_file() {
  GenSpec s = gen_preset("glm-4.5-air");
  s.n_layer = 4;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 512;
  s.n_ff_exp = 256;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_vocab = 2048;
  s.vocab_from = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
  const std::string path = (test::scratch_dir() / "verdict-glm.gguf").string();
  write_random_model(s, path);
  return path;
}

}  // namespace

TEST(InspectVerdict, AgreesWithThePlanAndTheEngineOnNextnLayersAndSlots) {
  const std::string path = glm_file();
  auto f = gguf::File::open(path);
  constexpr int kSlots = 4;
  constexpr int kCtx = 512;
  SizingOptions o;
  o.ctx = kCtx;
  o.slots = kSlots;
  o.ram = uint64_t{1} << 30;
  const ModelReport roomy = analyze_model(*f, o);
  ASSERT_EQ(roomy.first_mtp_layer, 4);
  uint64_t nextn_bytes = 0;
  for (const auto& t : f->tensors())
    if (layer_of(t.name).value_or(-1) >= roomy.first_mtp_layer) nextn_bytes += t.nbytes;
  ASSERT_GT(nextn_bytes, 0u);
  // The nextn block counts nowhere; every slot holds a full cache.
  EXPECT_EQ(roomy.verdict.resident, roomy.facts.resident_bytes);
  EXPECT_EQ(roomy.verdict.routed, roomy.facts.routed_bytes);
  EXPECT_EQ(roomy.verdict.resident + roomy.verdict.routed + nextn_bytes, roomy.total_bytes);
  EXPECT_EQ(roomy.verdict.kv, roomy.plan.kv_bytes);
  EXPECT_EQ(roomy.plan.kv_bytes, kSlots * roomy.kv.bytes);
  EXPECT_EQ(roomy.plan.placement, Placement::kRam);
  EXPECT_EQ(roomy.verdict.level, VerdictLevel::NearInRam);

  // A hard budget leaving the experts about half of their bytes (usable 95 %, margin an eighth of
  // a small budget): the plan streams through a cache of what is left, and the verdict's share of
  // the experts is the plan's fit fraction.
  const uint64_t fixed = roomy.facts.resident_bytes + roomy.plan.kv_bytes;
  const uint64_t ram = static_cast<uint64_t>(static_cast<double>(fixed + roomy.facts.routed_bytes / 2) / 0.825);
  o.ram = ram;
  const ModelReport tight = analyze_model(*f, o);
  ASSERT_EQ(tight.plan.placement, Placement::kStream) << tight.plan.reason;
  EXPECT_EQ(tight.verdict.expert_budget, tight.plan.cache_bytes);
  EXPECT_DOUBLE_EQ(tight.verdict.fraction, tight.plan.fit_fraction);
  EXPECT_GT(tight.verdict.fraction, 0.4);
  EXPECT_LT(tight.verdict.fraction, 0.7);
  EXPECT_EQ(tight.verdict.level, VerdictLevel::Usable);
  EXPECT_EQ(tight.verdict.flags, suggested_flags(tight.facts, tight.plan));
  // One slot more of KV than the plan has room for would be a different plan; the verdict follows.
  o.slots = 1;
  const ModelReport one = analyze_model(*f, o);
  EXPECT_GT(one.verdict.expert_budget, tight.verdict.expert_budget);
  EXPECT_EQ(one.verdict.expert_budget, one.plan.usable - one.plan.fixed);

  // Engine::load with that budget, context and slots does what the plan says.
  auto engine = Engine::load(
      {.model_path = path, .n_threads = 1, .n_ctx = kCtx, .kv_slots = kSlots, .mem_limit = ram});
  const ModelInfo& mi = engine->info();
  EXPECT_EQ(mi.experts_mode, "stream");
  EXPECT_EQ(mi.expert_cache_bytes, tight.plan.cache_bytes);
  EXPECT_EQ(mi.kv_bytes, tight.plan.kv_bytes);
  EXPECT_EQ(mi.resident_bytes, tight.verdict.resident);
  EXPECT_EQ(mi.routed_bytes, tight.verdict.routed);
}
