// DeepSeek V4 attention for one layer over the deepseek4 cache (kv/ds4_cache.h): q LoRA with a
// weighted norm on the latent and an unweighted per-head norm, one shared K=V head with RoPE on
// its last R dims, keys = the raw window ∪ pooled rows (all of them at ratio 128, the indexer's
// top-k at ratio 4) and a per-head sink in one softmax, the output rotated back by −p, then the
// grouped low-rank output projection.
#pragma once

#include <vector>

#include "model/archs/deepseek4/compressor.h"
#include "model/forward_context.h"

namespace sluice {

struct Ds4CompressorWeights {
  Tensor kv, gate;  // (d, c·w)
  std::vector<float>
      ape;      // (r, c·w) score offsets by position inside the block, dequantized at load
  Tensor norm;  // F32 (w)
};

struct Ds4AttentionWeights {
  Tensor wq_a;                 // (d, Q)
  Tensor q_a_norm;             // F32 (Q)
  Tensor wq_b;                 // (Q, H·D)
  Tensor wkv;                  // (d, D)
  Tensor kv_norm;              // F32 (D)
  Tensor sinks;                // F32 (H)
  Tensor wo_a;                 // (H·D/G, G·O): group g = rows g·O .. g·O+O−1
  Tensor wo_b;                 // (G·O, d)
  Ds4CompressorWeights comp;   // ratio ≠ 0, w = D
  Tensor idx_q_b;              // ratio 4: (Q, Ih·Id)
  Tensor idx_proj;             // ratio 4: (d, Ih)
  Ds4CompressorWeights icomp;  // ratio 4, w = Id
};

struct Ds4AttentionConfig {
  int ratio = 0;  // 0, 4 or 128
  int n_head = 0, head_dim = 0, n_groups = 0, o_rank = 0, window = 0;
  int idx_heads = 0, idx_dim = 0, idx_top_k = 0;
  float eps = 1e-6f;
  const TailRope* rope = nullptr;  // this layer's regime (q, k, pooled rows, indexer, output)
};

// out (n_tok, d) = attention of the tokens whose attn_norm output is xn (n_tok, d). Appends the
// tokens to the cache layer's rings and pooled rows; ctx.kv must be a Ds4KvCache and every
// sequence's tokens must continue it in position order.
void ds4_attention(ForwardContext& ctx, int il, const Ds4AttentionWeights& w,
                   const Ds4AttentionConfig& c, const float* xn, float* out);

}  // namespace sluice
