// gen-model presets of the large MoE families (deepseek2: deepseek-v3, kimi-k2; gpt-oss:
// gpt-oss-20b/120b; glm4moe: glm-4.5-air, glm-4.6): the full-size presets carry the real
// hyperparameters; cut down to three layers of small dims each writes its family's keys and
// tensors (checked here name by name against the layout, independently of the writer), loads
// through the architecture's loader and runs with finite logits of sane size; `inspect` sorts the
// tensors into the classes the engine treats them by (shared experts and MLA weights resident,
// nextn layers unused), and its routed expert weights are what the engine streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "gen/gen_model.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "plan/sizing.h"
#include "plan/tensor_class.h"
#include "quant/dequant.h"
#include "sluice/sluice.h"
#include "ds4_cut.h"
#include "test_util.h"

using namespace sluice;

namespace {

const std::string kVocab = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
const char* const kPresets[] = {"deepseek-v3", "kimi-k2", "gpt-oss-20b", "gpt-oss-120b", "glm-4.5-air", "glm-4.6"};

// Three main layers of small dims: rows of 256 for the K-quants, 4 heads of 64, 16 experts.
GenSpec cut(const std::string& preset) {
  GenSpec s = gen_preset(preset);
  s.n_layer = 3;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = s.arch == "deepseek2" ? 1 : 2;
  s.head_dim = 64;
  s.n_ff = 512;
  s.n_ff_exp = 256;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_vocab = 2048;
  s.vocab_from = kVocab;
  if (s.arch == "deepseek2") {
    s.q_lora_rank = s.kv_lora_rank = 256;
    s.rope_dim = 32;
  }
  return s;
}

std::string write(const GenSpec& s) {
  const std::string path = (test::scratch_dir() / ("moe-" + s.preset + ".gguf")).string();
  write_random_model(s, path);
  return path;
}

struct Want {
  std::vector<int64_t> ne;
  TensorClass cls;
};

// The tensors of a cut-down file, from the architecture's GGUF layout (llama.cpp's converters).
std::map<std::string, Want> layout(const GenSpec& s, int n_dense) {
  using C = TensorClass;
  std::map<std::string, Want> t;
  const int64_t d = s.n_embd, H = s.n_head, hd = s.head_dim, E = s.n_expert, ff = s.n_ff_exp, v = s.n_vocab;
  t["token_embd.weight"] = {{d, v}, C::Embedding};
  t["output_norm.weight"] = {{d}, C::Norm};
  t["output.weight"] = {{d, v}, C::Output};
  for (int il = 0; il < s.n_layer + s.n_nextn; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const bool mtp = il >= s.n_layer;
    auto add = [&](const std::string& name, std::vector<int64_t> ne, C c) { t[p + name] = {std::move(ne), mtp ? C::Other : c}; };
    add("attn_norm.weight", {d}, C::Norm);
    if (s.arch == "deepseek2") {
      const int64_t r = s.kv_lora_rank, rope = s.rope_dim;
      add("attn_q_a.weight", {d, s.q_lora_rank}, C::Attention);
      add("attn_q_a_norm.weight", {s.q_lora_rank}, C::Norm);
      add("attn_q_b.weight", {s.q_lora_rank, H * (hd + rope)}, C::Attention);
      add("attn_kv_a_mqa.weight", {d, r + rope}, C::Attention);
      add("attn_kv_a_norm.weight", {r}, C::Norm);
      add("attn_k_b.weight", {hd, r, H}, C::Attention);
      add("attn_v_b.weight", {r, hd, H}, C::Attention);
      add("attn_output.weight", {H * hd, d}, C::Attention);
      add("ffn_norm.weight", {d}, C::Norm);
    } else {
      const int64_t kv = int64_t{s.n_head_kv} * hd;
      add("attn_q.weight", {d, H * hd}, C::Attention);
      add("attn_k.weight", {d, kv}, C::Attention);
      add("attn_v.weight", {d, kv}, C::Attention);
      add("attn_output.weight", {H * hd, d}, C::Attention);
      add("attn_q.bias", {H * hd}, C::Attention);
      add("attn_k.bias", {kv}, C::Attention);
      add("attn_v.bias", {kv}, C::Attention);
      add("post_attention_norm.weight", {d}, C::Norm);
      if (s.qk_norm) {
        add("attn_q_norm.weight", {hd}, C::Norm);
        add("attn_k_norm.weight", {hd}, C::Norm);
      }
    }
    if (s.arch == "gpt-oss") {
      add("attn_output.bias", {d}, C::Attention);
      add("attn_sinks.weight", {H}, C::Attention);
      add("ffn_gate_inp.bias", {E}, C::Router);
      add("ffn_gate_exps.bias", {ff, E}, C::RoutedExpert);
      add("ffn_up_exps.bias", {ff, E}, C::RoutedExpert);
      add("ffn_down_exps.bias", {d, E}, C::RoutedExpert);
    }
    if (il < n_dense) {
      add("ffn_gate.weight", {d, s.n_ff}, C::DenseFfn);
      add("ffn_up.weight", {d, s.n_ff}, C::DenseFfn);
      add("ffn_down.weight", {s.n_ff, d}, C::DenseFfn);
      continue;
    }
    add("ffn_gate_inp.weight", {d, E}, C::Router);
    add("ffn_gate_exps.weight", {d, ff, E}, C::RoutedExpert);
    add("ffn_up_exps.weight", {d, ff, E}, C::RoutedExpert);
    add("ffn_down_exps.weight", {ff, d, E}, C::RoutedExpert);
    if (s.arch == "gpt-oss") continue;
    add("exp_probs_b.bias", {E}, C::Router);
    add("ffn_gate_shexp.weight", {d, ff}, C::SharedExpert);
    add("ffn_up_shexp.weight", {d, ff}, C::SharedExpert);
    add("ffn_down_shexp.weight", {ff, d}, C::SharedExpert);
    if (!mtp) continue;
    add("nextn.eh_proj.weight", {2 * d, d}, C::Other);
    add("nextn.enorm.weight", {d}, C::Other);
    add("nextn.hnorm.weight", {d}, C::Other);
    add("nextn.shared_head_norm.weight", {d}, C::Other);
  }
  return t;
}

}  // namespace

TEST(GenMoePresets, FullSizePresetsCarryTheRealHyperparameters) {
  const GenSpec v3 = gen_preset("deepseek-v3");
  EXPECT_EQ(v3.arch, "deepseek2");
  EXPECT_EQ(v3.n_layer, 61);
  EXPECT_EQ(v3.n_embd, 7168);
  EXPECT_EQ(v3.n_head, 128);
  EXPECT_EQ(v3.q_lora_rank, 1536);
  EXPECT_EQ(v3.kv_lora_rank, 512);
  EXPECT_EQ(v3.head_dim, 128);
  EXPECT_EQ(v3.rope_dim, 64);
  EXPECT_EQ(v3.n_ff, 18432);
  EXPECT_EQ(v3.n_ff_exp, 2048);
  EXPECT_EQ(v3.n_expert, 256);
  EXPECT_EQ(v3.n_expert_used, 8);
  EXPECT_EQ(v3.n_expert_shared, 1);
  EXPECT_EQ(v3.n_leading_dense, 3);
  EXPECT_EQ(v3.n_expert_groups, 8);
  EXPECT_EQ(v3.n_group_used, 4);
  EXPECT_FLOAT_EQ(v3.expert_weights_scale, 2.5f);
  EXPECT_EQ(v3.n_vocab, 129280);
  EXPECT_FLOAT_EQ(v3.yarn_factor, 40.0f);
  EXPECT_EQ(v3.type_experts, GgmlType::Q2_K);
  const GenSpec k2 = gen_preset("kimi-k2");
  EXPECT_EQ(k2.n_head, 64);
  EXPECT_EQ(k2.n_expert, 384);
  EXPECT_EQ(k2.n_leading_dense, 1);
  EXPECT_EQ(k2.n_vocab, 163840);
  EXPECT_FLOAT_EQ(k2.rope_base, 50000.0f);
  const GenSpec g120 = gen_preset("gpt-oss-120b"), g20 = gen_preset("gpt-oss-20b");
  EXPECT_EQ(g120.n_layer, 36);
  EXPECT_EQ(g20.n_layer, 24);
  EXPECT_EQ(g120.n_expert, 128);
  EXPECT_EQ(g20.n_expert, 32);
  EXPECT_EQ(g120.n_expert_used, 4);
  EXPECT_EQ(g120.n_embd, 2880);
  EXPECT_EQ(g120.n_head * g120.head_dim, 4096);
  EXPECT_EQ(g120.n_head_kv, 8);
  EXPECT_EQ(g120.sliding_window, 128);
  EXPECT_FLOAT_EQ(g120.yarn_factor, 32.0f);
  EXPECT_EQ(g120.yarn_orig_ctx, 4096);
  EXPECT_EQ(g120.type_experts, GgmlType::MXFP4);
  const GenSpec air = gen_preset("glm-4.5-air"), g46 = gen_preset("glm-4.6");
  EXPECT_EQ(air.n_layer, 46);
  EXPECT_EQ(air.n_embd, 4096);
  EXPECT_EQ(air.n_expert, 128);
  EXPECT_EQ(air.n_ff_exp, 1408);
  EXPECT_EQ(air.n_leading_dense, 1);
  EXPECT_EQ(air.n_nextn, 1);
  EXPECT_FALSE(air.qk_norm);
  EXPECT_EQ(g46.n_layer, 92);
  EXPECT_EQ(g46.n_embd, 5120);
  EXPECT_EQ(g46.n_expert, 160);
  EXPECT_EQ(g46.n_leading_dense, 3);
  EXPECT_TRUE(g46.qk_norm);
}

TEST(GenMoePresets, CutDownFilesHaveTheLayoutKeysAndClasses) {
  for (const char* preset : kPresets) {
    SCOPED_TRACE(preset);
    const GenSpec s = cut(preset);
    const std::string path = write(s);
    auto f = gguf::File::open(path);
    const std::string a = s.arch + ".";
    // --layers 3 keeps the real leading dense layers but never all of them: V3's 3 become 2.
    const int n_dense = std::min(s.n_leading_dense, s.n_layer - 1);
    EXPECT_EQ(f->get_int(a + "block_count"), s.n_layer + s.n_nextn);
    const auto want = layout(s, n_dense);
    EXPECT_EQ(f->tensors().size(), want.size());
    ModelReport report = analyze_model(*f, SizingOptions{std::nullopt, uint64_t{1} << 30});
    uint64_t routed = 0, other = 0;
    for (const auto& t : f->tensors()) {
      SCOPED_TRACE(t.name);
      auto it = want.find(t.name);
      ASSERT_NE(it, want.end());
      ASSERT_EQ(t.n_dims, static_cast<int>(it->second.ne.size()));
      for (int i = 0; i < t.n_dims; ++i) EXPECT_EQ(t.ne[i], it->second.ne[i]);
      // The family's rule (its registry entry) and the name patterns of every layout agree.
      EXPECT_EQ(classify_tensor(t.name, report.first_mtp_layer, s.arch), it->second.cls);
      EXPECT_EQ(classify_tensor(t.name, report.first_mtp_layer), it->second.cls);
      if (it->second.cls == TensorClass::RoutedExpert) routed += t.nbytes;
      if (it->second.cls == TensorClass::Other) other += t.nbytes;
      std::vector<float> y(static_cast<size_t>(t.n_elements()));
      dequantize_row(t.type, t.data, y.data(), t.n_elements());
      EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float x) { return std::isfinite(x); }));
    }
    EXPECT_EQ(report.class_totals[static_cast<size_t>(TensorClass::RoutedExpert)], routed);
    EXPECT_EQ(report.class_totals[static_cast<size_t>(TensorClass::Other)], other);
    EXPECT_EQ(f->get_int(a + "expert_count"), s.n_expert);
    if (s.arch == "deepseek2") {
      EXPECT_EQ(f->get_int(a + "leading_dense_block_count"), n_dense);
      EXPECT_EQ(f->get_int(a + "attention.head_count_kv"), 1);
      EXPECT_EQ(f->get_int(a + "attention.kv_lora_rank"), 256);
      EXPECT_EQ(f->get_int(a + "attention.key_length"), 256 + 32);
      EXPECT_EQ(f->get_int(a + "attention.value_length"), 256);
      EXPECT_EQ(f->get_int(a + "attention.key_length_mla"), 64 + 32);
      EXPECT_EQ(f->get_int(a + "attention.value_length_mla"), 64);
      EXPECT_EQ(f->get_int(a + "rope.dimension_count"), 32);
      EXPECT_EQ(f->get_int(a + "expert_gating_func"), 2);
      EXPECT_EQ(f->get_int(a + "expert_group_count"), s.n_expert_groups);
      EXPECT_TRUE(f->get_bool_or(a + "expert_weights_norm", false));
      EXPECT_EQ(f->get_string(a + "rope.scaling.type"), "yarn");
      EXPECT_FLOAT_EQ(static_cast<float>(f->get_float(a + "rope.scaling.yarn_log_multiplier")), 0.1f);
      EXPECT_EQ(f->tensor("blk.0.attn_k_b.weight").type, GgmlType::Q8_0);  // rows of 64: no K-quant
      EXPECT_EQ(f->tensor("blk.2.ffn_up_exps.weight").type, GgmlType::Q2_K);
      EXPECT_TRUE(report.model.is_mla);
      EXPECT_EQ(report.kv.bytes_per_token, uint64_t{3} * (256 + 32) * 4);
    } else if (s.arch == "gpt-oss") {
      EXPECT_EQ(f->get_int(a + "attention.sliding_window"), 128);
      EXPECT_EQ(f->get_int(a + "attention.key_length"), 64);
      EXPECT_EQ(f->get_string(a + "rope.scaling.type"), "yarn");
      EXPECT_EQ(f->get_int(a + "rope.scaling.original_context_length"), 4096);
      EXPECT_EQ(f->tensor("blk.1.ffn_down_exps.weight").type, GgmlType::MXFP4);
      EXPECT_EQ(f->tensor("blk.1.attn_q.weight").type, GgmlType::Q8_0);
    } else {
      EXPECT_EQ(f->get_int(a + "nextn_predict_layers"), 1);
      EXPECT_EQ(f->get_int(a + "leading_dense_block_count"), n_dense);
      EXPECT_EQ(f->get_int(a + "rope.dimension_count"), 32);  // half of each 64-value head
      EXPECT_EQ(f->get_int(a + "expert_shared_count"), 1);
      EXPECT_EQ(report.first_mtp_layer, 3);
      EXPECT_GT(other, 0u);
      EXPECT_EQ(report.kv.n_layer, 3);
    }

    // inspect's KV estimate is what the engine's cache holds, per stored type (MLA: the latent and
    // the rope key only; gpt-oss: rings of window + step rows on windowed layers; no MTP layers).
    const auto model = load_model(*f);
    for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0}) {
      SCOPED_TRACE(kv_type_name(t));
      SizingOptions o{std::nullopt, uint64_t{1} << 30};
      o.kv = engine_kv_config(t, t);
      const ModelReport rt = analyze_model(*f, o);
      const auto cache = model->make_kv_cache(static_cast<int>(rt.kv.ctx), o.kv);
      EXPECT_EQ(cache->bytes_per_position(), rt.kv.bytes_per_token);
      EXPECT_EQ(cache->bytes_for(0), rt.kv.fixed_bytes);
      if (s.arch == "gpt-oss") {
        EXPECT_GT(rt.kv.fixed_bytes, 0u);
      }
      if (t == KvType::kQ8_0) {
        EXPECT_LT(rt.kv.bytes_per_token * 3, report.kv.bytes_per_token);
      }
    }

    // The engine streams the routed experts inspect counts (none of the nextn layer's), gpt-oss's
    // per-expert biases with their experts.
    auto engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 128});
    EXPECT_EQ(engine->info().routed_bytes, routed);
    EXPECT_EQ(engine->info().n_layer, s.n_layer);
    auto session = engine->new_session();
    const auto logits = session->evaluate(engine->tokenize("The quick brown fox jumps over the lazy dog.", true));
    ASSERT_EQ(logits.size(), 2048u);
    double ss = 0;
    for (float x : logits) {
      ASSERT_TRUE(std::isfinite(x));
      ss += double(x) * x;
    }
    const double rms = std::sqrt(ss / logits.size());
    EXPECT_GT(rms, 0.1);
    EXPECT_LT(rms, 10.0);
  }
}

TEST(GenMoePresets, CutsKeepOneMoeLayerAndRejectBadGroups) {
  GenSpec s = cut("deepseek-v3");
  s.n_layer = 1;
  auto f = gguf::File::open(write(s));
  EXPECT_EQ(f->get_int("deepseek2.leading_dense_block_count"), 0);
  EXPECT_NE(f->find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);

  auto message = [](GenSpec bad) {
    try {
      write(bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  s = cut("deepseek-v3");
  s.n_expert = 12;  // 8 groups
  EXPECT_NE(message(s).find("cannot be split into the preset's 8 expert groups"), std::string::npos);
  s = cut("deepseek-v3");
  s.n_expert_used = 12;  // 4 groups of 2 hold only 8
  EXPECT_NE(message(s).find("cannot supply --experts-used 12"), std::string::npos);
  s = cut("deepseek-v3");
  s.n_head_kv = 2;
  EXPECT_NE(message(s).find("head_count_kv 1"), std::string::npos);
  s = cut("glm-4.5-air");
  s.n_expert_shared = 0;
  EXPECT_NE(message(s).find("needs a shared expert"), std::string::npos);
}

namespace {

// DeepSeek V4's tensors with their ggml shapes, classes and the types of ds4's 2-bit build, from
// the fact sheet's table (shared/docs/deepseek4.md §3), independently of the writer.
struct Ds4Want {
  std::vector<int64_t> ne;
  TensorClass cls;
  GgmlType type;
};

std::map<std::string, Ds4Want> ds4_layout(const GenSpec& s) {
  using C = TensorClass;
  using T = GgmlType;
  std::map<std::string, Ds4Want> t;
  const int64_t d = s.n_embd, H = s.n_head, D = s.head_dim, Q = s.q_lora_rank, G = s.n_out_groups,
                O = s.out_lora_rank, E = s.n_expert, K = s.n_expert_used, F = s.n_ff_exp, V = s.n_vocab, S = 4;
  const int64_t Ih = s.indexer_heads, Id = s.indexer_dim;
  t["token_embd.weight"] = {{d, V}, C::Embedding, T::F16};
  t["output.weight"] = {{d, V}, C::Output, T::Q8_0};
  t["output_norm.weight"] = {{d}, C::Norm, T::F32};
  t["output_hc_fn.weight"] = {{S * d, S}, C::Other, T::F16};
  t["output_hc_base.weight"] = {{S}, C::Other, T::F32};
  t["output_hc_scale.weight"] = {{1}, C::Other, T::F32};
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> ne, C c, T type) { t[p + name] = {std::move(ne), c, type}; };
    const int r = il < 2 ? 0 : il % 2 == 0 ? 4 : 128;
    for (const char* hc : {"hc_attn_", "hc_ffn_"}) {
      add(std::string(hc) + "fn.weight", {S * d, (2 + S) * S}, C::Other, T::F16);
      add(std::string(hc) + "base.weight", {(2 + S) * S}, C::Other, T::F32);
      add(std::string(hc) + "scale.weight", {3}, C::Other, T::F32);
    }
    add("attn_norm.weight", {d}, C::Norm, T::F32);
    add("attn_q_a.weight", {d, Q}, C::Attention, T::Q8_0);
    add("attn_q_a_norm.weight", {Q}, C::Norm, T::F32);
    add("attn_q_b.weight", {Q, H * D}, C::Attention, T::Q8_0);
    add("attn_kv.weight", {d, D}, C::Attention, T::Q8_0);
    add("attn_kv_a_norm.weight", {D}, C::Norm, T::F32);
    add("attn_sinks.weight", {H}, C::Attention, T::F32);
    add("attn_output_a.weight", {H * D / G, G * O}, C::Attention, T::Q8_0);
    add("attn_output_b.weight", {G * O, d}, C::Attention, T::Q8_0);
    if (r != 0) {
      const int64_t c = r == 4 ? 2 : 1;
      add("attn_compressor_kv.weight", {d, c * D}, C::Attention, T::F16);
      add("attn_compressor_gate.weight", {d, c * D}, C::Attention, T::F16);
      add("attn_compressor_ape.weight", {c * D, r}, C::Attention, T::F32);
      add("attn_compressor_norm.weight", {D}, C::Norm, T::F32);
    }
    if (r == 4) {
      add("indexer.attn_q_b.weight", {Q, Ih * Id}, C::Other, T::Q8_0);
      add("indexer.proj.weight", {d, Ih}, C::Other, T::F16);
      add("indexer_compressor_kv.weight", {d, 2 * Id}, C::Other, T::F16);
      add("indexer_compressor_gate.weight", {d, 2 * Id}, C::Other, T::F16);
      add("indexer_compressor_ape.weight", {2 * Id, 4}, C::Other, T::F32);
      add("indexer_compressor_norm.weight", {Id}, C::Norm, T::F32);
    }
    add("ffn_norm.weight", {d}, C::Norm, T::F32);
    add("ffn_gate_inp.weight", {d, E}, C::Router, T::F16);
    if (il < s.n_hash_layers) add("ffn_gate_tid2eid.weight", {K, V}, C::Other, T::I32);
    else add("exp_probs_b.bias", {E}, C::Router, T::F32);
    const bool q4 = s.type_experts_mixed && il % 2 == 1;
    add("ffn_gate_exps.weight", {d, F, E}, C::RoutedExpert, q4 ? T::Q4_K : T::IQ2_XXS);
    add("ffn_up_exps.weight", {d, F, E}, C::RoutedExpert, q4 ? T::Q4_K : T::IQ2_XXS);
    add("ffn_down_exps.weight", {F, d, E}, C::RoutedExpert, q4 ? T::Q4_K : T::Q2_K);
    add("ffn_gate_shexp.weight", {d, F}, C::SharedExpert, T::Q8_0);
    add("ffn_up_shexp.weight", {d, F}, C::SharedExpert, T::Q8_0);
    add("ffn_down_shexp.weight", {F, d}, C::SharedExpert, T::Q8_0);
  }
  return t;
}

// Six layers (every layer kind, hash and non-hash) of the reference model's small dims.
GenSpec ds4_cut() {
  GenSpec s = test::ds4_cut({.n_embd = 256, .head_dim = 128, .rope_dim = 32, .q_lora_rank = 128,
                             .out_lora_rank = 64, .window = 64, .indexer_heads = 16, .indexer_dim = 64,
                             .indexer_top_k = 16, .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256});
  s.n_vocab = 2048;
  s.vocab_from = kVocab;
  return s;
}

}  // namespace

TEST(GenMoePresets, DeepSeekV4FlashPresetCarriesTheRealHyperparameters) {
  const GenSpec s = gen_preset("deepseek-v4-flash");
  EXPECT_EQ(s.arch, "deepseek4");
  EXPECT_EQ(s.n_layer, 43);
  EXPECT_EQ(s.n_embd, 4096);
  EXPECT_EQ(s.n_head, 64);
  EXPECT_EQ(s.head_dim, 512);
  EXPECT_EQ(s.rope_dim, 64);
  EXPECT_EQ(s.q_lora_rank, 1024);
  EXPECT_EQ(s.n_out_groups, 8);
  EXPECT_EQ(s.out_lora_rank, 1024);
  EXPECT_EQ(s.sliding_window, 128);
  EXPECT_EQ(s.indexer_heads, 64);
  EXPECT_EQ(s.indexer_dim, 128);
  EXPECT_EQ(s.indexer_top_k, 512);
  EXPECT_EQ(s.n_expert, 256);
  EXPECT_EQ(s.n_expert_used, 6);
  EXPECT_EQ(s.n_ff_exp, 2048);
  EXPECT_EQ(s.n_expert_shared, 1);
  EXPECT_EQ(s.n_hash_layers, 3);
  EXPECT_EQ(s.n_vocab, 129280);
  EXPECT_EQ(s.n_ctx, 1048576);
  EXPECT_FLOAT_EQ(s.compress_rope_base, 160000.0f);
  EXPECT_FLOAT_EQ(s.yarn_factor, 16.0f);
  EXPECT_EQ(s.yarn_orig_ctx, 65536);
  EXPECT_FLOAT_EQ(s.expert_weights_scale, 1.5f);
  EXPECT_FLOAT_EQ(s.swiglu_clamp, 10.0f);
  EXPECT_EQ(s.type_experts, GgmlType::IQ2_XXS);
  EXPECT_EQ(s.type_experts_down, GgmlType::Q2_K);
}

TEST(GenMoePresets, DeepSeekV4FlashCutDownHasTheConverterLayoutKeysTypesAndClasses) {
  for (const bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "mixed experts" : "2-bit experts");
    GenSpec s = ds4_cut();
    s.preset += mixed ? "-mixed" : "";
    if (mixed) s.type_experts_mixed = GgmlType::Q4_K;
    const std::string path = write(s);
    auto f = gguf::File::open(path);
    const auto want = ds4_layout(s);
    EXPECT_EQ(f->tensors().size(), want.size());
    ModelReport report = analyze_model(*f, SizingOptions{std::nullopt, uint64_t{1} << 30});
    uint64_t routed = 0;
    for (const auto& t : f->tensors()) {
      SCOPED_TRACE(t.name);
      auto it = want.find(t.name);
      ASSERT_NE(it, want.end()) << "unexpected tensor";
      ASSERT_EQ(static_cast<size_t>(t.n_dims), it->second.ne.size());
      for (int i = 0; i < t.n_dims; ++i) EXPECT_EQ(t.ne[i], it->second.ne[i]);
      // The family's rule (its registry entry) and the name patterns of every layout agree.
      EXPECT_EQ(classify_tensor(t.name, report.first_mtp_layer, s.arch), it->second.cls);
      EXPECT_EQ(classify_tensor(t.name, report.first_mtp_layer), it->second.cls);
      EXPECT_EQ(t.type, it->second.type) << type_name(t.type) << " vs " << type_name(it->second.type);
      if (it->second.cls == TensorClass::RoutedExpert) routed += t.nbytes;
    }
    EXPECT_EQ(report.class_totals[static_cast<size_t>(TensorClass::RoutedExpert)], routed);
    // Hash tables: K distinct valid expert ids per token id.
    for (int il = 0; il < s.n_hash_layers; ++il) {
      const gguf::TensorInfo& t = f->tensor("blk." + std::to_string(il) + ".ffn_gate_tid2eid.weight");
      const int32_t* ids = reinterpret_cast<const int32_t*>(t.data);
      for (int64_t v = 0; v < t.ne[1]; ++v) {
        const int32_t* row = ids + v * t.ne[0];
        for (int k = 0; k < t.ne[0]; ++k) {
          ASSERT_GE(row[k], 0);
          ASSERT_LT(row[k], s.n_expert);
          for (int j = 0; j < k; ++j) ASSERT_NE(row[j], row[k]) << "token " << v;
        }
      }
    }
    const std::string a = "deepseek4.";
    EXPECT_EQ(f->get_string("general.architecture"), "deepseek4");
    EXPECT_EQ(f->get_int(a + "block_count"), 6);
    EXPECT_EQ(f->get_int_array(a + "attention.compress_ratios"), (std::vector<int64_t>{0, 0, 4, 128, 4, 128, 0}));
    EXPECT_EQ(f->get_int(a + "hash_layer_count"), 3);
    EXPECT_EQ(f->get_int(a + "attention.head_count_kv"), 1);
    EXPECT_EQ(f->get_int(a + "attention.key_length"), 128);
    EXPECT_EQ(f->get_int(a + "attention.value_length"), 128);
    EXPECT_EQ(f->get_int(a + "embedding_length_out"), 4 * 256);
    EXPECT_EQ(f->get_int(a + "expert_gating_func"), 4);
    EXPECT_EQ(f->get_int(a + "hyper_connection.count"), 4);
    EXPECT_EQ(f->get_int(a + "attention.indexer.key_length"), 64);
    EXPECT_EQ(f->get_float_array(a + "swiglu_clamp_exp"), std::vector<float>(6, 10.0f));
    EXPECT_FLOAT_EQ(static_cast<float>(f->get_float(a + "attention.compress_rope_freq_base")), 160000.0f);
    EXPECT_EQ(f->get_string(a + "rope.scaling.type"), "yarn");
    for (const char* absent : {"feed_forward_length", "leading_dense_block_count", "expert_group_count", "vocab_size"})
      EXPECT_FALSE(f->has(a + absent)) << absent;

    // It loads through the deepseek4 architecture and runs; the engine streams what inspect
    // counts as routed.
    auto engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 128});
    EXPECT_EQ(engine->info().routed_bytes, routed);
    auto session = engine->new_session();
    const auto logits = session->evaluate(engine->tokenize("The quick brown fox jumps over the lazy dog.", true));
    ASSERT_EQ(logits.size(), 2048u);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}
