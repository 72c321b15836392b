// gen-model writer for gpt-oss (gpt-oss-20b / -120b): every layer is GQA attention with q/k/v/o
// biases and per-head attention sinks, post_attention_norm, a router with a bias, and merged
// experts with biases (MXFP4 in the released files). No shared expert, no dense layers, no
// QK-norm. Keys as llama.cpp's converter writes them: head size as key/value_length,
// attention.sliding_window (the engine windows the even layers), the intermediate size as both
// feed-forward lengths, and the YaRN keys (factor 32 over a 4096-token original context).
#include "core/error.h"
#include "gen/builder.h"

namespace sluice::gen {

void gen_gptoss(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  if (s.n_expert == 0) fail("gpt-oss needs experts (--experts)");
  if (s.sliding_window <= 0) fail("gpt-oss needs a sliding window, got {}", s.sliding_window);
  if (s.legacy_experts) fail("--legacy-experts is Mixtral's llama layout; gpt-oss files always merge experts");
  b.common_keys();
  b.arch_u32("feed_forward_length", s.n_ff_exp);
  b.arch_u32("expert_feed_forward_length", s.n_ff_exp);
  b.arch_u32("attention.key_length", s.head_dim);
  b.arch_u32("attention.value_length", s.head_dim);
  b.arch_u32("attention.sliding_window", s.sliding_window);
  b.yarn_keys();
  b.embedding_and_head();
  for (int il = 0; il < s.n_layer; ++il) {
    b.attention(il, /*qk_norm=*/false);
    b.attention_biases(il, /*output=*/true);
    // Sink logits of RMS 1: a sink takes a real share only where a head's scores are all low.
    b.weight(ModelBuilder::blk(il, "attn_sinks.weight"), GgmlType::F32, {s.n_head}, 1.0);
    b.norm(ModelBuilder::blk(il, "post_attention_norm.weight"), s.n_embd);
    b.router(il, /*with_bias=*/true);
    b.experts(il, /*with_biases=*/true);
  }
}

}  // namespace sluice::gen
