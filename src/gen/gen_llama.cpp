// gen-model writer for llama: dense Llama models and Mixtral, whose experts GGUF stores under the
// same architecture. Mixtral files carry the expert size as feed_forward_length (no
// expert_feed_forward_length key); key/value lengths are written only when the head size is not
// n_embd / n_head, as llama.cpp's converter does.
#include "gen/builder.h"

namespace sluice::gen {

void gen_llama(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  const bool moe = s.n_expert > 0;
  b.common_keys();
  b.arch_u32("feed_forward_length", moe ? s.n_ff_exp : s.n_ff);
  b.arch_u32("rope.dimension_count", s.head_dim);
  if (int64_t{s.head_dim} * s.n_head != s.n_embd) {
    b.arch_u32("attention.key_length", s.head_dim);
    b.arch_u32("attention.value_length", s.head_dim);
  }
  b.arch_u32("vocab_size", b.n_vocab());
  b.embedding_and_head();
  for (int il = 0; il < s.n_layer; ++il) {
    b.attention(il, /*qk_norm=*/false);
    b.norm(ModelBuilder::blk(il, "ffn_norm.weight"), s.n_embd);
    if (moe) b.moe(il);
    else b.dense_ffn(il);
  }
}

}  // namespace sluice::gen
