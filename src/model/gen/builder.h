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
#include "model/gen/gen_model.h"

namespace sluice::gen {

class ModelBuilder {
 public:
  // Validates the spec and reads the tokenizer it names.
  explicit ModelBuilder(const GenSpec& spec);

  const GenSpec& spec() const { return spec_; }
  int n_vocab() const { return n_vocab_; }
  static std::string blk(int il, const char* what) { return "blk." + std::to_string(il) + "." + what; }

  // "<arch>.<suffix>" keys.
  void arch_u32(const std::string& suffix, uint32_t v);
  void arch_f32(const std::string& suffix, float v);
  // general.*, the tokenizer, and the hyperparameter keys all families share: context, embedding
  // and block sizes, head counts, RMS epsilon, RoPE base and (for MoE) expert counts.
  void common_keys();

  // A weight of `type` with shape ne (GGML order), values ~N(0, 1/ne[0]).
  void weight(const std::string& name, GgmlType type, std::vector<int64_t> ne);
  void weight(const std::string& name, GgmlType type, std::vector<int64_t> ne, double rms);
  // An F32 RMSNorm weight, all `value` (1 but for QK-norms and a tied head's final norm).
  void norm(const std::string& name, int64_t n, float value = 1.0f);
  // token_embd, output_norm and (unless tied) output.
  void embedding_and_head();
  // attn_norm, attn_q/k/v/output and, with qk_norm, per-head attn_q_norm/attn_k_norm; q and k
  // are scaled up 3× (see the .cpp for why).
  void attention(int il, bool qk_norm);
  // ffn_gate/up/down of a dense layer (n_ff).
  void dense_ffn(int il);
  // ffn_gate_inp (F32, Zipf-scaled rows) and the routed experts, merged ffn_*_exps tensors or,
  // with spec.legacy_experts, one ffn_{gate,up,down}.E tensor per expert.
  void moe(int il);

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
