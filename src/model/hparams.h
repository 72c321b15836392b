// Model hyperparameters read from GGUF keys `<arch>.*`, in two steps: ModelSummary is what the
// keys state, read leniently (absent keys stay unset), which `sluice inspect` prints and sizes
// unfamiliar or vocab-only files from; HParams is that summary checked and completed with the
// defaults, for the forward pass. These keys are read in one place (read_model_summary); a family's
// file reads only keys of its own (DeepSeek V4's hyper-connections, ...) and states, where its
// default differs, what an absent shared key means (HParamDefaults: glm4moe's and deepseek4's
// gating). One struct serves every architecture; fields an architecture does not use keep their
// neutral defaults. Per-layer values (head counts, feed-forward sizes, sliding window) are expanded
// to vectors so layers never re-read keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/rope.h"

namespace sluice {

namespace gguf { class File; }

// softmax over all / sigmoid / softmax over chosen / sqrt(softplus) (DeepSeek V4)
enum class GatingFunc { kSoftmax, kSigmoid, kSoftmaxWeight, kSqrtSoftplus };

struct ModelSummary {
  std::string arch;  // general.architecture; empty when absent
  std::string name;  // general.name
  // A key holding one value per layer reports its largest here.
  std::optional<int64_t> n_layer, n_embd, n_ff, n_ff_exp, n_expert, n_expert_used,
      n_expert_shared, n_leading_dense, n_mtp_layers, key_length, value_length, kv_lora_rank,
      q_lora_rank, rope_dim, context_length, sliding_window, vocab_size;
  // head_count(_kv), feed_forward_length: one entry per layer when the file stores an array, else
  // one value (empty when absent).
  std::vector<int64_t> n_head, n_head_kv, n_ff_layers;
  std::optional<double> rope_freq_base, rope_scaling_factor;
  std::string rope_scaling_type;
  bool is_mla = false;  // kv_lora_rank present: the KV cache holds the compressed latent
  // deepseek4: per-layer compress ratios (may run past n_layer), indexer key size.
  std::vector<int64_t> compress_ratios;
  std::optional<int64_t> indexer_key_length;
  // Read only into HParams (inspect does not print them).
  std::optional<int64_t> n_ff_shexp, rope_orig_ctx, gating_func, n_expert_groups, n_group_used;
  std::optional<double> rms_eps, rope_scale_linear, yarn_beta_fast, yarn_beta_slow, yarn_attn_factor,
      expert_weights_scale;
  std::optional<bool> expert_weights_norm;
};

struct HParams {
  std::string arch;
  int n_layer = 0;
  int n_ctx_train = 0;
  int n_embd = 0;
  int n_vocab = 0;
  std::vector<int> n_head;       // per layer
  std::vector<int> n_head_kv;    // per layer
  std::vector<int> n_ff;         // per layer dense feed-forward size (0 for MoE layers without it)
  int head_dim_k = 0;            // key/query head size
  int head_dim_v = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;

  // Mixture of experts.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_expert_shared = 0;
  int n_ff_exp = 0;              // routed expert hidden size
  int n_ff_shexp = 0;            // shared expert hidden size
  int n_leading_dense = 0;       // first layers with a dense FFN instead of experts
  bool expert_weights_norm = false;
  float expert_weights_scale = 1.0f;
  GatingFunc gating = GatingFunc::kSoftmax;
  int n_expert_groups = 0;       // group-limited routing (DeepSeek V3)
  int n_group_used = 0;

  int64_t n_nextn = 0;           // nextn_predict_layers: MTP blocks block_count counts after the main layers

  // Attention variants.
  int sliding_window = 0;               // 0: full attention
  std::vector<bool> swa_layers;         // per layer: uses the sliding window (ArchEntry::windowed_layers)
  float attn_scale = 0.0f;              // 0: 1/sqrt(head_dim_k)
  int q_lora_rank = 0, kv_lora_rank = 0;  // MLA (deepseek2): compressed query / KV widths; 0: absent
  std::vector<int64_t> compress_ratios;  // deepseek4: per layer (may run past n_layer); empty: absent
  int indexer_key_length = 0;            // deepseek4: lightning indexer key size; 0: absent

  bool is_moe_layer(int il) const { return n_expert > 0 && il >= n_leading_dense; }
  int n_embd_k_gqa(int il) const { return n_head_kv[il] * head_dim_k; }
  int n_embd_v_gqa(int il) const { return n_head_kv[il] * head_dim_v; }
};

// The keys of general.architecture as the file states them; throws only on a key of the wrong type.
ModelSummary read_model_summary(const gguf::File& file);
// What a family assumes where its file leaves a shared key out.
struct HParamDefaults {
  GatingFunc gating = GatingFunc::kSoftmax;  // expert_gating_func
};

// The summary checked and completed (absent keys from `defaults` where the family has its own):
// throws naming a missing or invalid key. Arch files refine (rope type, their windowed layers).
HParams read_hparams(const gguf::File& file, const HParamDefaults& defaults = {});

}  // namespace sluice
