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
#include "ops/elementwise.h"

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
      L.ffn_norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
      if (moe_) {
        const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[il] / hp_.n_expert_used;
        const int64_t ne = hp_.n_expert;
        L.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
        set_lookahead(il, L.ffn_norm, L.router.gate_inp);
        ExpertLayerTensors& E = expert_layout_.layers[il];
        E.gate = wl.require(n("ffn_gate_exps.weight"), {n_embd, n_ff, ne});
        E.up = wl.require(n("ffn_up_exps.weight"), {n_embd, n_ff, ne});
        E.down = wl.require(n("ffn_down_exps.weight"), {n_ff, n_embd, ne});
      } else {
        const int64_t n_ff = hp_.n_ff[il];
        L.ffn.gate = wl.require(n("ffn_gate.weight"), {n_embd, n_ff});
        L.ffn.up = wl.require(n("ffn_up.weight"), {n_embd, n_ff});
        L.ffn.down = wl.require(n("ffn_down.weight"), {n_ff, n_embd});
      }
    }
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

    const int64_t n_embd = hp_.n_embd;
    std::vector<float> xn(ctx.n_tok * n_embd), out(ctx.n_tok * n_embd);
    for (int64_t t = 0; t < ctx.n_tok; ++t) rmsnorm(x + t * n_embd, L.ffn_norm.f32(), xn.data() + t * n_embd, n_embd, hp_.rms_eps);
    ctx.dump("ffn_norm", il, xn.data(), n_embd);
    if (moe_) {
      RouterConfig rc;
      rc.n_expert = hp_.n_expert;
      rc.n_used = hp_.n_expert_used;
      rc.gating = GatingFunc::kSoftmax;
      rc.norm = hp_.expert_weights_norm;
      rc.scale = hp_.expert_weights_scale;
      std::vector<int32_t> ids(ctx.n_tok * rc.n_used);
      std::vector<float> w(ctx.n_tok * rc.n_used);
      route(ctx, il, L.router, rc, xn.data(), ids.data(), w.data());
      moe_experts(ctx, il, ids.data(), w.data(), rc.n_used, ExpertActivation::kSwiglu, xn.data(), out.data());
    } else {
      swiglu_ffn(ctx, il, L.ffn, xn.data(), out.data(), "ffn_out");
    }
    add_inplace(x, out.data(), ctx.n_tok * n_embd);
  }

 private:
  struct Layer {
    AttentionWeights attn;
    Tensor ffn_norm;        // (n_embd)
    RouterWeights router;   // MoE layers
    FfnWeights ffn;         // dense layers
  };
  bool moe_ = false;
  std::vector<Layer> layers_;
  std::unique_ptr<RopeCache> rope_;
};

}  // namespace

std::unique_ptr<Model> load_qwen3(const gguf::File& file) { return std::make_unique<Qwen3>(file); }

}  // namespace sluice
