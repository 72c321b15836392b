// gen-model writer for Qwen3 (dense) and Qwen3-MoE: GQA attention with per-head QK RMSNorm, the
// q width n_head·head_dim independent of n_embd (4096 vs 2048 in Qwen3-30B-A3B), SwiGLU FFN or
// merged ffn_*_exps experts. Keys as llama.cpp's converter writes them, including key/value
// lengths and, for MoE, expert_feed_forward_length next to the dense feed_forward_length.
#include "core/error.h"
#include "gen/builder.h"

namespace sluice::gen {

void gen_qwen3(ModelBuilder& b) {
  const GenSpec& s = b.spec();
  const bool moe = s.arch == "qwen3moe";
  if (moe != (s.n_expert > 0))
    fail("{} needs {}, but the spec has {} experts", s.arch, moe ? "experts" : "no experts", s.n_expert);
  if (s.legacy_experts) fail("--legacy-experts is Mixtral's llama layout; {} files always merge experts", s.arch);
  b.common_keys();
  b.arch_u32("feed_forward_length", s.n_ff);
  if (moe) b.arch_u32("expert_feed_forward_length", s.n_ff_exp);
  b.arch_u32("attention.key_length", s.head_dim);
  b.arch_u32("attention.value_length", s.head_dim);
  b.embedding_and_head();
  for (int il = 0; il < s.n_layer; ++il) {
    b.attention(il, /*qk_norm=*/true);
    b.norm(ModelBuilder::blk(il, "ffn_norm.weight"), s.n_embd);
    if (moe) b.moe(il);
    else b.dense_ffn(il);
  }
}

}  // namespace sluice::gen
