// gen-model presets (real dimensions and hyperparameters of each model, from its HF config),
// spec validation, default tokenizer lookup and the architecture dispatch.
#include "model/gen/gen_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "model/gen/gen_archs.h"
#include "model/gen/random_fill.h"

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

GenSpec make_preset(const std::string& name) {
  if (name == "qwen3-30b-a3b") return qwen3_moe(name, "Qwen3-30B-A3B (random weights)", 48, 2048, 32, 6144, 768);
  if (name == "qwen3-235b-a22b") return qwen3_moe(name, "Qwen3-235B-A22B (random weights)", 94, 4096, 64, 12288, 1536);
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

namespace gen {

const std::vector<GenArch>& gen_arch_registry() {
  static const std::vector<GenArch> table = {
      {"qwen3moe", gen_qwen3},
      {"qwen3", gen_qwen3},
      {"llama", gen_llama},
  };
  return table;
}

}  // namespace gen

const std::vector<GenPreset>& gen_presets() {
  static const std::vector<GenPreset> presets = {
      {"tiny", "qwen3moe, 2 layers, d 128, 4 heads x 64, 8 experts top-2, F32: a fast test model"},
      {"qwen3-30b-a3b", "qwen3moe, 48 layers, d 2048, 32 heads x 128, 128 experts top-8 (ff 768)"},
      {"qwen3-235b-a22b", "qwen3moe, 94 layers, d 4096, 64 heads x 128, 128 experts top-8 (ff 1536)"},
      {"mixtral-8x7b", "llama, 32 layers, d 4096, 32 heads, 8 KV, 8 experts top-2 (ff 14336)"},
      {"qwen3-dense", "qwen3 (Qwen3-0.6B), 28 layers, d 1024, 16 heads x 128, ff 3072"},
      {"llama-dense", "llama (TinyLlama-1.1B), 22 layers, d 2048, 32 heads x 64, ff 5632"},
  };
  return presets;
}

GenSpec gen_preset(const std::string& name) { return make_preset(name); }

void validate(const GenSpec& s) {
  const auto& archs = gen::gen_arch_registry();
  if (std::none_of(archs.begin(), archs.end(), [&](const gen::GenArch& a) { return s.arch == a.arch; }))
    fail("gen-model cannot write architecture '{}'", s.arch);
  require_positive(s.n_layer, "--layers");
  require_positive(s.n_embd, "--embd");
  require_positive(s.n_head, "--heads");
  require_positive(s.n_head_kv, "--kv-heads");
  require_positive(s.head_dim, "--head-dim");
  require_positive(s.n_ctx, "--ctx");
  if (s.n_head % s.n_head_kv) fail("{} query heads cannot be grouped over {} KV heads", s.n_head, s.n_head_kv);
  if (s.head_dim % 2) fail("--head-dim {} must be even for RoPE", s.head_dim);
  if (s.n_vocab < 0) fail("--vocab {} is negative", s.n_vocab);
  if (s.n_expert < 0) fail("--experts {} is negative", s.n_expert);
  if (s.n_expert > 0) {
    require_positive(s.n_ff_exp, "--ff-exp");
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
      fail("--experts-used {} must be between 1 and the {} experts", s.n_expert_used, s.n_expert);
  } else {
    require_positive(s.n_ff, "--ff");
    if (s.legacy_experts) fail("--legacy-experts needs a model with experts");
  }
  if (!(s.zipf >= 0) || !std::isfinite(s.zipf)) fail("--zipf {} must be a finite number ≥ 0", s.zipf);
  if (s.zipf > 0 && s.n_expert == 0) fail("--zipf needs a model with experts");
  const std::pair<const char*, GgmlType> types[] = {
      {"--type-experts", s.type_experts}, {"--type-attn", s.type_attn}, {"--type-attn (attn_v)", s.type_attn_v},
      {"--type-embd", s.type_embd},       {"--type-output", s.type_output}, {"--type-dense", s.type_dense}};
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
  for (const auto& a : gen::gen_arch_registry())
    if (spec.arch == a.arch) a.write(builder);
  return builder.write(path);
}

}  // namespace sluice
