// Qwen3 (dense) and Qwen3-MoE. Per layer: RMSNorm → GQA attention with per-head QK RMSNorm and
// NeoX RoPE (q width n_head·head_dim may differ from n_embd: 4096 vs 2048 in Qwen3-30B-A3B) →
// residual → RMSNorm → SwiGLU FFN (dense) or MoE (softmax router, top-k, renormalised weights,
// SwiGLU experts) → residual. No converter writes a Qwen3-MoE MTP block; sluice reads one in the
// DeepSeek V3 nextn layout (block n_layer plus nextn.* tensors, in a separate GGUF given with
// --mtp), which is how the shipped model's trained drafter (models/sluice-tiny-moe-mtp.gguf) comes.
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/archs/decoder.h"
#include "model/weights.h"

namespace sluice {

namespace {

class Qwen3 final : public DecoderModel {
 public:
  explicit Qwen3(const gguf::File& f) : DecoderModel(read_hparams(f)) {
    hp_.rope.type = RopeType::kNeox;
    moe_ = hp_.arch == "qwen3moe";
    if (moe_ && hp_.n_expert == 0) fail("qwen3moe model without {}.expert_count", hp_.arch);
    hp_.expert_weights_norm = true;  // Qwen3-MoE always renormalises (norm_topk_prob)
    take_mtp_layers(f);
    load_embedding_and_head(f);
    if (hp_.head_dim_v != hp_.head_dim_k)
      fail("{}: key and value head sizes differ ({} vs {})", hp_.arch, hp_.head_dim_k,
           hp_.head_dim_v);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    const WeightLoader wl(f);
    for (int il = 0; il < hp_.n_layer; ++il) {
      load_layer(wl, il, layers_[il]);
      if (moe_) set_lookahead(il, layers_[il].ffn.norm, layers_[il].ffn.router.gate_inp);
    }
    router_ = router_config(hp_);
    router_.gating = GatingFunc::kSoftmax;
    rope_ = std::make_unique<RopeCache>(hp_.rope, nullptr);
  }

 protected:
  // An MTP block (the nextn layout, as tools/train-tiny-moe/train_mtp.py writes one for the
  // shipped model) is a decoder layer like the others plus its nextn.* tensors.
  void load_mtp_layer(const gguf::File&, const WeightLoader& wl, int il) override {
    layers_.resize(il + 1);
    load_layer(wl, il, layers_[il]);
  }


 private:

  // Layer il's weights; a MoE layer's routed experts go into expert_layout_.layers[il].
  void load_layer(const WeightLoader& wl, int il, Layer& L) {
    auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
    const int64_t n_embd = hp_.n_embd;
    const int64_t hd = hp_.head_dim_k;
    const int64_t q_dim = hp_.n_head[il] * hd, kv_dim = hp_.n_head_kv[il] * hd;
    L.attn = load_attention(wl, il, n_embd, q_dim, kv_dim, kv_dim, q_dim);
    L.attn.q_norm = wl.require_f32(n("attn_q_norm.weight"), {hd});
    L.attn.k_norm = wl.require_f32(n("attn_k_norm.weight"), {hd});
    L.ffn.norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
    if (!moe_) {
      L.ffn.dense = load_swiglu(wl, il, "", n_embd, hp_.n_ff[il]);
      return;
    }
    const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[il] / hp_.n_expert_used;
    L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, hp_.n_expert});
    expert_layout_.layers[il] = load_merged_experts(wl, il, n_embd, n_ff, hp_.n_expert);
  }
  bool moe_ = false;
};

}  // namespace

std::unique_ptr<Model> load_qwen3(const gguf::File& file) { return std::make_unique<Qwen3>(file); }

}  // namespace sluice
