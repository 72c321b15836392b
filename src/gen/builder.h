// The pieces every gen-model architecture writer shares: metadata keys common to all families,
// the embedded tokenizer, and tensors with the right random data (weights ~N(0, 1/n_in), norms
// 1, routers with Zipf scales, experts merged or per expert). A family writer (gen_<family>.cpp)
// only chooses which of them its layers have and adds its own keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/writer.h"
#include "gen/gen_model.h"

namespace sluice::gen {

class ModelBuilder {
 public:
  // Validates the spec and reads the tokenizer it names.
  explicit ModelBuilder(const GenSpec& spec);

  const GenSpec& spec() const { return spec_; }
  int n_vocab() const { return n_vocab_; }
  static std::string blk(int il, const char* what) { return "blk." + std::to_string(il) + "." + what; }

  // How much random attention is sharpened: q and k are scaled by it (see attention() in the
  // .cpp for why); writers with their own attention layout (MLA) scale their q and k paths too.
  static constexpr float kQkScale = 3.0f;
  // `type`, or, when its block does not divide rows of n_in values, the fallback llama.cpp's
  // quantizer takes (Q2_K/Q3_K/IQ* → IQ4_NL, Q4_K → Q5_0, Q5_K → Q5_1, else Q8_0; then F16,
  // F32): MLA's attn_k_b rows are 128 values, GLM-4.5-Air's expert rows 1408, gpt-oss rows 2880.
  // Expert and dense FFN tensors are fitted; other weights keep their type (or fail).
  static GgmlType fit_type(GgmlType type, int64_t n_in);
  // Leading dense layers written: the spec's count, but at most n_layer - 1 in a model with
  // experts, so a model cut down with --layers keeps at least one MoE layer.
  int n_leading_dense() const;
  bool is_moe_layer(int il) const { return spec_.n_expert > 0 && il >= n_leading_dense(); }

  // "<arch>.<suffix>" keys.
  void arch_u32(const std::string& suffix, uint32_t v);
  void arch_f32(const std::string& suffix, float v);
  void arch_bool(const std::string& suffix, bool v);
  void arch_value(const std::string& suffix, gguf::Value v);
  // general.*, the tokenizer, and the hyperparameter keys all families share: context, embedding
  // and block sizes, head counts, RMS epsilon, RoPE base and (for MoE) expert counts.
  void common_keys();
  // expert_feed_forward_length, expert_shared_count, leading_dense_block_count and the routing
  // keys (gating function, groups, weight normalisation and scale) the spec sets.
  void moe_keys();
  // rope.scaling.* for YaRN when the spec has a factor.
  void yarn_keys();

  // A weight of `type` with shape ne (GGML order), values ~N(0, 1/ne[0]).
  void weight(const std::string& name, GgmlType type, std::vector<int64_t> ne);
  void weight(const std::string& name, GgmlType type, std::vector<int64_t> ne, double rms);
  // An F32 RMSNorm weight, all `value` (1 but for QK-norms and a tied head's final norm).
  void norm(const std::string& name, int64_t n, float value = 1.0f);
  // An F32 tensor with every value `value` (a zero selection bias, ...).
  void constant(const std::string& name, std::vector<int64_t> ne, float value);
  // token_embd, output_norm and (unless tied) output.
  void embedding_and_head();
  // attn_norm, attn_q/k/v/output and, with qk_norm, per-head attn_q_norm/attn_k_norm; q and k
  // are scaled up 3× (see the .cpp for why).
  void attention(int il, bool qk_norm);
  // attn_q/k/v.bias and, with output, attn_output.bias: F32, RMS 0.1 (small against q and k of
  // RMS 3 and v of RMS 1).
  void attention_biases(int il, bool output);
  // ffn_gate/up/down of a dense layer (n_ff).
  void dense_ffn(int il);
  // router() and experts() without biases.
  void moe(int il);
  // moe() with the selection bias of sigmoid routers (deepseek2, glm4moe) between them.
  void sigmoid_moe(int il);
  // ffn_gate_inp (type_router, Zipf-scaled rows); with_bias adds ffn_gate_inp.bias (gpt-oss).
  void router(int il, bool with_bias);
  // ffn_gate_tid2eid (I32, (n_expert_used, n_vocab)): each token id's n_expert_used distinct
  // experts, uniformly drawn, for hash-routed layers (deepseek4).
  void hash_routing(int il);
  // exp_probs_b.bias: the sigmoid routers' selection bias, zero (no correction learned yet), so
  // the Zipf popularity of the router rows alone decides the choice.
  void selection_bias(int il);
  // Routed experts, merged ffn_*_exps tensors (types: type_experts, type_experts_down, and
  // type_experts_mixed on odd layers) or, with spec.legacy_experts, one ffn_{gate,up,down}.E
  // tensor per expert; with_biases adds ffn_*_exps.bias (gpt-oss).
  void experts(int il, bool with_biases);
  // ffn_{gate,up,down}_shexp of n_expert_shared · n_ff_exp, type_dense (resident weights).
  void shared_expert(int il);
  // The MTP block's own tensors (GLM-4.5 / DeepSeek V3 layout): nextn.eh_proj, which projects
  // [embedding; hidden] (2·n_embd) back to n_embd, and the enorm, hnorm and shared_head_norm
  // norms; the block shares the main embedding and output head.
  void nextn_head(int il);

  GenResult write(const std::string& path);

 private:
  void load_tokenizer();
  void add(const std::string& name, GgmlType type, std::vector<int64_t> ne, gguf::Writer::Fill fill);

  GenSpec spec_;
  int n_vocab_ = 0;
  std::vector<std::pair<std::string, gguf::Value>> tokenizer_kv_;
  std::vector<double> router_scales_;  // by popularity rank
  gguf::Writer writer_;
  size_t n_tensors_ = 0;
  uint64_t data_bytes_ = 0;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace sluice::gen
