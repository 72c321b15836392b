// gen-model: random-weight GGUF files in the real tensor layout and metadata keys of a supported
// architecture, for benchmarks and tests of models too large to download (Qwen3-235B-A22B at
// Q4_K is ~130 GiB). Data is drawn inside the writer's fill callbacks, so files stream to disk
// at write speed and memory holds one tensor at a time. Weights are ~N(0, 1/n_in) (embedding
// rows, a lookup of fan-in 1, have RMS 1; norms are 1), so activations stay finite through every
// layer; a real BPE tokenizer is embedded so the models tokenize and detokenize like real ones.
//
// Adding an architecture: a writer function in its own gen_<family>.cpp that sets the family's
// keys and adds its tensors with the shared ModelBuilder pieces, named by the family's line in the
// architecture registry (model/archs/registry.cpp), and optionally a preset in gen_model.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quant/types.h"

namespace sluice {

struct GenSpec {
  std::string preset;       // the preset it started from
  std::string arch;         // general.architecture: qwen3moe, qwen3, llama, deepseek2, gpt-oss, glm4moe
  std::string name;         // general.name
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;         // q/k/v head size; n_head·head_dim may differ from n_embd. MLA: the
                            // no-rope part of a key (qk_nope) and the value head (v_head_dim)
  int n_ff = 0;             // dense feed-forward size (MoE files still carry it as a key)
  int n_ff_exp = 0;         // routed expert feed-forward size
  int n_expert = 0;         // 0: dense
  int n_expert_used = 0;
  int n_expert_shared = 0;  // always-on shared experts, each of n_ff_exp (resident weights)
  int n_leading_dense = 0;  // first layers with a dense FFN; at most n_layer - 1 are (see builder.h)
  int n_vocab = 0;          // 0: the embedded tokenizer's size; larger pads it with unused tokens
  int n_ctx = 4096;         // context_length
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  // MLA (deepseek2): low-rank query (0: plain attn_q) and KV latent; rope_dim rotated dims per
  // head on top of head_dim, shared by all heads on the key side.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int rope_dim = 0;
  // Routing (deepseek2, glm4moe): sigmoid scores with an exp_probs_b selection bias, optional
  // group-limited top-k, selected weights renormalised and scaled.
  bool sigmoid_gating = false;
  int n_expert_groups = 0;  // 0: no group limit
  int n_group_used = 0;
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;  // 0: key not written
  bool qk_norm = false;     // glm4moe: per-head QK RMSNorm (GLM-4.5/4.6 355B, not Air)
  int n_nextn = 0;          // glm4moe, deepseek2: MTP layers appended after n_layer; deepseek4:
                            // 1 writes the model's separate MTP GGUF instead
  int sliding_window = 0;   // gpt-oss: window of the even layers
  // YaRN context extension as the HF config sets it (factor 0: none). yarn_log_mul is the value
  // llama.cpp's deepseek2 converter writes: 0.1 · mscale_all_dim.
  float yarn_factor = 0.0f;
  int yarn_orig_ctx = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;
  // DeepSeek V4 (deepseek4): grouped low-rank output projection, hyper-connection streams, the
  // lightning indexer of ratio-4 layers, hash-routed first layers, SwiGLU clamp. Layer kinds
  // follow the real file: two window-only layers, then ratio 4 and 128 alternating.
  int n_out_groups = 0;       // attention.output_group_count
  int out_lora_rank = 0;      // attention.output_lora_rank
  int n_hc = 0;               // hyper_connection.count
  int indexer_heads = 0;
  int indexer_dim = 0;
  int indexer_top_k = 0;
  int n_hash_layers = 0;      // first layers routed by token id (at most n_layer)
  float compress_rope_base = 0.0f;
  float swiglu_clamp = 0.0f;  // 0: no clamp keys
  GgmlType type_router = GgmlType::F32;  // ffn_gate_inp
  GgmlType type_aux = GgmlType::F16;     // deepseek4 hc mixers, compressors, indexer weights_proj
  bool tied_output = false;     // no output.weight: the head reuses token_embd
  bool legacy_experts = false;  // Mixtral's old blk.N.ffn_{gate,up,down}.E.weight layout
  GgmlType type_experts = GgmlType::Q4_K;
  std::optional<GgmlType> type_experts_down;   // ffn_down_exps when it differs from gate/up
  // Mixed expert sizes as in real 2-bit builds: the routed experts (gate, up and down) of the odd
  // layers are of this type instead.
  std::optional<GgmlType> type_experts_mixed;
  GgmlType type_attn = GgmlType::Q4_K;    // attn_q, attn_k, attn_output
  GgmlType type_attn_v = GgmlType::Q6_K;  // attn_v, one step up as in Q4_K_M files
  GgmlType type_embd = GgmlType::Q4_K;
  GgmlType type_output = GgmlType::Q6_K;
  GgmlType type_dense = GgmlType::Q4_K;   // dense FFN layers and shared experts
  double zipf = 0.0;        // > 0: expert popularity ∝ rank^-zipf (see zipf.h)
  uint64_t seed = 1;
  std::string vocab_from;   // GGUF whose tokenizer.* keys are copied
};

struct GenPreset {
  const char* name;
  const char* summary;
};
const std::vector<GenPreset>& gen_presets();
// The preset's spec (real dimensions, Q4_K_M-like types); throws listing the preset names.
GenSpec gen_preset(const std::string& name);

// Throws naming the first field that cannot be written (non-positive size, heads not grouping
// over KV heads, a type gen-model cannot draw, ...).
void validate(const GenSpec& spec);

// The tokenizer used when none is given: $SLUICE_VOCAB, else <source_dir>/models/
// sluice-tiny-moe.gguf, else the first <source_dir>/tests/data/vocab/*.gguf; "" when none exists.
std::string default_vocab(const std::string& source_dir);

struct GenResult {
  uint64_t bytes = 0;
  size_t n_tensors = 0;
  double seconds = 0;
};

// Writes the model; throws sluice::Error (and leaves no partial file) on any failure.
GenResult write_random_model(const GenSpec& spec, const std::string& path);

}  // namespace sluice
