// llama: dense (Llama 1–3, stories260K) and Mixtral-style experts, which GGUF files store under
// the same architecture name. Per layer: RMSNorm → GQA attention with normal (adjacent-pair) RoPE,
// optional per-dimension rope_freqs → residual → RMSNorm → SwiGLU FFN, or MoE (softmax router,
// top-k, renormalised) with experts either merged (ffn_*_exps, n_expert slices) or in the legacy
// layout of one tensor per expert (blk.N.ffn_gate.E.weight) → residual.
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/archs/decoder.h"
#include "model/weights.h"

namespace sluice {

namespace {

class Llama final : public DecoderModel {
 public:
  explicit Llama(const gguf::File& f) : DecoderModel(read_hparams(f)) {
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
      L.attn = load_attention(wl, il, n_embd, q_dim, k_dim, v_dim, o_dim);
      L.attn.bq = wl.optional_f32(n("attn_q.bias"), {q_dim});
      L.attn.bk = wl.optional_f32(n("attn_k.bias"), {k_dim});
      L.attn.bv = wl.optional_f32(n("attn_v.bias"), {v_dim});
      L.attn.bo = wl.optional_f32(n("attn_output.bias"), {n_embd});
      L.ffn.norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
      if (hp_.n_expert > 0) {
        const int64_t ne = hp_.n_expert;
        const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[il];
        L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
        set_lookahead(il, L.ffn.norm, L.ffn.router.gate_inp);
        if (wl.has(n("ffn_gate_exps.weight"))) {
          expert_layout_.layers[il] = load_merged_experts(wl, il, n_embd, n_ff, ne);
        } else {
          ExpertLayerTensors& E = expert_layout_.layers[il];
          for (int64_t e = 0; e < ne; ++e) {
            FfnWeights w = load_swiglu(wl, il, "." + std::to_string(e), n_embd, n_ff);
            E.gate_each.push_back(w.gate);
            E.up_each.push_back(w.up);
            E.down_each.push_back(w.down);
          }
        }
      } else {
        L.ffn.dense = load_swiglu(wl, il, "", n_embd, hp_.n_ff[il]);
      }
    }
    router_ = router_config(hp_);
    router_.gating = GatingFunc::kSoftmax;
    router_.n_groups = router_.n_groups_used = 0;
    Tensor freqs = wl.optional_f32("rope_freqs.weight", {hp_.rope.n_rot / 2});
    rope_ = std::make_unique<RopeCache>(hp_.rope, freqs ? freqs.f32() : nullptr);
  }

};

}  // namespace

std::unique_ptr<Model> load_llama(const gguf::File& file) { return std::make_unique<Llama>(file); }

}  // namespace sluice
