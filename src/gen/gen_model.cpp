// gen-model presets (real dimensions and hyperparameters of each model, from its HF config),
// spec validation, default tokenizer lookup and the dispatch to the family's writer (its
// ArchEntry::gen in the one registry, model/archs/registry.h).
#include "gen/gen_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "gen/builder.h"
#include "gen/random_fill.h"
#include "model/archs/registry.h"

namespace sluice {

namespace {

GenSpec qwen3_moe(std::string preset, std::string name, int n_layer, int n_embd, int n_head, int n_ff, int n_ff_exp) {
  GenSpec s;
  s.preset = std::move(preset);
  s.arch = "qwen3moe";
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.n_embd = n_embd;
  s.n_head = n_head;
  s.n_head_kv = 4;
  s.head_dim = 128;
  s.n_ff = n_ff;
  s.n_ff_exp = n_ff_exp;
  s.n_expert = 128;
  s.n_expert_used = 8;
  s.n_vocab = 151936;
  s.n_ctx = 40960;  // the 2507 releases raise it to 262144: --ctx 262144
  s.rope_base = 1e6f;
  s.rms_eps = 1e-6f;
  return s;
}

// DeepSeek V3 and Kimi K2 (configs: 61 layers, d 7168, MLA q_lora 1536 / kv_lora 512, qk_nope
// 128 + qk_rope 64, v_head 128, dense ff 18432, experts of 2048 with one shared, top-8, sigmoid
// scores with a correction bias, normalised top-k, YaRN from a 4096 context with mscale_all_dim
// 1). Routed experts Q2_K as in the ~2.5-bit releases that make these models fit a workstation.
GenSpec deepseek_v3_like(std::string preset, std::string name, int n_head, int n_expert) {
  GenSpec s;
  s.preset = std::move(preset);
  s.arch = "deepseek2";
  s.name = std::move(name);
  s.n_layer = 61;
  s.n_embd = 7168;
  s.n_head = n_head;
  s.n_head_kv = 1;  // the converter stores MLA as one shared latent
  s.head_dim = 128;
  s.rope_dim = 64;
  s.q_lora_rank = 1536;
  s.kv_lora_rank = 512;
  s.n_ff = 18432;
  s.n_ff_exp = 2048;
  s.n_expert = n_expert;
  s.n_expert_used = 8;
  s.n_expert_shared = 1;
  s.sigmoid_gating = true;
  s.expert_weights_norm = true;
  s.rms_eps = 1e-6f;
  s.yarn_orig_ctx = 4096;
  s.yarn_log_mul = 0.1f;  // 0.1 · mscale_all_dim (1.0), as llama.cpp's converter writes it
  s.type_experts = GgmlType::Q2_K;
  return s;
}

// gpt-oss (configs: d 2880, 64 heads x 64, 8 KV heads, experts of 2880 top-4, sliding window
// 128 on alternating layers, rope theta 150000 with YaRN x32 over 4096, vocab 201088). Experts
// MXFP4 as released; the rest Q8_0 (rows of 2880 are no multiple of the K-quants' 256).
GenSpec gpt_oss(std::string preset, std::string name, int n_layer, int n_expert) {
  GenSpec s;
  s.preset = std::move(preset);
  s.arch = "gpt-oss";
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.n_embd = 2880;
  s.n_head = 64;
  s.n_head_kv = 8;
  s.head_dim = 64;
  s.n_ff = s.n_ff_exp = 2880;
  s.n_expert = n_expert;
  s.n_expert_used = 4;
  s.n_vocab = 201088;
  s.n_ctx = 131072;
  s.rope_base = 150000.0f;
  s.rms_eps = 1e-5f;
  s.sliding_window = 128;
  s.yarn_factor = 32.0f;
  s.yarn_orig_ctx = 4096;
  s.type_experts = GgmlType::MXFP4;
  s.type_attn = s.type_attn_v = s.type_embd = s.type_output = s.type_dense = GgmlType::Q8_0;
  return s;
}

// GLM-4.5-Air and GLM-4.6 (configs: 96 heads x 128, 8 KV heads, partial_rotary_factor 0.5,
// q/k/v biases, one shared expert, top-8 sigmoid with a correction bias, normalised, n_group 1,
// one nextn layer, vocab 151552, rope theta 1e6).
GenSpec glm(std::string preset, std::string name, int n_layer, int n_embd, int n_ff, int n_ff_exp, int n_expert,
            int n_dense) {
  GenSpec s;
  s.preset = std::move(preset);
  s.arch = "glm4moe";
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.n_embd = n_embd;
  s.n_head = 96;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.n_ff = n_ff;
  s.n_ff_exp = n_ff_exp;
  s.n_expert = n_expert;
  s.n_expert_used = 8;
  s.n_expert_shared = 1;
  s.n_leading_dense = n_dense;
  s.sigmoid_gating = true;
  s.n_expert_groups = s.n_group_used = 1;
  s.expert_weights_norm = true;
  s.n_nextn = 1;
  s.n_vocab = 151552;
  s.rope_base = 1e6f;
  s.rms_eps = 1e-5f;
  return s;
}

// DeepSeek-V4-Flash (config: 43 layers, d 4096, 64 heads, one shared K=V head of 512 with 64
// rope dims, q LoRA 1024, output in 8 groups of LoRA 1024, window 128, indexer 64 × 128 top-512,
// 256 experts of 2048 top-6 + 1 shared, sqrt-softplus routing scaled 1.5, SwiGLU clamp 10, 3 hash
// layers, hc 4; window layers rope 10000, compressed ones 160000 with YaRN x16 over 65536). Types
// as in ds4's 2-bit build: routed gate/up IQ2_XXS, down Q2_K; Q8_0 attention, shared expert and
// head; F16 embedding, router, hc mixers, compressors and indexer weights; F32 norms and vectors.
GenSpec deepseek_v4_flash(std::string preset) {
  GenSpec s;
  s.preset = std::move(preset);
  s.arch = "deepseek4";
  s.name = "DeepSeek-V4-Flash (random weights)";
  s.n_layer = 43;
  s.n_embd = 4096;
  s.n_head = 64;
  s.n_head_kv = 1;
  s.head_dim = 512;
  s.rope_dim = 64;
  s.q_lora_rank = 1024;
  s.n_out_groups = 8;
  s.out_lora_rank = 1024;
  s.sliding_window = 128;
  s.indexer_heads = 64;
  s.indexer_dim = 128;
  s.indexer_top_k = 512;
  s.n_hc = 4;
  s.n_ff_exp = 2048;
  s.n_expert = 256;
  s.n_expert_used = 6;
  s.n_expert_shared = 1;
  s.n_hash_layers = 3;
  s.expert_weights_norm = true;
  s.expert_weights_scale = 1.5f;
  s.swiglu_clamp = 10.0f;
  s.n_vocab = 129280;
  s.n_ctx = 1048576;
  s.rope_base = 10000.0f;
  s.compress_rope_base = 160000.0f;
  s.yarn_factor = 16.0f;
  s.yarn_orig_ctx = 65536;
  s.rms_eps = 1e-6f;
  s.type_experts = GgmlType::IQ2_XXS;
  s.type_experts_down = GgmlType::Q2_K;
  s.type_attn = s.type_attn_v = s.type_dense = s.type_output = GgmlType::Q8_0;
  s.type_embd = s.type_router = s.type_aux = GgmlType::F16;
  return s;
}

GenSpec make_preset(const std::string& name) {
  if (name == "deepseek-v4-flash") return deepseek_v4_flash(name);
  if (name == "qwen3-30b-a3b") return qwen3_moe(name, "Qwen3-30B-A3B (random weights)", 48, 2048, 32, 6144, 768);
  if (name == "qwen3-235b-a22b") return qwen3_moe(name, "Qwen3-235B-A22B (random weights)", 94, 4096, 64, 12288, 1536);
  if (name == "deepseek-v3") {
    GenSpec s = deepseek_v3_like(name, "DeepSeek-V3 (random weights)", 128, 256);
    s.n_leading_dense = 3;
    s.n_expert_groups = 8;
    s.n_group_used = 4;
    s.expert_weights_scale = 2.5f;
    s.n_vocab = 129280;
    s.n_ctx = 163840;
    s.rope_base = 10000.0f;
    s.yarn_factor = 40.0f;
    return s;
  }
  if (name == "kimi-k2") {  // Kimi-K2-Instruct (the first release; 0905 doubles the YaRN factor)
    GenSpec s = deepseek_v3_like(name, "Kimi-K2 (random weights)", 64, 384);
    s.n_leading_dense = 1;
    s.n_expert_groups = s.n_group_used = 1;
    s.expert_weights_scale = 2.827f;
    s.n_vocab = 163840;
    s.n_ctx = 131072;
    s.rope_base = 50000.0f;
    s.yarn_factor = 32.0f;
    s.yarn_beta_fast = s.yarn_beta_slow = 1.0f;
    return s;
  }
  if (name == "gpt-oss-20b") return gpt_oss(name, "gpt-oss-20b (random weights)", 24, 32);
  if (name == "gpt-oss-120b") return gpt_oss(name, "gpt-oss-120b (random weights)", 36, 128);
  if (name == "glm-4.5-air") {
    GenSpec s = glm(name, "GLM-4.5-Air (random weights)", 46, 4096, 10944, 1408, 128, 1);
    s.expert_weights_scale = 1.0f;
    s.n_ctx = 131072;
    return s;
  }
  if (name == "glm-4.6") {
    GenSpec s = glm(name, "GLM-4.6 (random weights)", 92, 5120, 12288, 1536, 160, 3);
    s.expert_weights_scale = 2.5f;
    s.qk_norm = true;
    s.n_ctx = 202752;
    s.type_experts = GgmlType::Q2_K;
    return s;
  }
  GenSpec s;
  s.preset = name;
  if (name == "tiny") {
    s = qwen3_moe(name, "sluice tiny qwen3moe (random weights)", 2, 128, 4, 256, 128);
    s.head_dim = 64;  // q width 256 ≠ n_embd 128, as in the real models
    s.n_head_kv = 2;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_vocab = 0;
    s.n_ctx = 4096;
    s.tied_output = true;
    s.type_experts = s.type_attn = s.type_attn_v = s.type_embd = s.type_output = s.type_dense = GgmlType::F32;
  } else if (name == "mixtral-8x7b") {
    s.arch = "llama";
    s.name = "Mixtral-8x7B (random weights)";
    s.n_layer = 32;
    s.n_embd = 4096;
    s.n_head = 32;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_ff = s.n_ff_exp = 14336;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_vocab = 32000;
    s.n_ctx = 32768;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-5f;
  } else if (name == "qwen3-dense") {  // Qwen3-0.6B
    s.arch = "qwen3";
    s.name = "Qwen3-0.6B (random weights)";
    s.n_layer = 28;
    s.n_embd = 1024;
    s.n_head = 16;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_ff = 3072;
    s.n_vocab = 151936;
    s.n_ctx = 40960;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-6f;
    s.tied_output = true;
  } else if (name == "llama-dense") {  // TinyLlama-1.1B
    s.arch = "llama";
    s.name = "TinyLlama-1.1B (random weights)";
    s.n_layer = 22;
    s.n_embd = 2048;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.head_dim = 64;
    s.n_ff = 5632;
    s.n_vocab = 32000;
    s.n_ctx = 2048;
    s.rope_base = 10000.0f;
    s.rms_eps = 1e-5f;
  } else {
    std::string names;
    for (const auto& p : gen_presets()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
    fail("unknown preset '{}'; presets: {}", name, names);
  }
  return s;
}

void require_positive(int v, const char* what) {
  if (v <= 0) fail("{} is {}, expected a positive number", what, v);
}

}  // namespace

const std::vector<GenPreset>& gen_presets() {
  static const std::vector<GenPreset> presets = {
      {"tiny", "qwen3moe, 2 layers, d 128, 4 heads x 64, 8 experts top-2, F32: a fast test model"},
      {"qwen3-30b-a3b", "qwen3moe, 48 layers, d 2048, 32 heads x 128, 128 experts top-8 (ff 768)"},
      {"qwen3-235b-a22b", "qwen3moe, 94 layers, d 4096, 64 heads x 128, 128 experts top-8 (ff 1536)"},
      {"mixtral-8x7b", "llama, 32 layers, d 4096, 32 heads, 8 KV, 8 experts top-2 (ff 14336)"},
      {"qwen3-dense", "qwen3 (Qwen3-0.6B), 28 layers, d 1024, 16 heads x 128, ff 3072"},
      {"llama-dense", "llama (TinyLlama-1.1B), 22 layers, d 2048, 32 heads x 64, ff 5632"},
      {"deepseek-v3", "deepseek2 MLA, 61 layers (3 dense), d 7168, 128 heads, 256 experts top-8 (ff 2048) + 1 shared, Q2_K"},
      {"kimi-k2", "deepseek2 MLA, 61 layers (1 dense), d 7168, 64 heads, 384 experts top-8 (ff 2048) + 1 shared, Q2_K"},
      {"gpt-oss-20b", "gpt-oss, 24 layers, d 2880, 64 heads x 64, 8 KV, 32 experts top-4 (ff 2880), MXFP4"},
      {"gpt-oss-120b", "gpt-oss, 36 layers, d 2880, 64 heads x 64, 8 KV, 128 experts top-4 (ff 2880), MXFP4"},
      {"glm-4.5-air", "glm4moe, 46 layers (1 dense) + 1 nextn, d 4096, 96 heads x 128, 128 experts top-8 (ff 1408) + 1 shared"},
      {"deepseek-v4-flash", "deepseek4, 43 layers, d 4096, 64 heads, K=V head 512, hc 4, 256 experts top-6 (ff 2048) + 1 shared, "
                            "3 hash layers, IQ2_XXS/Q2_K"},
      {"glm-4.6", "glm4moe, 92 layers (3 dense) + 1 nextn, d 5120, 96 heads x 128, QK-norm, 160 experts top-8 (ff 1536) + 1 shared, Q2_K"},
  };
  return presets;
}

GenSpec gen_preset(const std::string& name) { return make_preset(name); }

void validate(const GenSpec& s) {
  const ArchEntry* entry = find_arch(s.arch);
  if (!entry || !entry->gen) fail("gen-model cannot write architecture '{}'", s.arch);
  require_positive(s.n_layer, "--layers");
  require_positive(s.n_embd, "--embd");
  require_positive(s.n_head, "--heads");
  require_positive(s.n_head_kv, "--kv-heads");
  require_positive(s.head_dim, "--head-dim");
  require_positive(s.n_ctx, "--ctx");
  if (s.n_head % s.n_head_kv) fail("{} query heads cannot be grouped over {} KV heads", s.n_head, s.n_head_kv);
  if (s.head_dim % 2) fail("--head-dim {} must be even for RoPE", s.head_dim);
  if (s.n_vocab < 0) fail("--vocab {} is negative", s.n_vocab);
  if (s.n_expert_shared < 0) fail("--shared-experts {} is negative", s.n_expert_shared);
  if (s.n_leading_dense < 0) fail("--leading-dense {} is negative", s.n_leading_dense);
  if (s.n_expert < 0) fail("--experts {} is negative", s.n_expert);
  if (s.n_expert > 0) {
    require_positive(s.n_ff_exp, "--ff-exp");
    if (s.n_leading_dense > 0) require_positive(s.n_ff, "--ff");
    if (s.n_expert_groups > 0) {
      if (s.n_expert % s.n_expert_groups)
        fail("--experts {} cannot be split into the preset's {} expert groups", s.n_expert, s.n_expert_groups);
      if (s.n_group_used < 1 || s.n_group_used > s.n_expert_groups ||
          s.n_group_used * (s.n_expert / s.n_expert_groups) < s.n_expert_used)
        fail("{} of {} expert groups of {} experts cannot supply --experts-used {}", s.n_group_used, s.n_expert_groups,
             s.n_expert / s.n_expert_groups, s.n_expert_used);
    }
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
      fail("--experts-used {} must be between 1 and the {} experts", s.n_expert_used, s.n_expert);
  } else {
    require_positive(s.n_ff, "--ff");
    if (s.legacy_experts) fail("--legacy-experts needs a model with experts");
  }
  if (!(s.zipf >= 0) || !std::isfinite(s.zipf)) fail("--zipf {} must be a finite number ≥ 0", s.zipf);
  if (s.zipf > 0 && s.n_expert == 0) fail("--zipf needs a model with experts");
  const std::pair<const char*, GgmlType> types[] = {
      {"--type-experts", s.type_experts}, {"--type-experts-down", s.type_experts_down.value_or(s.type_experts)},
      {"--mixed-experts", s.type_experts_mixed.value_or(s.type_experts)}, {"--type-attn", s.type_attn}, {"--type-attn (attn_v)", s.type_attn_v},
      {"--type-embd", s.type_embd},       {"--type-aux", s.type_aux},       {"--type-output", s.type_output}, {"--type-dense", s.type_dense}};
  for (const auto& [flag, type] : types)
    if (std::string why = gen::undrawable_reason(type); !why.empty()) fail("{} {}: {}", flag, type_name(type), why);
}

std::string default_vocab(const std::string& source_dir) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("SLUICE_VOCAB"); env && *env) return env;
  const fs::path root(source_dir);
  if (fs::exists(root / "models" / "sluice-tiny-moe.gguf")) return (root / "models" / "sluice-tiny-moe.gguf").string();
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "tests" / "data" / "vocab", ec))
    if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

GenResult write_random_model(const GenSpec& spec, const std::string& path) {
  gen::ModelBuilder builder(spec);
  if (const ArchEntry* entry = find_arch(spec.arch); entry && entry->gen) entry->gen(builder);
  return builder.write(path);
}

}  // namespace sluice
