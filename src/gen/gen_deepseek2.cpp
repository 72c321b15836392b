// gen-model writer for deepseek2 (DeepSeek V3/R1, Kimi K2): multi-head latent attention in the
// layout current llama.cpp converters write — low-rank query (attn_q_a → attn_q_a_norm →
// attn_q_b, or plain attn_q without a q LoRA), the joint KV down-projection attn_kv_a_mqa (latent
// plus the shared rope key), attn_kv_a_norm, and the KV up-projection split into attn_k_b
// (stored transposed, (nope, kv_lora, n_head)) and attn_v_b — then leading dense SwiGLU layers
// and MoE layers with a sigmoid router, its exp_probs_b selection bias, routed experts and the
// shared expert. Keys as the converter writes them: the cache-facing key/value lengths
// (kv_lora + rope, kv_lora) next to the per-head key_length_mla/value_length_mla, and the
// DeepSeek YaRN keys with yarn_log_multiplier = 0.1 · mscale_all_dim. --nextn appends DeepSeek
// V3's MTP block(s) after the main layers as GLM-4.5 files carry them (block_count counts them,
// nextn_predict_layers, a full MoE layer plus the nextn.* tensors), for MTP drafting tests.
#include <cmath>

#include "core/error.h"
#include "gen/builder.h"

namespace sluice::gen {

namespace {

void check_mla(const GenSpec& s) {
  if (s.n_expert == 0) fail("deepseek2 needs experts (--experts)");
  if (s.kv_lora_rank <= 0) fail("deepseek2 needs a KV latent rank (--kv-lora > 0), got {}", s.kv_lora_rank);
  if (s.q_lora_rank < 0) fail("--q-lora {} is negative (0: plain attn_q)", s.q_lora_rank);
  if (s.rope_dim <= 0 || s.rope_dim % 2) fail("--rope-dim {} must be a positive even number", s.rope_dim);
  if (s.n_head_kv != 1)
    fail("deepseek2 files store MLA as one shared latent (head_count_kv 1); --kv-heads {} does not apply", s.n_head_kv);
  if (s.legacy_experts) fail("--legacy-experts is Mixtral's llama layout; deepseek2 files always merge experts");
}

// One layer's attention. The q path and the key path (attn_kv_a_mqa's rope part, attn_k_b) are
// scaled by kQkScale like every generated attention; the latent itself is RMS-normed, so the
// values keep RMS 1.
void mla(ModelBuilder& b, int il) {
  const GenSpec& s = b.spec();
  const int64_t d = s.n_embd, H = s.n_head, nope = s.head_dim, rope = s.rope_dim, dv = s.head_dim;
  const int64_t r = s.kv_lora_rank, q_lora = s.q_lora_rank;
  const double k = ModelBuilder::kQkScale;
  auto blk = [&](const char* what) { return ModelBuilder::blk(il, what); };
  auto fit = [](GgmlType t, int64_t n_in) { return ModelBuilder::fit_type(t, n_in); };
  b.norm(blk("attn_norm.weight"), d);
  if (q_lora > 0) {
    b.weight(blk("attn_q_a.weight"), fit(s.type_attn, d), {d, q_lora});
    b.norm(blk("attn_q_a_norm.weight"), q_lora);
    b.weight(blk("attn_q_b.weight"), fit(s.type_attn, q_lora), {q_lora, H * (nope + rope)}, k / std::sqrt(double(q_lora)));
  } else {
    b.weight(blk("attn_q.weight"), fit(s.type_attn, d), {d, H * (nope + rope)}, k / std::sqrt(double(d)));
  }
  b.weight(blk("attn_kv_a_mqa.weight"), fit(s.type_attn, d), {d, r + rope}, k / std::sqrt(double(d)));
  b.norm(blk("attn_kv_a_norm.weight"), r);
  // attn_k_b rows are nope values but each key is a combination of the kv_lora latent values.
  b.weight(blk("attn_k_b.weight"), fit(s.type_attn_v, nope), {nope, r, H}, k / std::sqrt(double(r)));
  b.weight(blk("attn_v_b.weight"), fit(s.type_attn_v, r), {r, dv, H});
  b.weight(blk("attn_output.weight"), fit(s.type_attn, H * dv), {H * dv, d});
}

}  // namespace

void gen_deepseek2(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  check_mla(s);
  if (s.n_nextn < 0) fail("--nextn {} is negative", s.n_nextn);
  b.common_keys();
  b.arch_u32("block_count", s.n_layer + s.n_nextn);
  if (s.n_nextn > 0) b.arch_u32("nextn_predict_layers", s.n_nextn);
  b.arch_u32("feed_forward_length", s.n_ff);
  b.arch_u32("vocab_size", b.n_vocab());
  if (s.q_lora_rank > 0) b.arch_u32("attention.q_lora_rank", s.q_lora_rank);
  b.arch_u32("attention.kv_lora_rank", s.kv_lora_rank);
  b.arch_u32("attention.key_length", s.kv_lora_rank + s.rope_dim);
  b.arch_u32("attention.value_length", s.kv_lora_rank);
  b.arch_u32("attention.key_length_mla", s.head_dim + s.rope_dim);
  b.arch_u32("attention.value_length_mla", s.head_dim);
  b.arch_u32("rope.dimension_count", s.rope_dim);
  b.moe_keys();
  b.yarn_keys();
  b.embedding_and_head();
  for (int il = 0; il < s.n_layer + s.n_nextn; ++il) {
    mla(b, il);
    b.norm(ModelBuilder::blk(il, "ffn_norm.weight"), s.n_embd);
    if (!b.is_moe_layer(il)) {
      b.dense_ffn(il);
      continue;
    }
    b.sigmoid_moe(il);
    if (s.n_expert_shared > 0) b.shared_expert(il);
    if (il >= s.n_layer) b.nextn_head(il);
  }
}

}  // namespace sluice::gen
