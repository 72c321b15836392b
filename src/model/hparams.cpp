// Generic hyperparameter reading. Keys follow llama.cpp's GGUF conventions (`<arch>.block_count`,
// `<arch>.attention.head_count`, ...); arrays are accepted wherever real files use them.
#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"

namespace sluice {

namespace {

// A key that may be a scalar or a per-layer array; returns n_layer values.
std::vector<int> per_layer(const gguf::File& f, const std::string& key, int n_layer, int fallback) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::vector<int>(n_layer, fallback);
  if (v->type == gguf::ValueType::ARRAY) {
    auto arr = f.get_int_array(key);
    if (static_cast<int>(arr.size()) != n_layer)
      fail("metadata key '{}' has {} entries, expected one per layer ({})", key, arr.size(), n_layer);
    return {arr.begin(), arr.end()};
  }
  return std::vector<int>(n_layer, static_cast<int>(f.get_int(key)));
}

int positive(const gguf::File& f, const std::string& key) {
  int64_t v = f.get_int(key);
  if (v <= 0 || v > (1 << 24)) fail("metadata key '{}' is {}, expected a positive size", key, v);
  return static_cast<int>(v);
}

}  // namespace

HParams read_hparams(const gguf::File& f) {
  HParams hp;
  hp.arch = f.get_string("general.architecture");
  const std::string a = hp.arch + ".";
  hp.n_layer = positive(f, a + "block_count");
  hp.n_embd = positive(f, a + "embedding_length");
  hp.n_ctx_train = static_cast<int>(f.get_int_or(a + "context_length", 4096));
  hp.n_head = per_layer(f, a + "attention.head_count", hp.n_layer, 0);
  hp.n_head_kv = per_layer(f, a + "attention.head_count_kv", hp.n_layer, hp.n_head[0]);
  for (int il = 0; il < hp.n_layer; ++il) {
    if (hp.n_head[il] <= 0) fail("metadata key '{}attention.head_count' is {} for layer {}, expected > 0", a, hp.n_head[il], il);
    if (hp.n_head_kv[il] <= 0 || hp.n_head[il] % hp.n_head_kv[il] != 0)
      fail("layer {}: {} query heads cannot be grouped over {} KV heads", il, hp.n_head[il], hp.n_head_kv[il]);
  }
  hp.n_ff = per_layer(f, a + "feed_forward_length", hp.n_layer, 0);
  hp.head_dim_k = static_cast<int>(f.get_int_or(a + "attention.key_length", hp.n_embd / hp.n_head[0]));
  hp.head_dim_v = static_cast<int>(f.get_int_or(a + "attention.value_length", hp.head_dim_k));
  hp.rms_eps = static_cast<float>(f.get_float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));

  RopeParams& r = hp.rope;
  r.n_rot = static_cast<int>(f.get_int_or(a + "rope.dimension_count", hp.head_dim_k));
  if (r.n_rot <= 0 || r.n_rot > hp.head_dim_k || r.n_rot % 2)
    fail("metadata key '{}rope.dimension_count' is {}, expected an even number ≤ head size {}", a, r.n_rot, hp.head_dim_k);
  r.freq_base = static_cast<float>(f.get_float_or(a + "rope.freq_base", 10000.0));
  std::string scaling = f.get_string_or(a + "rope.scaling.type", "none");
  float factor = static_cast<float>(f.get_float_or(a + "rope.scaling.factor", 0.0));
  if (factor == 0.0f && f.has(a + "rope.scale_linear")) factor = static_cast<float>(f.get_float(a + "rope.scale_linear"));
  if (scaling == "linear" || (scaling == "none" && factor > 1.0f)) r.scaling = RopeScaling::kLinear;
  else if (scaling == "yarn") r.scaling = RopeScaling::kYarn;
  else if (scaling != "none") fail("metadata key '{}rope.scaling.type' is '{}', expected none, linear or yarn", a, scaling);
  if (r.scaling != RopeScaling::kNone && factor > 0.0f) r.freq_scale = 1.0f / factor;
  r.n_ctx_orig = static_cast<int>(f.get_int_or(a + "rope.scaling.original_context_length", hp.n_ctx_train));
  if (r.scaling == RopeScaling::kYarn) {
    r.ext_factor = 1.0f;
    r.beta_fast = static_cast<float>(f.get_float_or(a + "rope.scaling.yarn_beta_fast", 32.0));
    r.beta_slow = static_cast<float>(f.get_float_or(a + "rope.scaling.yarn_beta_slow", 1.0));
    r.attn_factor = static_cast<float>(f.get_float_or(a + "rope.scaling.attn_factor", 1.0));
  }

  hp.n_expert = static_cast<int>(f.get_int_or(a + "expert_count", 0));
  hp.n_expert_used = static_cast<int>(f.get_int_or(a + "expert_used_count", 0));
  if (hp.n_expert < 0 || hp.n_expert_used < 0 || hp.n_expert_used > hp.n_expert)
    fail("{} experts with {} used per token is not a valid mixture", hp.n_expert, hp.n_expert_used);
  if (hp.n_expert > 0 && hp.n_expert_used == 0) fail("metadata key '{}expert_used_count' is missing or 0", a);
  hp.n_expert_shared = static_cast<int>(f.get_int_or(a + "expert_shared_count", 0));
  hp.n_ff_exp = static_cast<int>(f.get_int_or(a + "expert_feed_forward_length", 0));
  hp.n_ff_shexp = static_cast<int>(f.get_int_or(a + "expert_shared_feed_forward_length", hp.n_ff_exp));
  hp.n_leading_dense = static_cast<int>(f.get_int_or(a + "leading_dense_block_count", 0));
  hp.expert_weights_norm = f.get_bool_or(a + "expert_weights_norm", false);
  hp.expert_weights_scale = static_cast<float>(f.get_float_or(a + "expert_weights_scale", 1.0));
  if (hp.expert_weights_scale == 0.0f) hp.expert_weights_scale = 1.0f;
  int64_t gating = f.get_int_or(a + "expert_gating_func", 0);
  hp.gating = gating == 2   ? GatingFunc::kSigmoid
              : gating == 3 ? GatingFunc::kSoftmaxWeight
              : gating == 4 ? GatingFunc::kSqrtSoftplus
                            : GatingFunc::kSoftmax;
  hp.n_expert_groups = static_cast<int>(f.get_int_or(a + "expert_group_count", 0));
  hp.n_group_used = static_cast<int>(f.get_int_or(a + "expert_group_used_count", 0));
  hp.sliding_window = static_cast<int>(f.get_int_or(a + "attention.sliding_window", 0));
  hp.swa_layers.assign(hp.n_layer, false);  // the files do not say: a family's loader sets its pattern

  const gguf::Value* nv = f.find(a + "vocab_size");
  hp.n_vocab = nv ? static_cast<int>(f.get_int(a + "vocab_size"))
                  : static_cast<int>(f.get_string_array("tokenizer.ggml.tokens").size());
  return hp;
}

}  // namespace sluice
