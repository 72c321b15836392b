// `sluice gen-model --preset NAME [overrides] -o OUT.gguf`: writes a random-weight GGUF in the
// real layout of a supported architecture (see gen/gen_model.h). This file only maps
// flags onto the preset's GenSpec; flags not given keep the preset's values.
#include <fmt/format.h>

#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "gen/gen_model.h"

namespace sluice::cli {

namespace {

GgmlType parse_type(const std::string& flag, const std::string& name) {
  auto t = type_from_name(name);
  if (!t) fail("{} '{}' is not a GGML type name (e.g. F32, F16, Q8_0, Q4_K, Q6_K, IQ4_XS, MXFP4)", flag, name);
  return *t;
}

}  // namespace

int cmd_gen_model(int argc, char** argv) {
  std::string preset_list;
  for (const auto& p : gen_presets()) preset_list += fmt::format("\n  {:<16} {}", p.name, p.summary);
  CLI::App app{"Write a random-weight GGUF model in the real layout and keys of an architecture.\n"
               "Presets:" + preset_list,
               "sluice gen-model"};
  std::string preset, out;
  GenSpec o;  // flag values; applied over the preset only when given
  std::string type_experts, type_experts_down, mixed_experts, type_attn, type_embd, type_output, type_dense;
  app.add_option("--preset", preset, "model to imitate (see the list above)")->required();
  app.add_option("-o,--output", out, "GGUF file to write (through a temporary file renamed into place)")->required();
  bool force = false;
  app.add_flag("--force", force, "replace an existing output file");
  add_quiet_flag(app);
  auto* layers = app.add_option("--layers", o.n_layer, "number of layers");
  auto* experts = app.add_option("--experts", o.n_expert, "routed experts per layer");
  auto* used = app.add_option("--experts-used", o.n_expert_used, "experts used per token");
  auto* embd = app.add_option("--embd", o.n_embd, "embedding width");
  auto* ff_exp = app.add_option("--ff-exp", o.n_ff_exp, "expert feed-forward width");
  auto* ff = app.add_option("--ff", o.n_ff, "dense feed-forward width");
  auto* heads = app.add_option("--heads", o.n_head, "attention heads");
  auto* kv_heads = app.add_option("--kv-heads", o.n_head_kv, "KV heads");
  auto* head_dim = app.add_option("--head-dim", o.head_dim, "head size");
  auto* vocab = app.add_option("--vocab", o.n_vocab, "vocabulary rows (the tokenizer is padded to it)");
  auto* ctx = app.add_option("--ctx", o.n_ctx, "context_length key");
  auto* shared = app.add_option("--shared-experts", o.n_expert_shared, "shared experts per MoE layer (deepseek2, glm4moe)");
  auto* dense = app.add_option("--leading-dense", o.n_leading_dense,
                               "leading dense layers (default: the preset's, at most layers - 1)");
  auto* q_lora = app.add_option("--q-lora", o.q_lora_rank, "MLA query rank, 0 for a plain attn_q (deepseek2)");
  auto* kv_lora = app.add_option("--kv-lora", o.kv_lora_rank, "MLA KV latent rank (deepseek2)");
  auto* rope_dim = app.add_option("--rope-dim", o.rope_dim, "MLA rotated dims per head on top of --head-dim (deepseek2)");
  auto* out_groups = app.add_option("--out-groups", o.n_out_groups, "attention output groups (deepseek4)");
  auto* out_lora = app.add_option("--out-lora", o.out_lora_rank, "attention output LoRA rank per group (deepseek4)");
  auto* window = app.add_option("--window", o.sliding_window, "sliding window (gpt-oss, deepseek4)");
  auto* idx_heads = app.add_option("--indexer-heads", o.indexer_heads, "lightning indexer heads (deepseek4)");
  auto* idx_dim = app.add_option("--indexer-dim", o.indexer_dim, "lightning indexer key length, a multiple of 64 (deepseek4)");
  auto* idx_top_k = app.add_option("--indexer-top-k", o.indexer_top_k, "compressed rows the indexer selects (deepseek4)");
  auto* hash_layers = app.add_option("--hash-layers", o.n_hash_layers, "first layers routed by token id (deepseek4)");
  auto* nextn = app.add_option(
      "--nextn", o.n_nextn,
      "multi-token-prediction layers after the main ones (glm4moe, deepseek2); deepseek4: 1 "
      "writes the separate MTP GGUF for the model of the same flags (--mtp FILE)");
  auto* t_exp = app.add_option("--type-experts", type_experts, "routed expert weights type (default Q4_K)");
  auto* t_exp_down = app.add_option("--type-experts-down", type_experts_down,
                                    "routed ffn_down_exps type (default: --type-experts, or the preset's)");
  auto* t_mixed = app.add_option("--mixed-experts", mixed_experts,
                                 "routed experts (gate, up, down) of the odd layers of this type, e.g. Q4_K among "
                                 "IQ2_XXS/Q2_K layers: mixed expert sizes as in real 2-bit builds");
  auto* t_attn = app.add_option("--type-attn", type_attn, "attention weights type (default Q4_K, attn_v Q6_K)");
  auto* t_embd = app.add_option("--type-embd", type_embd, "token embedding type (default Q4_K)");
  auto* t_out = app.add_option("--type-output", type_output, "output head type (default Q6_K)");
  auto* t_dense = app.add_option("--type-dense", type_dense, "dense FFN weights type (default Q4_K)");
  auto* zipf = app.add_option("--zipf", o.zipf, "expert popularity ~ rank^-S (S > 0; default uniform)");
  auto* seed = app.add_option("--seed", o.seed, "random seed (same seed, same bytes)");
  auto* vocab_from = app.add_option("--vocab-from", o.vocab_from,
                                    "GGUF whose tokenizer is embedded (default: $SLUICE_VOCAB or the repository's test vocabulary)");
  bool legacy = false;
  app.add_flag("--legacy-experts", legacy, "Mixtral only: one blk.N.ffn_{gate,up,down}.E.weight tensor per expert");
  SLUICE_PARSE(app, argc, argv);

  GenSpec s = gen_preset(preset);
  auto take = [](CLI::Option* opt, auto& dst, const auto& value) {
    if (opt->count()) dst = value;
  };
  take(layers, s.n_layer, o.n_layer);
  take(experts, s.n_expert, o.n_expert);
  take(used, s.n_expert_used, o.n_expert_used);
  take(embd, s.n_embd, o.n_embd);
  take(ff_exp, s.n_ff_exp, o.n_ff_exp);
  take(ff, s.n_ff, o.n_ff);
  take(heads, s.n_head, o.n_head);
  take(kv_heads, s.n_head_kv, o.n_head_kv);
  take(head_dim, s.head_dim, o.head_dim);
  take(vocab, s.n_vocab, o.n_vocab);
  take(ctx, s.n_ctx, o.n_ctx);
  take(shared, s.n_expert_shared, o.n_expert_shared);
  take(dense, s.n_leading_dense, o.n_leading_dense);
  take(q_lora, s.q_lora_rank, o.q_lora_rank);
  take(kv_lora, s.kv_lora_rank, o.kv_lora_rank);
  take(rope_dim, s.rope_dim, o.rope_dim);
  take(nextn, s.n_nextn, o.n_nextn);
  take(out_groups, s.n_out_groups, o.n_out_groups);
  take(out_lora, s.out_lora_rank, o.out_lora_rank);
  take(window, s.sliding_window, o.sliding_window);
  take(idx_heads, s.indexer_heads, o.indexer_heads);
  take(idx_dim, s.indexer_dim, o.indexer_dim);
  take(idx_top_k, s.indexer_top_k, o.indexer_top_k);
  take(hash_layers, s.n_hash_layers, o.n_hash_layers);
  take(zipf, s.zipf, o.zipf);
  take(seed, s.seed, o.seed);
  if (t_exp->count()) {
    s.type_experts = parse_type("--type-experts", type_experts);
    s.type_experts_down.reset();
  }
  if (t_exp_down->count()) s.type_experts_down = parse_type("--type-experts-down", type_experts_down);
  if (t_mixed->count()) s.type_experts_mixed = parse_type("--mixed-experts", mixed_experts);
  if (t_attn->count()) s.type_attn = s.type_attn_v = parse_type("--type-attn", type_attn);
  if (t_embd->count()) s.type_embd = parse_type("--type-embd", type_embd);
  if (t_out->count()) s.type_output = parse_type("--type-output", type_output);
  if (t_dense->count()) s.type_dense = parse_type("--type-dense", type_dense);
  s.legacy_experts = legacy;
  s.vocab_from = vocab_from->count() ? o.vocab_from : default_vocab(SLUICE_SOURCE_DIR);

  check_output(out, force);
  const GenResult r = write_random_model(s, out);
  const double gib = static_cast<double>(r.bytes) / (1ull << 30);
  fmt::print("wrote {}: {} {} layers, {} tensors, {:.2f} GiB in {:.1f} s ({:.2f} GB/s)\n", out, s.arch, s.n_layer,
             r.n_tensors, gib, r.seconds, r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0);
  return 0;
}

}  // namespace sluice::cli
