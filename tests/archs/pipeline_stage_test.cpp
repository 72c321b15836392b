// Pipeline stages split the layer loop without changing a bit: for each MoE reference model, a
// prompt evaluated in two or three stages (each a separately loaded model over its layer range,
// with its own KV cache holding only its layers, handing the fp32 hidden state on) and then a few
// single-token decode steps give logits identical to the whole model's forward pass.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

const fs::path kRef = fs::path(SLUICE_TESTDATA) / "reference";

std::vector<int32_t> prompt_tokens(const std::string& stem) {
  std::ifstream in(kRef / (stem + ".prompt1.json"));
  return nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
}

struct Stage {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<ExpertStore> experts;
};

// Logits after every prompt token, then after each of 3 greedy tokens evaluated alone; `cuts`
// are the stage boundaries (empty: the whole model through forward()).
std::vector<float> run(const gguf::File& file, const std::vector<int32_t>& prompt,
                       const std::vector<int>& cuts) {
  ThreadPool pool(2);
  std::vector<Stage> stages;
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(-1);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    Stage s;
    s.model = load_model(file);
    if (!cuts.empty()) s.model->set_layer_range(bounds[i], bounds[i + 1]);
    s.kv = s.model->make_kv_cache(static_cast<int>(prompt.size()) + 8);
    s.experts = make_in_place_store(s.model->expert_layout(), "ram");
    stages.push_back(std::move(s));
  }
  auto step = [&](const Batch& b, std::vector<float>& logits) {
    if (cuts.empty())
      return stages[0].model->forward(pool, b, *stages[0].kv, *stages[0].experts, logits);
    std::vector<float> hidden;
    for (Stage& s : stages) {
      s.model->forward_stage(pool, b, *s.kv, *s.experts, hidden, logits);
      if (!s.model->last_stage()) {
        EXPECT_TRUE(logits.empty());
      }
    }
  };
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, true);
  std::vector<float> out, logits;
  step(b, out);
  const size_t n_vocab = stages[0].model->hparams().n_vocab;
  int32_t pos = static_cast<int32_t>(prompt.size());
  std::vector<float> last(out.end() - n_vocab, out.end());
  for (int i = 0; i < 3; ++i, ++pos) {
    b.clear();
    b.add(argmax(last), pos, 0, true);
    step(b, logits);
    last = logits;
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

class PipelineStages : public ::testing::TestWithParam<const char*> {};

TEST_P(PipelineStages, StagedLogitsAreBitIdenticalToOneForward) {
  const std::string stem = GetParam();
  auto file = gguf::File::open((kRef / (stem + ".gguf")).string());
  const std::vector<int32_t> prompt = prompt_tokens(stem);
  const int n_layer = load_model(*file)->hparams().n_layer;
  ASSERT_GE(n_layer, 3);
  const std::vector<float> whole = run(*file, prompt, {});
  for (const std::vector<int>& cuts :
       {std::vector<int>{1}, std::vector<int>{n_layer - 1}, std::vector<int>{1, 2}}) {
    const std::vector<float> staged = run(*file, prompt, cuts);
    ASSERT_EQ(staged.size(), whole.size());
    EXPECT_EQ(0, std::memcmp(staged.data(), whole.data(), whole.size() * sizeof(float)))
        << stem << " split at " << cuts[0]
        << (cuts.size() > 1 ? "," + std::to_string(cuts[1]) : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, PipelineStages,
                         ::testing::Values("qwen3moe-256-q8_0", "deepseek2-f32", "gptoss-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(PipelineStagesRange, RejectsEmptyOrOutsideRanges) {
  auto file = gguf::File::open((kRef / "qwen3moe-256-q8_0.gguf").string());
  auto m = load_model(*file);
  const int n = m->hparams().n_layer;
  EXPECT_THROW(m->set_layer_range(2, 2), Error);
  EXPECT_THROW(m->set_layer_range(-1, 2), Error);
  EXPECT_THROW(m->set_layer_range(0, n + 1), Error);
  m->set_layer_range(1, -1);
  EXPECT_FALSE(m->first_stage());
  EXPECT_TRUE(m->last_stage());
  // A middle stage given a hidden state of the wrong width fails naming the layers.
  auto kv = m->make_kv_cache(16);
  auto experts = make_in_place_store(m->expert_layout(), "ram");
  ThreadPool pool(1);
  Batch b;
  b.add(1, 0, 0, true);
  std::vector<float> hidden(3), logits;
  EXPECT_THROW(m->forward_stage(pool, b, *kv, *experts, hidden, logits), Error);
}

TEST(PipelineStagesRange, DeepSeek4RefusesToSplit) {
  auto file = gguf::File::open((kRef / "deepseek4-f32.gguf").string());
  auto m = load_model(*file);
  EXPECT_THROW(m->set_layer_range(0, 1), Error);
}

}  // namespace
