// GLM-4.5 / GLM-4.6 (llama.cpp's GLM4_MOE). Per layer: RMSNorm → GQA attention with q/k/v biases,
// optional per-head QK RMSNorm (GLM-4.5 355B) and partial NeoX RoPE (rope.dimension_count of the
// head's dims, the rest pass through) → residual → RMSNorm (post_attention_norm) → a dense SwiGLU
// FFN for the first leading_dense_block_count layers, else MoE: sigmoid router whose selection adds
// exp_probs_b, weights renormalised and scaled, SwiGLU experts, plus an always-on shared expert →
// residual. Real files append nextn_predict_layers multi-token-prediction layers to block_count;
// the first is loaded only for MTP drafting (Model::load_mtp), as layer n_layer with its own KV.
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/archs/decoder.h"
#include "model/weights.h"

namespace sluice {

namespace {

class Glm4Moe final : public DecoderModel {
 public:
  // Sigmoid gating where the file does not say: what GLM-4.5 trains with.
  explicit Glm4Moe(const gguf::File& f)
      : DecoderModel(read_hparams(f, {.gating = GatingFunc::kSigmoid})) {
    const std::string a = hp_.arch + ".";
    // Multimodal GLM files rotate sections by separate position streams (M-RoPE).
    if (f.has(a + "rope.dimension_sections"))
      for (int64_t s : f.get_int_array(a + "rope.dimension_sections"))
        if (s != 0) fail("{}: M-RoPE (rope.dimension_sections) is not supported", hp_.arch);
    hp_.rope.type = RopeType::kNeox;
    if (hp_.n_expert == 0) fail("glm4moe model without {}expert_count", a);
    if (hp_.n_expert_shared < 1)
      fail("glm4moe model without a shared expert ({}expert_shared_count)", a);
    take_mtp_layers(f);
    if (hp_.head_dim_v != hp_.head_dim_k)
      fail("{}: key and value head sizes differ ({} vs {})", hp_.arch, hp_.head_dim_k,
           hp_.head_dim_v);
    load_embedding_and_head(f);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    for (int il = 0; il < hp_.n_layer; ++il) {
      load_layer(f, WeightLoader(f), il, layers_[il]);
      if (hp_.is_moe_layer(il))
        set_lookahead(il, layers_[il].ffn.norm, layers_[il].ffn.router.gate_inp);
    }
    router_ = router_config(hp_);
    rope_ = std::make_unique<RopeCache>(hp_.rope, nullptr);
  }

 protected:
  // The MTP block is a decoder layer like the others (its nextn.* tensors are the base's).
  void load_mtp_layer(const gguf::File& f, const WeightLoader& wl, int il) override {
    layers_.resize(il + 1);
    load_layer(f, wl, il, layers_[il]);
  }


 private:

  // Layer il's weights; a MoE layer's routed experts go into expert_layout_.layers[il].
  void load_layer(const gguf::File& f, const WeightLoader& wl, int il, Layer& L) {
    const std::string a = hp_.arch + ".";
    const int64_t hd = hp_.head_dim_k;
    const int64_t n_embd = hp_.n_embd;
    const int64_t ne = hp_.n_expert;
    const int64_t n_ff_exp = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[0];
    const int64_t n_ff_sh = f.has(a + "expert_shared_feed_forward_length")
                                ? hp_.n_ff_shexp
                                : n_ff_exp * hp_.n_expert_shared;
    auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
    const int64_t q_dim = hp_.n_head[il] * hd, kv_dim = hp_.n_head_kv[il] * hd;
    L.attn = load_attention(wl, il, n_embd, q_dim, kv_dim, kv_dim, q_dim);
    L.attn.bq = wl.optional_f32(n("attn_q.bias"), {q_dim});
    L.attn.bk = wl.optional_f32(n("attn_k.bias"), {kv_dim});
    L.attn.bv = wl.optional_f32(n("attn_v.bias"), {kv_dim});
    L.attn.q_norm = wl.optional_f32(n("attn_q_norm.weight"), {hd});
    L.attn.k_norm = wl.optional_f32(n("attn_k_norm.weight"), {hd});
    L.ffn.norm = wl.require_f32(n("post_attention_norm.weight"), {n_embd});
    if (!hp_.is_moe_layer(il)) {
      L.ffn.dense = load_swiglu(wl, il, "", n_embd, hp_.n_ff[il]);
      return;
    }
    L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
    L.ffn.router.exp_probs_b = wl.require_f32(n("exp_probs_b.bias"), {ne});
    expert_layout_.layers[il] = load_merged_experts(wl, il, n_embd, n_ff_exp, ne);
    L.ffn.shexp = load_swiglu(wl, il, "_shexp", n_embd, n_ff_sh);
  }

};

}  // namespace

std::unique_ptr<Model> load_glm4moe(const gguf::File& file) { return std::make_unique<Glm4Moe>(file); }

}  // namespace sluice
