// gen-model writer for glm4moe (GLM-4.5, GLM-4.5-Air, GLM-4.6): GQA attention with q/k/v biases
// (QK-norm in the 355B models), partial rotary embedding over half of each head
// (rope.dimension_count = head_dim / 2, GLM's partial_rotary_factor 0.5), post_attention_norm,
// leading dense SwiGLU layers, then MoE layers with a sigmoid router, its exp_probs_b selection
// bias, routed experts and one shared expert. As llama.cpp's converter does, the
// nextn_predict_layers multi-token-prediction layers follow the n_layer main layers inside
// block_count: each is a full MoE layer plus nextn.eh_proj / enorm / hnorm / shared_head_norm,
// which the engine never runs (and `inspect` counts as Other, not as streamed experts).
#include "core/error.h"
#include "gen/builder.h"

namespace sluice::gen {

void gen_glm4moe(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  if (s.n_expert == 0) fail("glm4moe needs experts (--experts)");
  if (s.n_expert_shared < 1) fail("glm4moe needs a shared expert, got {}", s.n_expert_shared);
  if (s.head_dim % 4) fail("glm4moe rotates half of each head: --head-dim {} must be a multiple of 4", s.head_dim);
  if (s.n_nextn < 0) fail("--nextn {} is negative", s.n_nextn);
  if (s.legacy_experts) fail("--legacy-experts is Mixtral's llama layout; glm4moe files always merge experts");
  b.common_keys();
  b.arch_u32("block_count", s.n_layer + s.n_nextn);
  b.arch_u32("feed_forward_length", s.n_ff);
  b.arch_u32("attention.key_length", s.head_dim);
  b.arch_u32("attention.value_length", s.head_dim);
  b.arch_u32("rope.dimension_count", s.head_dim / 2);
  b.moe_keys();
  if (s.n_nextn > 0) b.arch_u32("nextn_predict_layers", s.n_nextn);
  b.embedding_and_head();
  for (int il = 0; il < s.n_layer + s.n_nextn; ++il) {
    auto blk = [&](const char* what) { return ModelBuilder::blk(il, what); };
    b.attention(il, s.qk_norm);
    b.attention_biases(il, /*output=*/false);
    b.norm(blk("post_attention_norm.weight"), s.n_embd);
    if (!b.is_moe_layer(il)) {
      b.dense_ffn(il);
      continue;
    }
    b.sigmoid_moe(il);
    b.shared_expert(il);
    if (il >= s.n_layer) b.nextn_head(il);
  }
}

}  // namespace sluice::gen
