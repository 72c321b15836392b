// Qwen3 (dense) and Qwen3-MoE. Per layer: RMSNorm → GQA attention with per-head QK RMSNorm and
// NeoX RoPE (q width n_head·head_dim may differ from n_embd: 4096 vs 2048 in Qwen3-30B-A3B) →
// residual → RMSNorm → SwiGLU FFN (dense) or MoE (softmax router, top-k, renormalised weights,
// SwiGLU experts) → residual.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/blocks.h"
#include "model/weights.h"

namespace sluice {

namespace {

class Qwen3 final : public Model {
 public:
  explicit Qwen3(const gguf::File& f) : Model(read_hparams(f)) {
    hp_.rope.type = RopeType::kNeox;
    moe_ = hp_.arch == "qwen3moe";
    if (moe_ && hp_.n_expert == 0) fail("qwen3moe model without {}.expert_count", hp_.arch);
    hp_.expert_weights_norm = true;  // Qwen3-MoE always renormalises (norm_topk_prob)
    load_embedding_and_head(f);
    const int64_t n_embd = hp_.n_embd;
    const int64_t hd = hp_.head_dim_k;
    if (hp_.head_dim_v != hd) fail("{}: key and value head sizes differ ({} vs {})", hp_.arch, hd, hp_.head_dim_v);
    WeightLoader wl(f);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    for (int il = 0; il < hp_.n_layer; ++il) {
      auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
      Layer& L = layers_[il];
      const int64_t q_dim = hp_.n_head[il] * hd, kv_dim = hp_.n_head_kv[il] * hd;
      L.attn.norm = wl.require_f32(n("attn_norm.weight"), {n_embd});
      L.attn.wq = wl.require(n("attn_q.weight"), {n_embd, q_dim});
      L.attn.wk = wl.require(n("attn_k.weight"), {n_embd, kv_dim});
      L.attn.wv = wl.require(n("attn_v.weight"), {n_embd, kv_dim});
      L.attn.wo = wl.require(n("attn_output.weight"), {q_dim, n_embd});
      L.attn.q_norm = wl.require_f32(n("attn_q_norm.weight"), {hd});
      L.attn.k_norm = wl.require_f32(n("attn_k_norm.weight"), {hd});
      L.ffn.norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
      if (moe_) {
        const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[il] / hp_.n_expert_used;
        L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, hp_.n_expert});
        set_lookahead(il, L.ffn.norm, L.ffn.router.gate_inp);
        expert_layout_.layers[il] = load_merged_experts(wl, il, n_embd, n_ff, hp_.n_expert);
      } else {
        L.ffn.dense = load_swiglu(wl, il, "", n_embd, hp_.n_ff[il]);
      }
    }
    router_ = router_config(hp_);
    router_.gating = GatingFunc::kSoftmax;
    rope_ = std::make_unique<RopeCache>(hp_.rope, nullptr);
  }

 protected:
  void layer(ForwardContext& ctx, int il, float* x) override {
    const Layer& L = layers_[il];
    AttentionConfig ac;
    ac.n_head = hp_.n_head[il];
    ac.n_head_kv = hp_.n_head_kv[il];
    ac.head_dim_k = ac.head_dim_v = hp_.head_dim_k;
    ac.scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim_k));
    ac.eps = hp_.rms_eps;
    ac.rope = rope_.get();
    attention_block(ctx, il, L.attn, ac, x);
    prefetch_next(ctx, il, x);
    ffn_block(ctx, il, L.ffn, router_, ExpertActivation::kSwiglu, hp_.rms_eps, x);
  }

 private:
  struct Layer {
    AttentionWeights attn;
    FfnLayerWeights ffn;
  };
  bool moe_ = false;
  RouterConfig router_;
  std::vector<Layer> layers_;
  std::unique_ptr<RopeCache> rope_;
};

}  // namespace

std::unique_ptr<Model> load_qwen3(const gguf::File& file) { return std::make_unique<Qwen3>(file); }

}  // namespace sluice
