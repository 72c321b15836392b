// Shared transformer blocks the architecture files compose: attention over the KV cache, dense
// SwiGLU feed-forward, MoE routing and the expert-major MoE feed-forward. Each block reads and
// writes row-major activations (n_tok × width) and reports its named outputs to the dump hook.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/forward_context.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "ops/rope.h"

namespace sluice {

// Matmul plus an optional F32 bias added to every row: y (n_tok, n_out) = x · Wᵀ + b.
void linear(ForwardContext& ctx, const Tensor& w, const Tensor& b, const float* x, float* y);

struct AttentionWeights {
  Tensor norm;            // (n_embd)
  Tensor wq;              // (n_embd, n_head·head_dim_k)
  Tensor wk;              // (n_embd, n_head_kv·head_dim_k)
  Tensor wv;              // (n_embd, n_head_kv·head_dim_v)
  Tensor wo;              // (n_head·head_dim_v, n_embd)
  Tensor bq, bk, bv, bo;  // optional biases of the four projections
  Tensor q_norm, k_norm;  // optional per-head RMSNorm weights (head_dim_k)
  Tensor sinks;           // optional (n_head) attention-sink logits
};

struct AttentionConfig {
  int n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  float scale = 1.0f;
  int window = 0;
  float eps = 1e-5f;
  const RopeCache* rope = nullptr;
};

// x += Wo · Attention(RoPE(norm_q(Wq·n)), RoPE(norm_k(Wk·n)), Wv·n), n = RMSNorm(x).
void attention_block(ForwardContext& ctx, int il, const AttentionWeights& w, const AttentionConfig& c, float* x);

// Dense SwiGLU: out = down(silu(gate·xn) ⊙ up·xn). gate/up (n_embd, n_ff), down (n_ff, n_embd).
struct FfnWeights {
  Tensor gate, up, down;
};
void swiglu_ffn(ForwardContext& ctx, int il, const FfnWeights& w, const float* xn, float* out, const char* name);

struct RouterWeights {
  Tensor gate_inp;     // (n_embd, n_expert)
  Tensor gate_inp_b;   // optional (n_expert) router bias
  Tensor exp_probs_b;  // optional (n_expert) selection-only bias (DeepSeek V3, GLM)
  Tensor tid2eid;      // optional I32 (n_used, n_vocab): hash routing, experts fixed by token id (DeepSeek V4)
};

struct RouterConfig {
  int n_expert = 0, n_used = 0;
  GatingFunc gating = GatingFunc::kSoftmax;
  bool norm = false;        // renormalise the chosen weights to sum 1
  float scale = 1.0f;       // then multiply them by this
  int n_groups = 0, n_groups_used = 0;  // group-limited selection when n_groups > 1
};

// Gate scores from router logits (n values); the selection bias is added to these, and the chosen
// experts are weighted by them. kSoftmaxWeight keeps the logits (softmax runs over the chosen).
void gate_scores(GatingFunc g, const float* logits, float* scores, int n);

// Chooses n_used experts per token: ids/weights (n_tok, n_used), in descending selection order.
void route(ForwardContext& ctx, int il, const RouterWeights& w, const RouterConfig& c, const float* xn,
           int32_t* ids, float* weights);

enum class ExpertActivation {
  kSwiglu,     // silu(gate) ⊙ up
  kSwigluOai,  // gpt-oss: clamp, gate·σ(1.702·gate) ⊙ (up + 1)
  kSwigluClamp,  // DeepSeek V4: silu(min(gate, limit)) ⊙ clamp(up, −limit, limit); limit ≤ 1e-6: plain
};

// In place g[i] = silu(min(g[i], limit)) · clamp(u[i], −limit, limit) (kSwigluClamp).
void swiglu_clamped(float* g, const float* u, int64_t n, float limit);

// out (n_tok, n_embd) = Σ_k weights[t,k] · expert_{ids[t,k]}(xn[t]), evaluated expert-major: each
// chosen expert is fetched once from the store and applied to all rows routed to it. Slot sums
// are taken in slot order after all experts finish, so results never depend on read order.
void moe_experts(ForwardContext& ctx, int il, const int32_t* ids, const float* weights, int n_used,
                 ExpertActivation act, const float* xn, float* out, float limit = 0.0f);

// The feed-forward half of a layer: RMSNorm, then a dense SwiGLU (router.gate_inp empty) or the
// routed experts plus an optional resident shared expert.
struct FfnLayerWeights {
  Tensor norm;           // (n_embd)
  FfnWeights dense;      // dense layers: gate/up (n_embd, n_ff), down (n_ff, n_embd)
  RouterWeights router;  // MoE layers
  FfnWeights shexp;      // optional shared expert: gate/up (n_embd, n_ff_shexp), down (n_ff_shexp, n_embd)
};

// Routing settings as the GGUF keys give them; architectures override what they hard-code.
RouterConfig router_config(const HParams& hp);
// blk.N.attn_norm (n_embd) and the four projections attn_{q,k,v,output}: (n_embd, q_dim),
// (n_embd, k_dim), (n_embd, v_dim), (o_dim, n_embd); biases, QK norms and sinks are the
// architecture's to add.
AttentionWeights load_attention(const WeightLoader& wl, int il, int64_t n_embd, int64_t q_dim,
                                int64_t k_dim, int64_t v_dim, int64_t o_dim);
// blk.N.ffn_{gate,up,down}<suffix>.weight with dims (n_embd, n_ff) and (n_ff, n_embd).
FfnWeights load_swiglu(const WeightLoader& wl, int il, const std::string& suffix, int64_t n_embd, int64_t n_ff);
// blk.N.ffn_{gate,up,down}_exps.weight: (n_embd, n_ff, n_expert) ×2 and (n_ff, n_embd, n_expert).
ExpertLayerTensors load_merged_experts(const WeightLoader& wl, int il, int64_t n_embd, int64_t n_ff, int64_t n_expert);
// The routed-expert tensors of the two layouts above, by their name after "blk.N." (the families'
// ArchEntry::routed_tensor): merged, blk.N.ffn_{gate,up,down}_exps.* (weights and any biases);
// or merged and per expert, blk.N.ffn_{gate,up,down}.E.* (legacy Mixtral, load_swiglu with ".E").
bool merged_expert_tensor(std::string_view block_rest);
bool merged_or_per_expert_tensor(std::string_view block_rest);
// x += FFN(RMSNorm(x)).
void ffn_block(ForwardContext& ctx, int il, const FfnLayerWeights& w, const RouterConfig& rc, ExpertActivation act,
               float eps, float* x);

}  // namespace sluice
