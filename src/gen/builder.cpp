// ModelBuilder: shared keys, tokenizer copy and tensor recipes for the gen-model family writers.
// Every tensor's data is seeded by (spec seed, tensor name), so a file is a pure function of its
// spec, and a tensor's bytes do not change when other tensors are added or reordered.
#include "gen/builder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gen/random_fill.h"
#include "gen/zipf.h"
#include "quant/dequant.h"

namespace sluice::gen {

namespace {

bool is_quantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && t != GgmlType::F64;
}

// llama.cpp's general.file_type names the mix by its main weight type; ours is the experts' (or
// the dense FFN's) type. Informational only: loaders read each tensor's own type.
uint32_t file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 12;   // Q3_K_M
    case GgmlType::Q4_K: return 15;   // Q4_K_M
    case GgmlType::Q5_K: return 17;   // Q5_K_M
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ2_XXS: return 19;
    case GgmlType::IQ2_XS: return 20;
    case GgmlType::IQ3_XXS: return 23;
    case GgmlType::IQ1_S: return 24;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ3_S: return 26;
    case GgmlType::IQ2_S: return 28;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::IQ1_M: return 31;
    case GgmlType::BF16: return 32;
    case GgmlType::TQ1_0: return 36;
    case GgmlType::TQ2_0: return 37;
    case GgmlType::MXFP4: return 38;  // MXFP4_MOE
    default: return 0;
  }
}

constexpr int32_t kTokenTypeUnused = 5;

}  // namespace

ModelBuilder::ModelBuilder(const GenSpec& spec) : spec_(spec) {
  validate(spec_);
  load_tokenizer();
  if (spec_.n_expert > 0) router_scales_ = zipf_router_scales(spec_.n_expert, spec_.n_expert_used, spec_.zipf);
  pool_ = std::make_unique<ThreadPool>(std::max(1u, std::thread::hardware_concurrency()));
}

void ModelBuilder::load_tokenizer() {
  if (spec_.vocab_from.empty())
    fail("no tokenizer to embed: pass --vocab-from FILE (a GGUF with tokenizer.* keys) or set SLUICE_VOCAB");
  auto file = gguf::File::open(spec_.vocab_from);
  for (const auto& [key, value] : file->metadata())
    if (key.rfind("tokenizer.", 0) == 0) tokenizer_kv_.emplace_back(key, value);
  if (!file->has("tokenizer.ggml.tokens")) fail("'{}' has no tokenizer.ggml.tokens", spec_.vocab_from);
  const size_t n_tok = file->get_string_array("tokenizer.ggml.tokens").size();
  n_vocab_ = spec_.n_vocab ? spec_.n_vocab : static_cast<int>(n_tok);
  if (static_cast<size_t>(n_vocab_) < n_tok)
    fail("vocabulary size {} is smaller than the {} tokens of '{}'; use --vocab {} or more", n_vocab_, n_tok,
         spec_.vocab_from, n_tok);
  if (static_cast<size_t>(n_vocab_) == n_tok) return;

  // Pad the per-token arrays to n_vocab with unused tokens, as real files do for embedding rows
  // beyond the tokenizer (Qwen3: 151669 tokens, 151936 rows).
  std::unordered_set<std::string> taken;
  for (const auto& t : file->get_string_array("tokenizer.ggml.tokens")) taken.insert(t);
  std::vector<std::string> pad;
  for (int i = 0; pad.size() < static_cast<size_t>(n_vocab_) - n_tok; ++i) {
    std::string t = "<|unused_" + std::to_string(i) + "|>";
    if (!taken.count(t)) pad.push_back(std::move(t));
  }
  for (auto& [key, value] : tokenizer_kv_) {
    if (value.type != gguf::ValueType::ARRAY || value.arr().items.size() != n_tok) continue;
    auto arr = std::make_shared<gguf::Array>(value.arr());
    if (key == "tokenizer.ggml.tokens")
      for (const auto& t : pad) arr->items.push_back(gguf::Value::str(t));
    else if (key == "tokenizer.ggml.token_type")
      arr->items.resize(n_vocab_, gguf::Value{arr->elem_type, int64_t{kTokenTypeUnused}});
    else if (key == "tokenizer.ggml.scores")
      arr->items.resize(n_vocab_, gguf::Value{arr->elem_type, 0.0});
    else
      fail("'{}': per-token array '{}' cannot be padded to {} tokens", spec_.vocab_from, key, n_vocab_);
    value.data = arr;
  }
}

void ModelBuilder::arch_u32(const std::string& suffix, uint32_t v) {
  writer_.set(spec_.arch + "." + suffix, gguf::Value::u32(v));
}

void ModelBuilder::arch_f32(const std::string& suffix, float v) {
  writer_.set(spec_.arch + "." + suffix, gguf::Value::f32(v));
}

void ModelBuilder::arch_value(const std::string& suffix, gguf::Value v) { writer_.set(spec_.arch + "." + suffix, std::move(v)); }

void ModelBuilder::arch_bool(const std::string& suffix, bool v) {
  writer_.set(spec_.arch + "." + suffix, gguf::Value::boolean(v));
}

GgmlType ModelBuilder::fit_type(GgmlType type, int64_t n_in) {
  auto fits = [n_in](GgmlType t) { return n_in % type_traits(t).block_elems == 0; };
  if (fits(type)) return type;
  // llama.cpp's fallbacks for rows that are no multiple of 256.
  GgmlType t = GgmlType::Q8_0;
  switch (type) {
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M:
      t = GgmlType::IQ4_NL;
      break;
    case GgmlType::TQ1_0: case GgmlType::TQ2_0: t = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: t = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: t = GgmlType::Q5_1; break;
    default: break;
  }
  if (fits(t)) return t;
  return fits(GgmlType::F16) ? GgmlType::F16 : GgmlType::F32;
}

int ModelBuilder::n_leading_dense() const {
  if (spec_.n_expert == 0) return spec_.n_layer;
  return std::min(spec_.n_leading_dense, spec_.n_layer - 1);
}

void ModelBuilder::moe_keys() {
  const GenSpec& s = spec_;
  arch_u32("expert_feed_forward_length", s.n_ff_exp);
  arch_u32("expert_shared_count", s.n_expert_shared);
  arch_u32("leading_dense_block_count", n_leading_dense());
  if (s.expert_weights_scale != 0.0f) arch_f32("expert_weights_scale", s.expert_weights_scale);
  if (s.expert_weights_norm) arch_bool("expert_weights_norm", true);
  arch_u32("expert_gating_func", s.sigmoid_gating ? 2 : 1);  // llama.cpp: 1 softmax, 2 sigmoid
  if (s.n_expert_groups > 0) {
    arch_u32("expert_group_count", s.n_expert_groups);
    arch_u32("expert_group_used_count", s.n_group_used);
  }
}

void ModelBuilder::yarn_keys() {
  const GenSpec& s = spec_;
  if (s.yarn_factor <= 0.0f) return;
  writer_.set(s.arch + ".rope.scaling.type", gguf::Value::str("yarn"));
  arch_f32("rope.scaling.factor", s.yarn_factor);
  arch_u32("rope.scaling.original_context_length", s.yarn_orig_ctx);
  arch_f32("rope.scaling.yarn_beta_fast", s.yarn_beta_fast);
  arch_f32("rope.scaling.yarn_beta_slow", s.yarn_beta_slow);
  if (s.yarn_log_mul != 0.0f) arch_f32("rope.scaling.yarn_log_multiplier", s.yarn_log_mul);
}

void ModelBuilder::common_keys() {
  const GenSpec& s = spec_;
  writer_.set("general.architecture", gguf::Value::str(s.arch));
  writer_.set("general.name", gguf::Value::str(s.name));
  arch_u32("context_length", s.n_ctx);
  arch_u32("embedding_length", s.n_embd);
  arch_u32("block_count", s.n_layer);
  arch_u32("attention.head_count", s.n_head);
  arch_u32("attention.head_count_kv", s.n_head_kv);
  arch_f32("rope.freq_base", s.rope_base);
  arch_f32("attention.layer_norm_rms_epsilon", s.rms_eps);
  if (s.n_expert > 0) {
    arch_u32("expert_count", s.n_expert);
    arch_u32("expert_used_count", s.n_expert_used);
  }
  const GgmlType main_type = s.n_expert > 0 ? s.type_experts : s.type_dense;
  writer_.set("general.file_type", gguf::Value::u32(file_type_of(main_type)));
  const GgmlType all[] = {s.type_experts, s.type_attn, s.type_attn_v, s.type_embd, s.type_output, s.type_dense};
  if (std::any_of(std::begin(all), std::end(all), is_quantized))
    writer_.set("general.quantization_version", gguf::Value::u32(2));
  for (const auto& [key, value] : tokenizer_kv_) writer_.set(key, value);
}

void ModelBuilder::weight(const std::string& name, GgmlType type, std::vector<int64_t> ne) {
  const double rms = 1.0 / std::sqrt(static_cast<double>(ne[0]));
  weight(name, type, std::move(ne), rms);
}

void ModelBuilder::weight(const std::string& name, GgmlType type, std::vector<int64_t> ne, double rms) {
  const uint64_t seed = mix_seed(spec_.seed, hash_name(name));
  ThreadPool* pool = pool_.get();
  add(name, type, std::move(ne), [=](std::byte* dst, size_t bytes) {
    fill_random(type, rms, seed, dst, bytes, pool);
  });
}

void ModelBuilder::norm(const std::string& name, int64_t n, float value) { constant(name, {n}, value); }

void ModelBuilder::constant(const std::string& name, std::vector<int64_t> ne, float value) {
  add(name, GgmlType::F32, std::move(ne), [value](std::byte* dst, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 4) std::memcpy(dst + i, &value, 4);
  });
}

void ModelBuilder::embedding_and_head() {
  const GenSpec& s = spec_;
  // An embedding row is a matrix applied to a one-hot input: fan-in 1, so RMS 1. Smaller rows
  // (1/sqrt(n_embd)) would let the attention outputs, which late positions all average over
  // the same prefix, dominate the residual stream: hidden states would share one direction and
  // the routers, seeing it in every token, would favour the same experts even without --zipf.
  weight("token_embd.weight", s.type_embd, {s.n_embd, n_vocab_}, 1.0);
  // A tied head reuses those RMS-1 rows; the final norm's weight scales them back so logits are
  // still ~N(0, 1), as with an untied head of RMS 1/sqrt(n_embd).
  const double head_scale = 1.0 / std::sqrt(static_cast<double>(s.n_embd));
  norm("output_norm.weight", s.n_embd, s.tied_output ? static_cast<float>(head_scale) : 1.0f);
  if (!s.tied_output) weight("output.weight", s.type_output, {s.n_embd, n_vocab_}, head_scale);
}

void ModelBuilder::attention(int il, bool qk_norm) {
  const GenSpec& s = spec_;
  const int64_t q_dim = int64_t{s.n_head} * s.head_dim, kv_dim = int64_t{s.n_head_kv} * s.head_dim;
  // Random attention at the plain 1/sqrt(n_in) scale is nearly uniform, so late positions all
  // average the same prefix: each layer feeds one shared vector into every token until hidden
  // states collapse onto it (measured on 16 layers of qwen3-30b-a3b: 86 % of the RMS shared by
  // layer 15, and routers then favour the same experts without --zipf). Scaling q and k by 3 each
  // (score std ≈ 9) makes attention pick a few positions per query, as trained models do; the
  // shared part then stays near 30 %. With QK-norm the norm weights carry the factor.
  const double q_rms = (qk_norm ? 1.0 : kQkScale) / std::sqrt(static_cast<double>(s.n_embd));
  norm(blk(il, "attn_norm.weight"), s.n_embd);
  weight(blk(il, "attn_q.weight"), s.type_attn, {s.n_embd, q_dim}, q_rms);
  weight(blk(il, "attn_k.weight"), s.type_attn, {s.n_embd, kv_dim}, q_rms);
  weight(blk(il, "attn_v.weight"), s.type_attn_v, {s.n_embd, kv_dim});
  weight(blk(il, "attn_output.weight"), s.type_attn, {q_dim, s.n_embd});
  if (qk_norm) {
    norm(blk(il, "attn_q_norm.weight"), s.head_dim, kQkScale);
    norm(blk(il, "attn_k_norm.weight"), s.head_dim, kQkScale);
  }
}

void ModelBuilder::attention_biases(int il, bool output) {
  const GenSpec& s = spec_;
  const int64_t q_dim = int64_t{s.n_head} * s.head_dim, kv_dim = int64_t{s.n_head_kv} * s.head_dim;
  weight(blk(il, "attn_q.bias"), GgmlType::F32, {q_dim}, 0.1);
  weight(blk(il, "attn_k.bias"), GgmlType::F32, {kv_dim}, 0.1);
  weight(blk(il, "attn_v.bias"), GgmlType::F32, {kv_dim}, 0.1);
  if (output) weight(blk(il, "attn_output.bias"), GgmlType::F32, {s.n_embd}, 0.1);
}

void ModelBuilder::dense_ffn(int il) {
  const GenSpec& s = spec_;
  weight(blk(il, "ffn_gate.weight"), fit_type(s.type_dense, s.n_embd), {s.n_embd, s.n_ff});
  weight(blk(il, "ffn_up.weight"), fit_type(s.type_dense, s.n_embd), {s.n_embd, s.n_ff});
  weight(blk(il, "ffn_down.weight"), fit_type(s.type_dense, s.n_ff), {s.n_ff, s.n_embd});
}

void ModelBuilder::moe(int il) {
  router(il, /*with_bias=*/false);
  experts(il, /*with_biases=*/false);
}

void ModelBuilder::router(int il, bool with_bias) {
  const GenSpec& s = spec_;
  // Popularity ranks are shuffled per layer, so each layer has its own favourite experts.
  std::vector<int> rank(s.n_expert);
  std::iota(rank.begin(), rank.end(), 0);
  Rng shuffle(mix_seed(s.seed, hash_name(blk(il, "zipf_ranks"))));
  for (int i = s.n_expert - 1; i > 0; --i) std::swap(rank[i], rank[shuffle.next() % (i + 1)]);
  std::vector<float> row_scale(s.n_expert);
  const float sigma = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  for (int e = 0; e < s.n_expert; ++e) row_scale[e] = sigma * static_cast<float>(router_scales_[rank[e]]);

  const std::string router = blk(il, "ffn_gate_inp.weight");
  const uint64_t seed = mix_seed(s.seed, hash_name(router));
  const int64_t n_embd = s.n_embd;
  const GgmlType type = s.type_router;
  if (type != GgmlType::F32 && type != GgmlType::F16) fail("router type {} is not F32 or F16", type_name(type));
  add(router, type, {n_embd, s.n_expert}, [=](std::byte* dst, size_t bytes) {
    Rng rng(seed);
    float* w = reinterpret_cast<float*>(dst);
    uint16_t* h = reinterpret_cast<uint16_t*>(dst);
    for (size_t e = 0; e < row_scale.size(); ++e)
      for (int64_t i = 0; i < n_embd; ++i) {
        const float v = row_scale[e] * rng.normal();
        if (type == GgmlType::F32) w[e * n_embd + i] = v;
        else h[e * n_embd + i] = fp32_to_fp16(v);
      }
  });
  // Small against the logits' spread (≥ 1), so the Zipf popularity still decides.
  if (with_bias) weight(blk(il, "ffn_gate_inp.bias"), GgmlType::F32, {s.n_expert}, 0.1);
}

void ModelBuilder::sigmoid_moe(int il) {
  router(il, /*with_bias=*/false);
  selection_bias(il);
  experts(il, /*with_biases=*/false);
}

void ModelBuilder::hash_routing(int il) {
  const GenSpec& s = spec_;
  const std::string name = blk(il, "ffn_gate_tid2eid.weight");
  const uint64_t seed = mix_seed(s.seed, hash_name(name));
  const int n_expert = s.n_expert, k = s.n_expert_used;
  add(name, GgmlType::I32, {k, n_vocab_}, [=](std::byte* dst, size_t bytes) {
    Rng rng(seed);
    int32_t* ids = reinterpret_cast<int32_t*>(dst);
    for (size_t row = 0; row < bytes / 4 / k; ++row) {
      int32_t* r = ids + row * k;
      for (int j = 0; j < k; ++j) {
        int32_t e;
        do e = static_cast<int32_t>(rng.next() % n_expert);
        while (std::find(r, r + j, e) != r + j);
        r[j] = e;
      }
    }
  });
}

void ModelBuilder::selection_bias(int il) { constant(blk(il, "exp_probs_b.bias"), {spec_.n_expert}, 0.0f); }

void ModelBuilder::experts(int il, bool with_biases) {
  const GenSpec& s = spec_;
  if (s.legacy_experts) {
    for (int e = 0; e < s.n_expert; ++e) {
      const std::string E = "." + std::to_string(e) + ".weight";
      weight(blk(il, ("ffn_gate" + E).c_str()), s.type_experts, {s.n_embd, s.n_ff_exp});
      weight(blk(il, ("ffn_down" + E).c_str()), s.type_experts, {s.n_ff_exp, s.n_embd});
      weight(blk(il, ("ffn_up" + E).c_str()), s.type_experts, {s.n_embd, s.n_ff_exp});
    }
    return;
  }
  const bool mixed = s.type_experts_mixed && il % 2 == 1;
  const GgmlType gate_up = mixed ? *s.type_experts_mixed : s.type_experts;
  const GgmlType down = mixed ? *s.type_experts_mixed : s.type_experts_down.value_or(s.type_experts);
  weight(blk(il, "ffn_gate_exps.weight"), fit_type(gate_up, s.n_embd), {s.n_embd, s.n_ff_exp, s.n_expert});
  weight(blk(il, "ffn_up_exps.weight"), fit_type(gate_up, s.n_embd), {s.n_embd, s.n_ff_exp, s.n_expert});
  weight(blk(il, "ffn_down_exps.weight"), fit_type(down, s.n_ff_exp), {s.n_ff_exp, s.n_embd, s.n_expert});
  if (!with_biases) return;
  weight(blk(il, "ffn_gate_exps.bias"), GgmlType::F32, {s.n_ff_exp, s.n_expert}, 0.1);
  weight(blk(il, "ffn_up_exps.bias"), GgmlType::F32, {s.n_ff_exp, s.n_expert}, 0.1);
  weight(blk(il, "ffn_down_exps.bias"), GgmlType::F32, {s.n_embd, s.n_expert}, 0.1);
}

void ModelBuilder::shared_expert(int il) {
  const GenSpec& s = spec_;
  const int64_t n_ff = int64_t{s.n_ff_exp} * s.n_expert_shared;
  weight(blk(il, "ffn_gate_shexp.weight"), fit_type(s.type_dense, s.n_embd), {s.n_embd, n_ff});
  weight(blk(il, "ffn_up_shexp.weight"), fit_type(s.type_dense, s.n_embd), {s.n_embd, n_ff});
  weight(blk(il, "ffn_down_shexp.weight"), fit_type(s.type_dense, n_ff), {n_ff, s.n_embd});
}

void ModelBuilder::nextn_head(int il) {
  const int64_t d = spec_.n_embd;
  weight(blk(il, "nextn.eh_proj.weight"), fit_type(spec_.type_attn, 2 * d), {2 * d, d});
  norm(blk(il, "nextn.enorm.weight"), d);
  norm(blk(il, "nextn.hnorm.weight"), d);
  norm(blk(il, "nextn.shared_head_norm.weight"), d);
}

void ModelBuilder::add(const std::string& name, GgmlType type, std::vector<int64_t> ne, gguf::Writer::Fill fill) {
  uint64_t n = 1;
  for (int64_t d : ne) n *= static_cast<uint64_t>(d);
  writer_.add_tensor(name, type, std::move(ne), std::move(fill));
  ++n_tensors_;
  data_bytes_ += n / type_traits(type).block_elems * type_traits(type).block_bytes;
}

GenResult ModelBuilder::write(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  writer_.write(path);
  GenResult r;
  r.n_tensors = n_tensors_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Tensor bytes stand in for the size when the output is not a regular file (-o /dev/null
  // measures generation speed alone).
  std::error_code ec;
  r.bytes = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path) : data_bytes_;
  return r;
}

}  // namespace sluice::gen
