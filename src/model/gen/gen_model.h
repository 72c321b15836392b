// gen-model: random-weight GGUF files in the real tensor layout and metadata keys of a supported
// architecture, for benchmarks and tests of models too large to download (Qwen3-235B-A22B at
// Q4_K is ~130 GiB). Data is drawn inside the writer's fill callbacks, so files stream to disk
// at write speed and memory holds one tensor at a time. Weights are ~N(0, 1/n_in) (embedding
// rows, a lookup of fan-in 1, have RMS 1; norms are 1), so activations stay finite through every
// layer; a real BPE tokenizer is embedded so the models tokenize and detokenize like real ones.
//
// Adding an architecture: a preset in gen_model.cpp and a writer function in its own
// gen_<family>.cpp (declared in gen_archs.h) that sets the family's keys and adds its tensors
// with the shared ModelBuilder pieces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"

namespace sluice {

struct GenSpec {
  std::string preset;       // the preset it started from
  std::string arch;         // general.architecture: qwen3moe, qwen3, llama
  std::string name;         // general.name
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;         // q/k/v head size; n_head·head_dim may differ from n_embd
  int n_ff = 0;             // dense feed-forward size (MoE files still carry it as a key)
  int n_ff_exp = 0;         // routed expert feed-forward size
  int n_expert = 0;         // 0: dense
  int n_expert_used = 0;
  int n_vocab = 0;          // 0: the embedded tokenizer's size; larger pads it with unused tokens
  int n_ctx = 4096;         // context_length
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;     // no output.weight: the head reuses token_embd
  bool legacy_experts = false;  // Mixtral's old blk.N.ffn_{gate,up,down}.E.weight layout
  GgmlType type_experts = GgmlType::Q4_K;
  GgmlType type_attn = GgmlType::Q4_K;    // attn_q, attn_k, attn_output
  GgmlType type_attn_v = GgmlType::Q6_K;  // attn_v, one step up as in Q4_K_M files
  GgmlType type_embd = GgmlType::Q4_K;
  GgmlType type_output = GgmlType::Q6_K;
  GgmlType type_dense = GgmlType::Q4_K;   // dense FFN layers
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
