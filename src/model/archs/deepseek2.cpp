// DeepSeek V2/V3/R1 and Kimi K2 (`deepseek2`). Per layer: RMSNorm → multi-head latent attention
// (mla.h: absorbed, the KV cache holds only the normalised latent and the rope key — 576 floats
// per token and layer for V3) → residual → RMSNorm → dense SwiGLU for the first
// leading_dense_block_count layers, else routed experts (softmax or sigmoid gating, exp_probs_b
// selection bias, group-limited top-k, normalised and scaled weights) plus the resident shared
// expert → residual. RoPE (normal pairing) covers only the n_rot rope dims of q and the shared key.
//
// Two GGUF layouts: current converters split the KV up-projection into attn_k_b/attn_v_b and
// write key_length_mla/value_length_mla (key_length is then kv_lora+n_rot); older files carry one
// attn_kv_b (kv_lora → n_head·(nope+v)). For those, W_kb is transposed and W_vb gathered into
// resident fp32 copies at load (n_head·kv_lora·(nope+v) floats per layer: 8 MiB per layer for
// V2-Lite, 64 MiB for V3), because absorption needs W_kb transposed.
//
// A DeepSeek V3 file may carry its MTP block after the main layers (nextn_predict_layers, the
// GLM-4.5 layout and tensor names); Model::load_mtp loads it for MTP drafts.
#include <cmath>
#include <deque>
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/archs/mla.h"
#include "model/model.h"
#include "model/weights.h"
#include "quant/dequant.h"

namespace sluice {

namespace {

class DeepSeek2 final : public Model {
 public:
  explicit DeepSeek2(const gguf::File& f) : Model(read_hparams(f)) {
    hp_.rope.type = RopeType::kNorm;
    const std::string a = hp_.arch + ".";
    const int64_t n_head = hp_.n_head[0];
    for (int il = 1; il < hp_.n_layer; ++il)
      if (hp_.n_head[il] != n_head) fail("{}: head count varies across layers ({} vs {})", hp_.arch, hp_.n_head[il], n_head);
    // DeepSeek V3's MTP block, when a converter keeps it, is counted in block_count after the
    // main layers (the GLM-4.5 layout); it is loaded only for MTP drafting (Model::load_mtp).
    take_mtp_layers(f);
    q_lora_ = hp_.q_lora_rank;
    mc_.n_head = static_cast<int>(n_head);
    if (hp_.kv_lora_rank == 0) fail("metadata key '{}attention.kv_lora_rank' is missing or 0", a);
    mc_.kv_lora = hp_.kv_lora_rank;
    mc_.n_rot = hp_.rope.n_rot;
    const bool split = f.has(a + "attention.key_length_mla");
    hd_k_ = split ? static_cast<int>(f.get_int(a + "attention.key_length_mla")) : hp_.head_dim_k;
    mc_.head_dim_v = split ? static_cast<int>(f.get_int(a + "attention.value_length_mla")) : hp_.head_dim_v;
    mc_.nope = hd_k_ - mc_.n_rot;
    if (mc_.kv_lora <= 0 || mc_.nope <= 0 || mc_.head_dim_v <= 0)
      fail("{}: invalid MLA dims (kv_lora {}, key {} with {} rope dims, value {})", hp_.arch,
           mc_.kv_lora, hd_k_, mc_.n_rot, mc_.head_dim_v);
    mc_.eps = hp_.rms_eps;

    // YaRN (llama.cpp deepseek2): the rope itself keeps magnitude attn_factor (cancelling the
    // 1 + 0.1·ln(factor) that YaRN RoPE multiplies in), and q·k is scaled by mscale² with
    // mscale = attn_factor·(1 + 0.1·mscale_all_dim·ln(factor)). The converter writes
    // yarn_log_multiplier = 0.1·mscale_all_dim (0.1 for V3 and K2), so it is divided back.
    float mscale = 1.0f;
    if (hp_.rope.scaling == RopeScaling::kYarn) {
      const float ln_factor = std::log(1.0f / hp_.rope.freq_scale);
      const float log_mul = static_cast<float>(f.get_float_or(a + "rope.scaling.yarn_log_multiplier", 0.0)) / 0.1f;
      mscale = hp_.rope.attn_factor * (1.0f + 0.1f * log_mul * ln_factor);
      hp_.rope.attn_factor /= 1.0f + 0.1f * ln_factor;
    }
    mc_.scale = mscale * mscale / std::sqrt(static_cast<float>(hd_k_));

    load_embedding_and_head(f);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    for (int il = 0; il < hp_.n_layer; ++il) {
      load_layer(f, WeightLoader(f), il, layers_[il]);
      const FfnLayerWeights& ffn = layers_[il].ffn;
      if (hp_.is_moe_layer(il))
        set_lookahead(il, ffn.norm, ffn.router.gate_inp, ffn.router.exp_probs_b);
    }
    router_ = router_config(hp_);
    rope_ = std::make_unique<RopeCache>(hp_.rope, nullptr);
    mc_.rope = rope_.get();
  }

 protected:
  // The MTP block is a decoder layer like the others (its nextn.* tensors are the base's).
  void load_mtp_layer(const gguf::File& f, const WeightLoader& wl, int il) override {
    layers_.resize(il + 1);
    load_layer(f, wl, il, layers_[il]);
  }

  void layer(ForwardContext& ctx, int il, float* x) override {
    const Layer& L = layers_[il];
    mla_attention_block(ctx, il, L.attn, mc_, x);
    prefetch_next(ctx, il, x);
    ffn_block(ctx, il, L.ffn, router_, ExpertActivation::kSwiglu, hp_.rms_eps, x);
  }

 private:
  struct Layer {
    MlaWeights attn;
    FfnLayerWeights ffn;  // dense, or router + experts + shared experts (n_embd, n_ff_exp·n_shared)
  };

  // Layer il's weights; a MoE layer's routed experts go into expert_layout_.layers[il].
  void load_layer(const gguf::File& f, const WeightLoader& wl, int il, Layer& L) {
    const std::string a = hp_.arch + ".";
    const int64_t n_embd = hp_.n_embd;
    const int64_t n_head = mc_.n_head;
    const int64_t width = mla_cache_width(mc_);
    auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
    MlaWeights& A = L.attn;
    const int64_t q_dim = n_head * hd_k_;
    A.norm = wl.require_f32(n("attn_norm.weight"), {n_embd});
    if (q_lora_ > 0) {
      A.wq_a = wl.require(n("attn_q_a.weight"), {n_embd, q_lora_});
      A.q_a_norm = wl.require_f32(n("attn_q_a_norm.weight"), {q_lora_});
      A.wq_b = wl.require(n("attn_q_b.weight"), {q_lora_, q_dim});
    } else {
      A.wq = wl.require(n("attn_q.weight"), {n_embd, q_dim});
    }
    A.wkv_a = wl.require(n("attn_kv_a_mqa.weight"), {n_embd, width});
    A.kv_a_norm = wl.require_f32(n("attn_kv_a_norm.weight"), {mc_.kv_lora});
    if (wl.has(n("attn_k_b.weight"))) {
      A.wk_b = wl.require(n("attn_k_b.weight"), {mc_.nope, mc_.kv_lora, n_head});
      A.wv_b = wl.require(n("attn_v_b.weight"), {mc_.kv_lora, mc_.head_dim_v, n_head});
    } else {
      split_kv_b(
          wl.require(n("attn_kv_b.weight"), {mc_.kv_lora, n_head * (mc_.nope + mc_.head_dim_v)}),
          L);
    }
    A.wo = wl.require(n("attn_output.weight"), {n_head * mc_.head_dim_v, n_embd});
    L.ffn.norm = wl.require_f32(n("ffn_norm.weight"), {n_embd});
    if (!hp_.is_moe_layer(il)) {
      L.ffn.dense = load_swiglu(wl, il, "", n_embd, hp_.n_ff[il]);
      return;
    }
    const int64_t ne = hp_.n_expert, n_ff = hp_.n_ff_exp;
    if (n_ff <= 0) fail("{}: MoE layer {} needs {}expert_feed_forward_length", hp_.arch, il, a);
    L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
    L.ffn.router.exp_probs_b = wl.optional_f32(n("exp_probs_b.bias"), {ne});
    expert_layout_.layers[il] = load_merged_experts(wl, il, n_embd, n_ff, ne);
    if (hp_.n_expert_shared > 0)
      L.ffn.shexp = load_swiglu(wl, il, "_shexp", n_embd,
                                static_cast<int64_t>(hp_.n_ff_exp) * hp_.n_expert_shared);
  }

  // Legacy attn_kv_b: head h holds nope k rows then head_dim_v v rows, each of kv_lora values.
  // Builds W_kb (transposed to (nope, kv_lora) per head) and W_vb as fp32 copies.
  void split_kv_b(const Tensor& kv_b, Layer& L) {
    const int64_t H = mc_.n_head, r = mc_.kv_lora, nope = mc_.nope, dv = mc_.head_dim_v;
    std::vector<float>& kb = owned_.emplace_back(H * r * nope);  // (nope, kv_lora, n_head)
    std::vector<float>& vb = owned_.emplace_back(H * dv * r);    // (kv_lora, dv, n_head)
    std::vector<float> row(r);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < nope + dv; ++i) {
        dequantize_row(kv_b.type, kv_b.data + (h * (nope + dv) + i) * kv_b.row_bytes(), row.data(), r);
        if (i < nope)
          for (int64_t j = 0; j < r; ++j) kb[(h * r + j) * nope + i] = row[j];
        else
          std::copy_n(row.data(), r, vb.data() + (h * dv + (i - nope)) * r);
      }
    auto f32 = [](const std::vector<float>& v, int64_t n0, int64_t n1, int64_t n2) {
      Tensor t;
      t.type = GgmlType::F32;
      t.ne = {n0, n1, n2, 1};
      t.data = reinterpret_cast<const std::byte*>(v.data());
      return t;
    };
    L.attn.wk_b = f32(kb, nope, r, H);
    L.attn.wv_b = f32(vb, r, dv, H);
  }

  MlaConfig mc_;
  int64_t q_lora_ = 0;  // 0: plain attn_q
  int hd_k_ = 0;        // per-head query/key size (nope + rope)
  RouterConfig router_;
  std::vector<Layer> layers_;
  std::deque<std::vector<float>> owned_;  // legacy W_kb/W_vb copies (stable addresses)
  std::unique_ptr<RopeCache> rope_;
};

}  // namespace

std::unique_ptr<Model> load_deepseek2(const gguf::File& file) { return std::make_unique<DeepSeek2>(file); }

}  // namespace sluice
