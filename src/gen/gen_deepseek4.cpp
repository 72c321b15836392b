// gen-model writer for deepseek4 (DeepSeek-V4-Flash) in the layout and keys of llama.cpp's
// converter: four hyper-connection streams (hc_attn/hc_ffn mixers per layer, output_hc_* at the
// head), q LoRA, one shared K=V head (attn_kv), attention sinks, the grouped low-rank output
// projection, and per layer kind (compress_ratios: two window-only layers, then 4 and 128
// alternating, plus the trailing 0 of the MTP block the main file does not hold) the attention
// compressor (ratio ≠ 0) and the lightning indexer with its own compressor (ratio 4). MoE on every
// layer: the first hash_layer_count layers carry ffn_gate_tid2eid and no selection bias, the rest
// exp_probs_b; routed experts, one shared expert. Keys the converter does not write for V4
// (feed_forward_length, leading_dense_block_count, expert groups, vocab_size) are not written.
// --nextn 1 writes instead the separate MTP GGUF the converter's --mtp writes: the same keys with
// block_count n_layer + 1 and nextn_predict_layers 1, the global tensors (token_embd and output
// the model's, seeded by name; output_hc_* the MTP head's) and one window-only, selection-routed
// block at index n_layer with its nextn.* tensors.
#include <cmath>

#include "core/error.h"
#include "gen/builder.h"

namespace sluice::gen {

namespace {

int ratio_of(int il) {
  return il < 2 ? 0 : il % 2 == 0 ? 4 : 128;
}

void check(const GenSpec& s) {
  if (s.n_expert == 0) fail("deepseek4 needs experts (--experts)");
  if (s.n_head_kv != 1)
    fail("deepseek4 has one shared K=V head; --kv-heads {} does not apply", s.n_head_kv);
  if (s.q_lora_rank <= 0)
    fail("deepseek4 needs a q LoRA rank (--q-lora > 0), got {}", s.q_lora_rank);
  if (s.rope_dim <= 0 || s.rope_dim % 2 || s.rope_dim >= s.head_dim)
    fail("--rope-dim {} must be even, positive and below --head-dim {}", s.rope_dim, s.head_dim);
  if (s.n_out_groups <= 0 || s.n_head % s.n_out_groups)
    fail("--out-groups {} must divide the {} heads", s.n_out_groups, s.n_head);
  if (s.out_lora_rank <= 0) fail("--out-lora {} must be positive", s.out_lora_rank);
  if (s.n_hc != 4)
    fail("deepseek4 files have 4 hyper-connection streams (llama.cpp asserts it), got {}", s.n_hc);
  if (s.sliding_window <= 0) fail("--window {} must be positive", s.sliding_window);
  if (s.indexer_heads <= 0 || s.indexer_top_k <= 0)
    fail("the indexer needs heads and a top-k (--indexer-heads)");
  if (s.indexer_dim <= s.rope_dim || s.indexer_dim % 64)
    fail("--indexer-dim {} must be a multiple of 64 above --rope-dim {}", s.indexer_dim,
         s.rope_dim);
  if (s.n_hash_layers < 0) fail("--hash-layers {} is negative", s.n_hash_layers);
  if (s.n_leading_dense != 0)
    fail("deepseek4 has no dense layers; --leading-dense {} does not apply", s.n_leading_dense);
  if (s.legacy_experts)
    fail("--legacy-experts is Mixtral's llama layout; deepseek4 files always merge experts");
  if (s.tied_output) fail("deepseek4 has an untied output head");
  if (s.n_nextn < 0 || s.n_nextn > 1)
    fail("deepseek4's converter writes one MTP block (--nextn 1), got --nextn {}", s.n_nextn);
}

// A compressor of `width` channels for ratio r: c = 2 overlapping halves at ratio 4, else 1.
void compressor(ModelBuilder& b, int il, const std::string& prefix, int r, int64_t width) {
  const GenSpec& s = b.spec();
  const int64_t c = r == 4 ? 2 : 1;
  auto name = [&](const char* what) { return ModelBuilder::blk(il, (prefix + what).c_str()); };
  b.weight(name("kv.weight"), s.type_aux, {s.n_embd, c * width});
  b.weight(name("gate.weight"), s.type_aux, {s.n_embd, c * width});
  b.weight(name("ape.weight"), GgmlType::F32, {c * width, r}, 0.1);
  b.norm(name("norm.weight"), width);
}

void attention(ModelBuilder& b, int il, int r) {
  const GenSpec& s = b.spec();
  const int64_t d = s.n_embd, H = s.n_head, D = s.head_dim, Q = s.q_lora_rank, G = s.n_out_groups,
                O = s.out_lora_rank;
  auto blk = [&](const char* what) { return ModelBuilder::blk(il, what); };
  b.norm(blk("attn_norm.weight"), d);
  b.weight(blk("attn_q_a.weight"), s.type_attn, {d, Q});
  b.norm(blk("attn_q_a_norm.weight"), Q);
  b.weight(blk("attn_q_b.weight"), s.type_attn, {Q, H * D});
  b.weight(blk("attn_kv.weight"), s.type_attn, {d, D});
  // q is RMS-normed per head without a weight; k's norm weight sharpens the random attention as
  // kQkScale does for other families (score std ≈ kQkScale² · q·k / sqrt(D) at RMS 1).
  b.norm(blk("attn_kv_a_norm.weight"), D, ModelBuilder::kQkScale * ModelBuilder::kQkScale);
  b.constant(blk("attn_sinks.weight"), {H}, 0.0f);
  b.weight(blk("attn_output_a.weight"), s.type_attn, {H * D / G, G * O});
  b.weight(blk("attn_output_b.weight"), s.type_attn, {G * O, d});
  if (r != 0) compressor(b, il, "attn_compressor_", r, D);
  if (r == 4) {
    b.weight(blk("indexer.attn_q_b.weight"), s.type_attn,
             {Q, int64_t{s.indexer_heads} * s.indexer_dim});
    b.weight(blk("indexer.proj.weight"), s.type_aux, {d, s.indexer_heads});
    compressor(b, il, "indexer_compressor_", 4, s.indexer_dim);
  }
}

// A hyper-connection mixer: fn (S·d → (2+S)·S), base (zero: the learned offsets start neutral)
// and the three scales for pre, post and comb.
void hc_mixer(ModelBuilder& b, const std::string& prefix, int64_t n_mix) {
  const GenSpec& s = b.spec();
  b.weight(prefix + "_fn.weight", s.type_aux, {int64_t{s.n_hc} * s.n_embd, n_mix});
  b.constant(prefix + "_base.weight", {n_mix}, 0.0f);
  b.constant(prefix + "_scale.weight", {n_mix == s.n_hc ? 1 : 3}, 1.0f);
}

}  // namespace

void gen_deepseek4(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  check(s);
  b.common_keys();
  if (s.n_nextn > 0) {
    b.arch_u32("block_count", s.n_layer + s.n_nextn);
    b.arch_u32("nextn_predict_layers", s.n_nextn);
  }
  const int n_hash = std::min(s.n_hash_layers, s.n_layer);
  b.arch_u32("embedding_length_out", static_cast<uint32_t>(s.n_hc) * s.n_embd);
  b.arch_u32("attention.key_length", s.head_dim);
  b.arch_u32("attention.value_length", s.head_dim);
  b.arch_u32("rope.dimension_count", s.rope_dim);
  b.arch_f32("attention.compress_rope_freq_base", s.compress_rope_base);
  b.yarn_keys();
  b.arch_u32("attention.q_lora_rank", s.q_lora_rank);
  b.arch_u32("attention.output_group_count", s.n_out_groups);
  b.arch_u32("attention.output_lora_rank", s.out_lora_rank);
  b.arch_u32("attention.sliding_window", s.sliding_window);
  std::vector<int32_t> ratios;
  for (int il = 0; il < s.n_layer; ++il) ratios.push_back(ratio_of(il));
  ratios.push_back(0);  // the MTP block's entry, as config.json lists it
  b.arch_value("attention.compress_ratios", gguf::Value::i32_array(ratios));
  b.arch_u32("attention.indexer.head_count", s.indexer_heads);
  b.arch_u32("attention.indexer.key_length", s.indexer_dim);
  b.arch_u32("attention.indexer.top_k", s.indexer_top_k);
  b.arch_u32("hyper_connection.count", s.n_hc);
  b.arch_u32("hyper_connection.sinkhorn_iterations", 20);
  b.arch_f32("hyper_connection.epsilon", 1e-6f);
  b.arch_u32("expert_feed_forward_length", s.n_ff_exp);
  b.arch_u32("expert_shared_count", s.n_expert_shared);
  b.arch_u32("expert_gating_func", 4);  // sqrt(softplus)
  b.arch_bool("expert_weights_norm", s.expert_weights_norm);
  b.arch_f32("expert_weights_scale", s.expert_weights_scale);
  if (s.swiglu_clamp > 0.0f) {
    b.arch_value("swiglu_clamp_exp",
                 gguf::Value::f32_array(std::vector<float>(s.n_layer + s.n_nextn, s.swiglu_clamp)));
    b.arch_value("swiglu_clamp_shexp",
                 gguf::Value::f32_array(std::vector<float>(s.n_layer + s.n_nextn, s.swiglu_clamp)));
  }
  b.arch_u32("hash_layer_count", n_hash);

  b.embedding_and_head();
  hc_mixer(b, "output_hc", s.n_hc);
  const int64_t n_mix = int64_t{2 + s.n_hc} * s.n_hc;
  auto block = [&](int il, int ratio, bool hashed) {
    hc_mixer(b, ModelBuilder::blk(il, "hc_attn"), n_mix);
    hc_mixer(b, ModelBuilder::blk(il, "hc_ffn"), n_mix);
    attention(b, il, ratio);
    b.norm(ModelBuilder::blk(il, "ffn_norm.weight"), s.n_embd);
    b.router(il, /*with_bias=*/false);
    if (hashed)
      b.hash_routing(il);
    else
      b.selection_bias(il);
    b.experts(il, /*with_biases=*/false);
    b.shared_expert(il);
  };
  if (s.n_nextn > 0) {
    block(s.n_layer, 0, false);
    b.nextn_head(s.n_layer);
    return;
  }
  for (int il = 0; il < s.n_layer; ++il) block(il, ratio_of(il), il < n_hash);
}

}  // namespace sluice::gen
