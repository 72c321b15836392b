// Generic hyperparameter reading. Keys follow llama.cpp's GGUF conventions (`<arch>.block_count`,
// `<arch>.attention.head_count`, ...); arrays are accepted wherever real files use them. Every key
// is read once, leniently, into ModelSummary; read_hparams checks and completes that.
#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"

namespace sluice {

namespace {

// Integer keys may hold one value or, on models with heterogeneous layers, one per layer.
std::vector<int64_t> int_or_array(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) return {};
  if (v->type == gguf::ValueType::ARRAY) return f.get_int_array(key);
  return {f.get_int(key)};
}

std::optional<int64_t> opt_int(const gguf::File& f, const std::string& key) {
  auto v = int_or_array(f, key);
  if (v.empty()) return std::nullopt;
  // A per-layer array (e.g. feed_forward_length on models mixing layer widths) reports its largest.
  return *std::max_element(v.begin(), v.end());
}

std::optional<double> opt_float(const gguf::File& f, const std::string& key) {
  return f.has(key) ? std::optional<double>(f.get_float(key)) : std::nullopt;
}

std::optional<bool> opt_bool(const gguf::File& f, const std::string& key) {
  return f.has(key) ? std::optional<bool>(f.get_bool_or(key, false)) : std::nullopt;
}

// A per-layer key as n_layer values: one value repeated, or an array of exactly n_layer.
std::vector<int> per_layer(const std::vector<int64_t>& v, const std::string& key, int n_layer, int fallback) {
  if (v.empty()) return std::vector<int>(n_layer, fallback);
  if (v.size() == 1) return std::vector<int>(n_layer, static_cast<int>(v[0]));
  if (static_cast<int>(v.size()) != n_layer)
    fail("metadata key '{}' has {} entries, expected one per layer ({})", key, v.size(), n_layer);
  return {v.begin(), v.end()};
}

int positive(const std::optional<int64_t>& v, const std::string& key) {
  if (!v) fail("metadata key '{}' is missing", key);
  if (*v <= 0 || *v > (1 << 24)) fail("metadata key '{}' is {}, expected a positive size", key, *v);
  return static_cast<int>(*v);
}

}  // namespace

ModelSummary read_model_summary(const gguf::File& f) {
  ModelSummary m;
  m.arch = f.get_string_or("general.architecture", "");
  m.name = f.get_string_or("general.name", "");
  if (m.arch.empty()) return m;
  const std::string a = m.arch + ".";
  m.n_layer = opt_int(f, a + "block_count");
  m.n_embd = opt_int(f, a + "embedding_length");
  m.n_ff_layers = int_or_array(f, a + "feed_forward_length");
  if (!m.n_ff_layers.empty()) m.n_ff = *std::max_element(m.n_ff_layers.begin(), m.n_ff_layers.end());
  m.n_ff_exp = opt_int(f, a + "expert_feed_forward_length");
  m.n_ff_shexp = opt_int(f, a + "expert_shared_feed_forward_length");
  m.n_expert = opt_int(f, a + "expert_count");
  m.n_expert_used = opt_int(f, a + "expert_used_count");
  m.n_expert_shared = opt_int(f, a + "expert_shared_count");
  m.n_leading_dense = opt_int(f, a + "leading_dense_block_count");
  m.n_mtp_layers = opt_int(f, a + "nextn_predict_layers");
  m.expert_weights_norm = opt_bool(f, a + "expert_weights_norm");
  m.expert_weights_scale = opt_float(f, a + "expert_weights_scale");
  m.gating_func = opt_int(f, a + "expert_gating_func");
  m.n_expert_groups = opt_int(f, a + "expert_group_count");
  m.n_group_used = opt_int(f, a + "expert_group_used_count");
  m.n_head = int_or_array(f, a + "attention.head_count");
  m.n_head_kv = int_or_array(f, a + "attention.head_count_kv");
  m.key_length = opt_int(f, a + "attention.key_length");
  m.value_length = opt_int(f, a + "attention.value_length");
  m.rms_eps = opt_float(f, a + "attention.layer_norm_rms_epsilon");
  m.kv_lora_rank = opt_int(f, a + "attention.kv_lora_rank");
  m.q_lora_rank = opt_int(f, a + "attention.q_lora_rank");
  m.rope_dim = opt_int(f, a + "rope.dimension_count");
  m.rope_freq_base = opt_float(f, a + "rope.freq_base");
  m.rope_scaling_type = f.get_string_or(a + "rope.scaling.type", "");
  m.rope_scaling_factor = opt_float(f, a + "rope.scaling.factor");
  m.rope_scale_linear = opt_float(f, a + "rope.scale_linear");
  m.rope_orig_ctx = opt_int(f, a + "rope.scaling.original_context_length");
  m.yarn_beta_fast = opt_float(f, a + "rope.scaling.yarn_beta_fast");
  m.yarn_beta_slow = opt_float(f, a + "rope.scaling.yarn_beta_slow");
  m.yarn_attn_factor = opt_float(f, a + "rope.scaling.attn_factor");
  m.context_length = opt_int(f, a + "context_length");
  m.sliding_window = opt_int(f, a + "attention.sliding_window");
  m.vocab_size = opt_int(f, a + "vocab_size");
  m.is_mla = m.kv_lora_rank.has_value() && *m.kv_lora_rank > 0;
  m.compress_ratios = int_or_array(f, a + "attention.compress_ratios");
  m.indexer_key_length = opt_int(f, a + "attention.indexer.key_length");
  return m;
}

HParams read_hparams(const gguf::File& f, const HParamDefaults& defaults) {
  const ModelSummary m = read_model_summary(f);
  HParams hp;
  hp.arch = m.arch;
  if (hp.arch.empty()) fail("metadata key 'general.architecture' is missing");
  const std::string a = hp.arch + ".";
  hp.n_layer = positive(m.n_layer, a + "block_count");
  hp.n_embd = positive(m.n_embd, a + "embedding_length");
  hp.n_ctx_train = static_cast<int>(m.context_length.value_or(4096));
  hp.n_head = per_layer(m.n_head, a + "attention.head_count", hp.n_layer, 0);
  hp.n_head_kv = per_layer(m.n_head_kv, a + "attention.head_count_kv", hp.n_layer, hp.n_head[0]);
  for (int il = 0; il < hp.n_layer; ++il) {
    if (hp.n_head[il] <= 0) fail("metadata key '{}attention.head_count' is {} for layer {}, expected > 0", a, hp.n_head[il], il);
    if (hp.n_head_kv[il] <= 0 || hp.n_head[il] % hp.n_head_kv[il] != 0)
      fail("layer {}: {} query heads cannot be grouped over {} KV heads", il, hp.n_head[il], hp.n_head_kv[il]);
  }
  hp.n_ff = per_layer(m.n_ff_layers, a + "feed_forward_length", hp.n_layer, 0);
  hp.head_dim_k = static_cast<int>(m.key_length.value_or(hp.n_embd / hp.n_head[0]));
  hp.head_dim_v = static_cast<int>(m.value_length.value_or(hp.head_dim_k));
  hp.rms_eps = static_cast<float>(m.rms_eps.value_or(1e-5));

  RopeParams& r = hp.rope;
  r.n_rot = static_cast<int>(m.rope_dim.value_or(hp.head_dim_k));
  if (r.n_rot <= 0 || r.n_rot > hp.head_dim_k || r.n_rot % 2)
    fail("metadata key '{}rope.dimension_count' is {}, expected an even number ≤ head size {}", a, r.n_rot, hp.head_dim_k);
  r.freq_base = static_cast<float>(m.rope_freq_base.value_or(10000.0));
  const std::string scaling = m.rope_scaling_type.empty() ? "none" : m.rope_scaling_type;
  float factor = static_cast<float>(m.rope_scaling_factor.value_or(0.0));
  if (factor == 0.0f && m.rope_scale_linear) factor = static_cast<float>(*m.rope_scale_linear);
  if (scaling == "linear" || (scaling == "none" && factor > 1.0f)) r.scaling = RopeScaling::kLinear;
  else if (scaling == "yarn") r.scaling = RopeScaling::kYarn;
  else if (scaling != "none") fail("metadata key '{}rope.scaling.type' is '{}', expected none, linear or yarn", a, scaling);
  if (r.scaling != RopeScaling::kNone && factor > 0.0f) r.freq_scale = 1.0f / factor;
  r.n_ctx_orig = static_cast<int>(m.rope_orig_ctx.value_or(hp.n_ctx_train));
  if (r.scaling == RopeScaling::kYarn) {
    r.ext_factor = 1.0f;
    r.beta_fast = static_cast<float>(m.yarn_beta_fast.value_or(32.0));
    r.beta_slow = static_cast<float>(m.yarn_beta_slow.value_or(1.0));
    r.attn_factor = static_cast<float>(m.yarn_attn_factor.value_or(1.0));
  }

  hp.n_expert = static_cast<int>(m.n_expert.value_or(0));
  hp.n_expert_used = static_cast<int>(m.n_expert_used.value_or(0));
  if (hp.n_expert < 0 || hp.n_expert_used < 0 || hp.n_expert_used > hp.n_expert)
    fail("{} experts with {} used per token is not a valid mixture", hp.n_expert, hp.n_expert_used);
  if (hp.n_expert > 0 && hp.n_expert_used == 0) fail("metadata key '{}expert_used_count' is missing or 0", a);
  hp.n_expert_shared = static_cast<int>(m.n_expert_shared.value_or(0));
  hp.n_ff_exp = static_cast<int>(m.n_ff_exp.value_or(0));
  hp.n_ff_shexp = static_cast<int>(m.n_ff_shexp.value_or(hp.n_ff_exp));
  hp.n_leading_dense = static_cast<int>(m.n_leading_dense.value_or(0));
  hp.expert_weights_norm = m.expert_weights_norm.value_or(false);
  hp.expert_weights_scale = static_cast<float>(m.expert_weights_scale.value_or(1.0));
  if (hp.expert_weights_scale == 0.0f) hp.expert_weights_scale = 1.0f;
  if (m.gating_func) {
    const int64_t gating = *m.gating_func;
    hp.gating = gating == 2   ? GatingFunc::kSigmoid
                : gating == 3 ? GatingFunc::kSoftmaxWeight
                : gating == 4 ? GatingFunc::kSqrtSoftplus
                              : GatingFunc::kSoftmax;
  } else {
    hp.gating = defaults.gating;
  }
  hp.n_expert_groups = static_cast<int>(m.n_expert_groups.value_or(0));
  hp.n_group_used = static_cast<int>(m.n_group_used.value_or(0));
  hp.n_nextn = m.n_mtp_layers.value_or(0);
  hp.sliding_window = static_cast<int>(m.sliding_window.value_or(0));
  hp.q_lora_rank = static_cast<int>(m.q_lora_rank.value_or(0));
  hp.kv_lora_rank = static_cast<int>(m.kv_lora_rank.value_or(0));
  hp.compress_ratios = m.compress_ratios;
  if (m.indexer_key_length && (*m.indexer_key_length <= 0 || *m.indexer_key_length > (1 << 16)))
    fail("metadata key '{}attention.indexer.key_length' is {}, expected 1..{}", a,
         *m.indexer_key_length, 1 << 16);
  hp.indexer_key_length = static_cast<int>(m.indexer_key_length.value_or(0));
  hp.swa_layers.assign(hp.n_layer, false);  // the files do not say: a family's loader sets its pattern

  hp.n_vocab = m.vocab_size ? static_cast<int>(*m.vocab_size)
                            : static_cast<int>(f.get_string_array("tokenizer.ggml.tokens").size());
  return hp;
}

}  // namespace sluice
