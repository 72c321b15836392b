// Hyperparameters from GGUF keys: read_model_summary reads every `<arch>.*` key once, leniently,
// and read_hparams checks and completes that summary. Here: the two agree on a file with per-layer
// arrays and YaRN keys, the defaults of absent keys (a family's own where it states one), and the
// errors naming a missing or invalid key.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/hparams.h"
#include "test_util.h"

using namespace sluice;

namespace {

// A header-only llama file with 4 layers; `fill` adds or replaces keys.
std::string write_header(const std::string& name, const std::function<void(gguf::Writer&)>& fill) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("llama"));
  w.set("llama.block_count", gguf::Value::u32(4));
  w.set("llama.embedding_length", gguf::Value::u32(64));
  w.set("llama.attention.head_count", gguf::Value::u32(4));
  w.set("llama.vocab_size", gguf::Value::u32(100));
  fill(w);
  const std::string path = (test::scratch_dir() / name).string();
  w.write(path);
  return path;
}

std::string hparams_error(const std::string& path) {
  auto f = gguf::File::open(path);
  try {
    read_hparams(*f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HParams, SummaryAndHParamsReadTheSameKeys) {
  const std::string path = write_header("hp_full.gguf", [](gguf::Writer& w) {
    w.set("llama.attention.head_count_kv", gguf::Value::i32_array({4, 2, 2, 1}));
    w.set("llama.feed_forward_length", gguf::Value::i32_array({96, 128, 128, 64}));
    w.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f));
    w.set("llama.rope.freq_base", gguf::Value::f32(50000.0f));
    w.set("llama.rope.scaling.type", gguf::Value::str("yarn"));
    w.set("llama.rope.scaling.factor", gguf::Value::f32(4.0f));
    w.set("llama.rope.scaling.original_context_length", gguf::Value::u32(1024));
    w.set("llama.rope.scaling.yarn_beta_fast", gguf::Value::f32(16.0f));
    w.set("llama.expert_count", gguf::Value::u32(8));
    w.set("llama.expert_used_count", gguf::Value::u32(2));
    w.set("llama.expert_feed_forward_length", gguf::Value::u32(32));
    w.set("llama.expert_weights_norm", gguf::Value::boolean(true));
    w.set("llama.expert_gating_func", gguf::Value::u32(2));
    w.set("llama.context_length", gguf::Value::u32(8192));
  });
  auto f = gguf::File::open(path);
  const ModelSummary m = read_model_summary(*f);
  EXPECT_EQ(m.n_layer, 4);
  EXPECT_EQ(m.n_ff, 128);  // the largest of the per-layer sizes
  EXPECT_EQ(m.n_head_kv, (std::vector<int64_t>{4, 2, 2, 1}));
  EXPECT_EQ(m.rope_scaling_type, "yarn");
  EXPECT_FALSE(m.key_length);  // absent keys stay unset in the summary

  const HParams hp = read_hparams(*f);
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_ctx_train, 8192);
  EXPECT_EQ(hp.n_head, (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(hp.n_head_kv, (std::vector<int>{4, 2, 2, 1}));
  EXPECT_EQ(hp.n_ff, (std::vector<int>{96, 128, 128, 64}));
  EXPECT_EQ(hp.head_dim_k, 16);  // embedding / heads without key_length
  EXPECT_EQ(hp.head_dim_v, 16);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-6f);
  EXPECT_EQ(hp.rope.n_rot, 16);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 50000.0f);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(hp.rope.freq_scale, 0.25f);
  EXPECT_EQ(hp.rope.n_ctx_orig, 1024);
  EXPECT_FLOAT_EQ(hp.rope.beta_fast, 16.0f);
  EXPECT_FLOAT_EQ(hp.rope.beta_slow, 1.0f);  // default
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);
  EXPECT_EQ(hp.n_ff_shexp, 32);  // defaults to the routed experts' size
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_EQ(hp.gating, GatingFunc::kSigmoid);
  EXPECT_EQ(hp.n_vocab, 100);
  EXPECT_EQ(hp.swa_layers, std::vector<bool>(4, false));  // a family's loader sets its pattern
}

TEST(HParams, DefaultsOfAbsentKeys) {
  auto f = gguf::File::open(write_header("hp_min.gguf", [](gguf::Writer&) {}));
  const HParams hp = read_hparams(*f);
  EXPECT_EQ(hp.n_ctx_train, 4096);
  EXPECT_EQ(hp.n_head_kv, hp.n_head);
  EXPECT_EQ(hp.n_ff, std::vector<int>(4, 0));
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 10000.0f);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(hp.rope.n_ctx_orig, 4096);
  EXPECT_EQ(hp.n_expert, 0);
  EXPECT_FLOAT_EQ(hp.expert_weights_scale, 1.0f);
  EXPECT_EQ(hp.gating, GatingFunc::kSoftmax);
}

// A family's default for an absent shared key (glm4moe: sigmoid gating) applies only where the
// file is silent; a stated key wins. DeepSeek V4's indexer key size is read here too.
TEST(HParams, FamilyDefaultsOnlyForAbsentKeys) {
  auto silent = gguf::File::open(write_header("hp_gating_absent.gguf", [](gguf::Writer& w) {
    w.set("llama.attention.indexer.key_length", gguf::Value::u32(128));
  }));
  EXPECT_EQ(read_hparams(*silent).gating, GatingFunc::kSoftmax);
  EXPECT_EQ(read_hparams(*silent, {.gating = GatingFunc::kSigmoid}).gating, GatingFunc::kSigmoid);
  EXPECT_EQ(read_hparams(*silent).indexer_key_length, 128);
  auto stated = gguf::File::open(write_header("hp_gating_stated.gguf", [](gguf::Writer& w) {
    w.set("llama.expert_gating_func", gguf::Value::u32(1));
  }));
  EXPECT_EQ(read_hparams(*stated, {.gating = GatingFunc::kSigmoid}).gating, GatingFunc::kSoftmax);
  EXPECT_EQ(read_hparams(*stated).indexer_key_length, 0);
}

TEST(HParams, ErrorsNameTheKey) {
  EXPECT_EQ(hparams_error(write_header("hp_no_blocks.gguf",
                                       [](gguf::Writer& w) { w.set("llama.block_count", gguf::Value::u32(0)); })),
            "metadata key 'llama.block_count' is 0, expected a positive size");
  EXPECT_EQ(hparams_error(write_header("hp_no_embd.gguf",
                                       [](gguf::Writer& w) { w.set("llama.embedding_length", gguf::Value::str("x")); })),
            "metadata key 'llama.embedding_length' has type string, expected an integer");
  EXPECT_EQ(hparams_error(write_header("hp_short.gguf",
                                       [](gguf::Writer& w) {
                                         w.set("llama.attention.head_count_kv", gguf::Value::i32_array({2, 2, 2}));
                                       })),
            "metadata key 'llama.attention.head_count_kv' has 3 entries, expected one per layer (4)");
  EXPECT_EQ(hparams_error(write_header("hp_groups.gguf",
                                       [](gguf::Writer& w) {
                                         w.set("llama.attention.head_count_kv", gguf::Value::u32(3));
                                       })),
            "layer 0: 4 query heads cannot be grouped over 3 KV heads");
  EXPECT_EQ(hparams_error(write_header("hp_scaling.gguf",
                                       [](gguf::Writer& w) {
                                         w.set("llama.rope.scaling.type", gguf::Value::str("ntk"));
                                       })),
            "metadata key 'llama.rope.scaling.type' is 'ntk', expected none, linear or yarn");
  EXPECT_EQ(hparams_error(write_header("hp_used.gguf",
                                       [](gguf::Writer& w) { w.set("llama.expert_count", gguf::Value::u32(8)); })),
            "metadata key 'llama.expert_used_count' is missing or 0");
  EXPECT_EQ(hparams_error(write_header("hp_indexer.gguf",
                                       [](gguf::Writer& w) {
                                         w.set("llama.attention.indexer.key_length",
                                               gguf::Value::u32(1 << 20));
                                       })),
            "metadata key 'llama.attention.indexer.key_length' is 1048576, expected 1..65536");
}
