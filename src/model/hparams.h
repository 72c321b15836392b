// Model hyperparameters read from GGUF keys `<arch>.*`. One struct serves every architecture;
// fields an architecture does not use keep their neutral defaults. Per-layer values (head counts,
// feed-forward sizes, sliding window) are expanded to vectors so layers never re-read keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/rope.h"

namespace sluice {

namespace gguf { class File; }

// softmax over all / sigmoid / softmax over chosen / sqrt(softplus) (DeepSeek V4)
enum class GatingFunc { kSoftmax, kSigmoid, kSoftmaxWeight, kSqrtSoftplus };

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

  // Attention variants.
  int sliding_window = 0;               // 0: full attention
  std::vector<bool> swa_layers;         // per layer: uses the sliding window (ArchEntry::windowed_layers)
  float attn_scale = 0.0f;              // 0: 1/sqrt(head_dim_k)

  bool is_moe_layer(int il) const { return n_expert > 0 && il >= n_leading_dense; }
  int n_embd_k_gqa(int il) const { return n_head_kv[il] * head_dim_k; }
  int n_embd_v_gqa(int il) const { return n_head_kv[il] * head_dim_v; }
};

// Reads the keys common to all architectures; arch files refine (rope type, defaults).
HParams read_hparams(const gguf::File& file);

}  // namespace sluice
