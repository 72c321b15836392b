// The KV cache a loaded model makes is the one the planner sizes (estimate_kv), for every
// reference model (one or more per architecture) and stored type: both come from the
// architecture's rule (kv_shape in archs/registry.h), so a family that sized its cache on its
// own, or a rule that disagreed with the layers' attention, fails here. A forward pass over each
// cache shows that its layout is the one the layers write (their internal checks throw
// otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "kv/ds4_cache.h"
#include "model/archs/registry.h"
#include "model/hparams.h"
#include "model/model.h"
#include "plan/sizing.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

const fs::path kRef = fs::path(SLUICE_TESTDATA) / "reference";

std::vector<fs::path> reference_models() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kRef))
    if (e.path().extension() == ".gguf") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(KvShape, EveryReferenceModelsCacheIsThePlannersEstimate) {
  const std::vector<fs::path> models = reference_models();
  ASSERT_FALSE(models.empty()) << kRef;
  std::set<std::string> archs;
  for (const fs::path& path : models) {
    SCOPED_TRACE(path.filename().string());
    auto file = gguf::File::open(path.string());
    const ModelSummary summary = read_model_summary(*file);
    archs.insert(summary.arch);
    auto model = load_model(*file);
    const int n_layer = model->hparams().n_layer;
    const bool compressed = kv_kind(summary) == KvKind::kCompressed;
    for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0}) {
      // The engine's configuration (windowed layers as rings) and an unbounded one (full length).
      for (const KvCacheConfig& config : {engine_kv_config(t, t), KvCacheConfig{t, t, 0}}) {
        SCOPED_TRACE(std::string(kv_type_name(t)) + " step " + std::to_string(config.max_step));
        for (int ctx : {1, 300, 4096}) {
          const KvEstimate est = estimate_kv(summary, ctx, config);
          const auto cache = model->make_kv_cache(ctx, config);
          EXPECT_EQ(est.n_layer, n_layer);
          EXPECT_GT(est.bytes_per_token, 0u);
          EXPECT_EQ(cache->bytes_per_position(), est.bytes_per_token);
          EXPECT_EQ(cache->bytes_for(0), est.fixed_bytes);
          EXPECT_EQ(cache->bytes_for(ctx), est.bytes);
          EXPECT_EQ(est.values_are_keys, kv_kind(summary) != KvKind::kHeads);
          if (compressed) {
            const auto* ds4 = dynamic_cast<const Ds4KvCache*>(cache.get());
            ASSERT_NE(ds4, nullptr);
            EXPECT_EQ(static_cast<int>(ds4->shape().ratio.size()), n_layer);
          } else {
            EXPECT_EQ(cache->n_layer(), n_layer);
          }
        }
      }
    }

    // The layers write and read the cache the rule laid out (their checks throw on another).
    auto experts = make_in_place_store(model->expert_layout(), "mmap");
    ThreadPool pool(2);
    auto cache = model->make_kv_cache(64, engine_kv_config(KvType::kF16, KvType::kF16));
    Batch batch;
    for (int i = 0; i < 5; ++i) batch.add(1 + i, i, 0, i == 4);
    std::vector<float> logits;
    EXPECT_NO_THROW(model->forward(pool, batch, *cache, *experts, logits));
    EXPECT_EQ(static_cast<int64_t>(logits.size()), int64_t{model->hparams().n_vocab});
  }
  // One reference model per architecture sluice runs (qwen3 dense shares qwen3moe's loader and
  // rule).
  for (const char* arch : {"deepseek2", "deepseek4", "glm4moe", "gpt-oss", "llama", "qwen3moe"})
    EXPECT_TRUE(archs.count(arch)) << arch << " has no reference model";
}

// A pipeline stage's cache holds only its own layers' rows, each as the rule states it.
TEST(KvShape, ThePlannerAndTheModelAgreeOnAPipelineStagesLayersOnly) {
  auto file = gguf::File::open((kRef / "qwen3moe-f32.gguf").string());
  const ModelSummary summary = read_model_summary(*file);
  auto model = load_model(*file);
  const int n_layer = model->hparams().n_layer;
  ASSERT_GE(n_layer, 2);
  const KvCacheConfig config = engine_kv_config(KvType::kQ8_0, KvType::kQ8_0);
  const uint64_t whole = estimate_kv(summary, 100, config).bytes_per_token;
  model->set_layer_range(1, n_layer);
  const auto cache = model->make_kv_cache(100, config);
  // Layer 0 belongs to another stage: this stage's cache holds the other layers' share.
  const KvShape shape = kv_shape(summary);
  KvLayout first;
  first.layers = {shape.layers[0]};
  first.config = config;
  first.n_ctx = 100;
  EXPECT_EQ(cache->bytes_per_position(), whole - first.bytes_per_position());
  EXPECT_EQ(cache->shape(0).n_head, 0);
}

}  // namespace
