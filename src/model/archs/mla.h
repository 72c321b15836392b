// Multi-head latent attention (DeepSeek V2/V3, Kimi K2) with the absorbed formulation: the KV
// cache holds, per token and layer, only the RMS-normalised latent c (kv_lora) followed by the
// rotated shared rope key k_pe (n_rot). Keys and values are never decompressed:
//   q·k = (W_kb,h · q_nope,h)·c + q_pe,h·k_pe      (W_kb absorbed into the query)
//   o_h = W_vb,h · Σ_p softmax_p · c_p              (W_vb applied after attending over latents)
// which equals attention over the decompressed per-head K/V exactly in real arithmetic.
//
// Cache size for real DeepSeek V3 dims (61 layers, kv_lora 512, rope 64, 128 heads with K
// 128+64 and V 128): latent 576 values per token and layer = 140,544 B/token in fp32 (70,272 in
// fp16) against 40,960 values = 9,994,240 B/token (4,997,120) for full K/V: 71× smaller. At 32k
// context: 4.29 GiB fp32 / 2.14 GiB fp16 instead of 305 GiB / 152.5 GiB.
#pragma once

#include "model/blocks.h"

namespace sluice {

struct MlaWeights {
  Tensor norm;       // (n_embd)
  Tensor wq_a;       // (n_embd, q_lora); absent when the query is a plain projection (V2-Lite)
  Tensor q_a_norm;   // (q_lora)
  Tensor wq_b;       // (q_lora, n_head·(nope+n_rot))
  Tensor wq;         // (n_embd, n_head·(nope+n_rot)) when there is no query LoRA
  Tensor wkv_a;      // (n_embd, kv_lora+n_rot): latent then the shared rope key
  Tensor kv_a_norm;  // (kv_lora)
  Tensor wk_b;       // (nope, kv_lora, n_head): per head, kv_lora rows of nope values
  Tensor wv_b;       // (kv_lora, head_dim_v, n_head): per head, head_dim_v rows of kv_lora values
  Tensor wo;         // (n_head·head_dim_v, n_embd)
};

struct MlaConfig {
  int n_head = 0, kv_lora = 0, nope = 0, n_rot = 0, head_dim_v = 0;
  float scale = 1.0f;  // on q·k, including the YaRN mscale²
  float eps = 1e-6f;
  const RopeCache* rope = nullptr;  // over n_rot dims
};

// Floats per cached position: the latent and the rope key.
inline int mla_cache_width(const MlaConfig& c) { return c.kv_lora + c.n_rot; }

// x += Wo · MLA(RMSNorm(x)); appends each token's latent and rope key to layer il of the cache
// (whose K width must be mla_cache_width; V width may be 0: values are read from the latent).
void mla_attention_block(ForwardContext& ctx, int il, const MlaWeights& w, const MlaConfig& c, float* x);

}  // namespace sluice
