// llama: dense (Llama 1–3, stories260K) and Mixtral-style experts, which GGUF files store under
// the same architecture name. Per layer: RMSNorm → GQA attention with normal (adjacent-pair) RoPE,
// optional per-dimension rope_freqs → residual → RMSNorm → SwiGLU FFN, or MoE (softmax router,
// top-k, renormalised) with experts either merged (ffn_*_exps, n_expert slices) or in the legacy
// layout of one tensor per expert (blk.N.ffn_gate.E.weight) → residual.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/blocks.h"
#include "model/weights.h"
#include "ops/elementwise.h"

namespace sluice {

namespace {

class Llama final : public Model {
 public:
  explicit Llama(const gguf::File& f) : Model(read_hparams(f)) {
    hp_.rope.type = RopeType::kNorm;
    hp_.expert_weights_norm = true;
    load_embedding_and_head(f);
    const int64_t n_embd = hp_.n_embd;
    const int64_t hd = hp_.head_dim_k;
    WeightLoader wl(f);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    for (int il = 0; il < hp_.n_layer; ++il) {
      auto n = [&](const std::string& what) { return WeightLoader::layer_name(il, what.c_str()); };
      Layer& L = layers_[il];
      const int64_t q_dim = hp_.n_head[il] * hd, k_dim = hp_.n_head_kv[il] * hd;
      const int64_t v_dim = hp_.n_head_kv[il] * hp_.head_dim_v, o_dim = hp_.n_head[il] * hp_.head_dim_v;
      L.attn.norm = wl.require_f32(n("attn_norm.weight"), {n_embd});
      L.attn.wq = wl.require(n("attn_q.weight"), {n_embd, q_dim});
      L.attn.wk = wl.require(n("attn_k.weight"), {n_embd, k_dim});
      L.attn.wv = wl.require(n("attn_v.weight"), {n_embd, v_dim});
      L.attn.wo = wl.require(n("attn_output.weight"), {o_dim, n_embd});
      L.attn.bq = wl.optional_f32(n("attn_q.bias"), {q_dim});
      L.attn.bk = wl.optional_f32(n("attn_k.bias"), {k_dim});
      L.attn.bv = wl.optional_f32(n("attn_v.bias"), {v_dim});
      L.attn.bo = wl.optional_f32(n("attn_output.bias"), {n_embd});
      L.ffn_norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
      if (hp_.n_expert > 0) {
        const int64_t ne = hp_.n_expert;
        const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[il];
        L.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
        set_lookahead(il, L.ffn_norm, L.router.gate_inp);
        ExpertLayerTensors& E = expert_layout_.layers[il];
        if (wl.has(n("ffn_gate_exps.weight"))) {
          E.gate = wl.require(n("ffn_gate_exps.weight"), {n_embd, n_ff, ne});
          E.up = wl.require(n("ffn_up_exps.weight"), {n_embd, n_ff, ne});
          E.down = wl.require(n("ffn_down_exps.weight"), {n_ff, n_embd, ne});
        } else {
          for (int64_t e = 0; e < ne; ++e) {
            const std::string s = "." + std::to_string(e) + ".weight";
            E.gate_each.push_back(wl.require(n("ffn_gate" + s), {n_embd, n_ff}));
            E.up_each.push_back(wl.require(n("ffn_up" + s), {n_embd, n_ff}));
            E.down_each.push_back(wl.require(n("ffn_down" + s), {n_ff, n_embd}));
          }
        }
      } else {
        const int64_t n_ff = hp_.n_ff[il];
        L.ffn.gate = wl.require(n("ffn_gate.weight"), {n_embd, n_ff});
        L.ffn.up = wl.require(n("ffn_up.weight"), {n_embd, n_ff});
        L.ffn.down = wl.require(n("ffn_down.weight"), {n_ff, n_embd});
      }
    }
    Tensor freqs = wl.optional_f32("rope_freqs.weight", {hp_.rope.n_rot / 2});
    rope_ = std::make_unique<RopeCache>(hp_.rope, freqs ? freqs.f32() : nullptr);
  }

 protected:
  void layer(ForwardContext& ctx, int il, float* x) override {
    const Layer& L = layers_[il];
    AttentionConfig ac;
    ac.n_head = hp_.n_head[il];
    ac.n_head_kv = hp_.n_head_kv[il];
    ac.head_dim_k = hp_.head_dim_k;
    ac.head_dim_v = hp_.head_dim_v;
    ac.scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim_k));
    ac.eps = hp_.rms_eps;
    ac.rope = rope_.get();
    attention_block(ctx, il, L.attn, ac, x);
    prefetch_next(ctx, il, x);

    const int64_t n_embd = hp_.n_embd;
    std::vector<float> xn(ctx.n_tok * n_embd), out(ctx.n_tok * n_embd);
    for (int64_t t = 0; t < ctx.n_tok; ++t) rmsnorm(x + t * n_embd, L.ffn_norm.f32(), xn.data() + t * n_embd, n_embd, hp_.rms_eps);
    ctx.dump("ffn_norm", il, xn.data(), n_embd);
    if (hp_.n_expert > 0) {
      RouterConfig rc;
      rc.n_expert = hp_.n_expert;
      rc.n_used = hp_.n_expert_used;
      rc.norm = true;
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
    Tensor ffn_norm;       // (n_embd)
    RouterWeights router;  // expert layers
    FfnWeights ffn;        // dense layers
  };
  std::vector<Layer> layers_;
  std::unique_ptr<RopeCache> rope_;
};

}  // namespace

std::unique_ptr<Model> load_llama(const gguf::File& file) { return std::make_unique<Llama>(file); }

}  // namespace sluice
