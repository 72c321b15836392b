// gpt-oss (OpenAI's open-weight MoE, llama.cpp's OPENAI_MOE). Per layer: RMSNorm → GQA attention
// with q/k/v/o biases, NeoX RoPE (YaRN in real files), per-head attention sinks and a sliding
// window on even layers (llama.cpp's swa pattern 2: layer 0 is windowed, odd layers see the whole
// context) → residual → RMSNorm (post_attention_norm) → MoE: router with bias, top-k of the
// logits, softmax over the chosen logits, experts with biases and the clamped gpt-oss SwiGLU
// (gate·σ(1.702·gate)·(up + 1)) → residual. Every layer is MoE; there is no shared expert.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/archs/decoder.h"
#include "model/weights.h"

namespace sluice {

// llama.cpp hard-codes the pattern for gpt-oss: of every two layers the first is windowed.
std::vector<bool> gptoss_windowed_layers(int n_layer) {
  std::vector<bool> swa(std::max(0, n_layer), false);
  for (int il = 0; il < n_layer; il += 2) swa[il] = true;
  return swa;
}

namespace {

class GptOss final : public DecoderModel {
 public:
  explicit GptOss(const gguf::File& f) : DecoderModel(read_hparams(f)) {
    hp_.rope.type = RopeType::kNeox;
    if (hp_.n_expert == 0) fail("gpt-oss model without {}.expert_count", hp_.arch);
    if (hp_.sliding_window <= 0) fail("gpt-oss model without {}.attention.sliding_window", hp_.arch);
    hp_.swa_layers = gptoss_windowed_layers(hp_.n_layer);
    // llama.cpp views each head as n_rot values and scales q·k by 1/sqrt(n_rot): both assume
    // fully rotated heads.
    const int64_t hd = hp_.head_dim_k;
    if (hp_.head_dim_v != hd || hp_.rope.n_rot != hd)
      fail("gpt-oss: head sizes k {} / v {} and rotated dims {} must agree", hd, hp_.head_dim_v, hp_.rope.n_rot);
    load_embedding_and_head(f);
    const int64_t n_embd = hp_.n_embd;
    const int64_t ne = hp_.n_expert;
    const int64_t n_ff = hp_.n_ff_exp ? hp_.n_ff_exp : hp_.n_ff[0];
    WeightLoader wl(f);
    layers_.resize(hp_.n_layer);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(hp_.n_layer);
    for (int il = 0; il < hp_.n_layer; ++il) {
      auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
      Layer& L = layers_[il];
      const int64_t q_dim = hp_.n_head[il] * hd, kv_dim = hp_.n_head_kv[il] * hd;
      L.attn = load_attention(wl, il, n_embd, q_dim, kv_dim, kv_dim, q_dim);
      L.attn.bq = wl.require_f32(n("attn_q.bias"), {q_dim});
      L.attn.bk = wl.require_f32(n("attn_k.bias"), {kv_dim});
      L.attn.bv = wl.require_f32(n("attn_v.bias"), {kv_dim});
      L.attn.bo = wl.require_f32(n("attn_output.bias"), {n_embd});
      L.attn.sinks = wl.require_f32(n("attn_sinks.weight"), {hp_.n_head[il]});
      L.ffn.norm = wl.require_f32(n("post_attention_norm.weight"), {n_embd});
      L.ffn.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {n_embd, ne});
      L.ffn.router.gate_inp_b = wl.require_f32(n("ffn_gate_inp.bias"), {ne});
      set_lookahead(il, L.ffn.norm, L.ffn.router.gate_inp);
      ExpertLayerTensors& E = expert_layout_.layers[il];
      E = load_merged_experts(wl, il, n_embd, n_ff, ne);
      E.gate_bias = wl.require_f32(n("ffn_gate_exps.bias"), {n_ff, ne});
      E.up_bias = wl.require_f32(n("ffn_up_exps.bias"), {n_ff, ne});
      E.down_bias = wl.require_f32(n("ffn_down_exps.bias"), {n_embd, ne});
    }
    router_.n_expert = hp_.n_expert;
    router_.n_used = hp_.n_expert_used;
    router_.gating = GatingFunc::kSoftmaxWeight;  // llama.cpp passes it explicitly, whatever the file says
    activation_ = ExpertActivation::kSwigluOai;
    rope_ = std::make_unique<RopeCache>(hp_.rope, nullptr);
  }

};

}  // namespace

std::unique_ptr<Model> load_gptoss(const gguf::File& file) { return std::make_unique<GptOss>(file); }

}  // namespace sluice
