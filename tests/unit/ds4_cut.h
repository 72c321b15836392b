// DeepSeek V4 cut down for tests that write such a file: six layers, one of every kind (two
// window-only, then ratio 4 with the indexer and ratio 128 alternating; the first three routed by
// token hash), four heads and two output groups, at the widths a test picks; everything else is
// the deepseek-v4-flash preset's.
#pragma once

#include "gen/gen_model.h"

namespace sluice::test {

struct Ds4Dims {
  int n_embd, head_dim, rope_dim, q_lora_rank, out_lora_rank, window;
  int indexer_heads, indexer_dim, indexer_top_k;
  int n_expert, n_expert_used, n_ff_exp;
};

inline GenSpec ds4_cut(const Ds4Dims& d) {
  GenSpec s = gen_preset("deepseek-v4-flash");
  s.n_layer = 6;
  s.n_head = 4;
  s.n_out_groups = 2;
  s.n_embd = d.n_embd;
  s.head_dim = d.head_dim;
  s.rope_dim = d.rope_dim;
  s.q_lora_rank = d.q_lora_rank;
  s.out_lora_rank = d.out_lora_rank;
  s.sliding_window = d.window;
  s.indexer_heads = d.indexer_heads;
  s.indexer_dim = d.indexer_dim;
  s.indexer_top_k = d.indexer_top_k;
  s.n_expert = d.n_expert;
  s.n_expert_used = d.n_expert_used;
  s.n_ff_exp = d.n_ff_exp;
  return s;
}

}  // namespace sluice::test
