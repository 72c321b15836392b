// gen-model: every preset (cut down to one layer of small dims) writes the real tensor layout and
// keys; drawn blocks of every type dequantize to finite values of the target RMS; seeds make files
// reproducible; the legacy Mixtral layout; the padded tokenizer; the Zipf fit; spec validation and
// the CLI's success and error paths; generated models run through the engine with finite logits,
// and --zipf skews the experts the forward pass actually routes to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "gen/gen_model.h"
#include "gen/random_fill.h"
#include "gen/zipf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "quant/dequant.h"
#include "sluice/sluice.h"
#include "test_util.h"

using namespace sluice;

namespace {

const std::string kVocab = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
constexpr size_t kVocabTokens = 1026;

// One layer of dims every block type divides: rows of 256, q width 256 (4 × 64) ≠ n_embd for
// the qwen3 presets' head size, 4 experts top-2, 2048 vocabulary rows.
GenSpec small(const std::string& preset) {
  GenSpec s = gen_preset(preset);
  s.n_layer = 1;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 512;
  s.n_ff_exp = 256;
  if (s.n_expert) {
    s.n_expert = 4;
    s.n_expert_used = 2;
  }
  s.n_vocab = 2048;
  s.vocab_from = kVocab;
  return s;
}

// Presets of the qwen3 and llama families, whose layout expected_tensors() describes; the
// deepseek2, gpt-oss and glm4moe presets are checked in gen_moe_presets_test.cpp.
bool basic_family(const char* preset) {
  const std::string arch = gen_preset(preset).arch;
  return arch == "qwen3moe" || arch == "qwen3" || arch == "llama";
}

std::string write(const GenSpec& s, const std::string& file) {
  const std::string path = (test::scratch_dir() / file).string();
  write_random_model(s, path);
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Expect {
  GgmlType type;
  std::vector<int64_t> ne;
};

// The tensors a one-layer model of spec s must hold, built from the architecture's layout.
std::map<std::string, Expect> expected_tensors(const GenSpec& s) {
  std::map<std::string, Expect> t;
  const int64_t d = s.n_embd, q = int64_t{s.n_head} * s.head_dim, kv = int64_t{s.n_head_kv} * s.head_dim;
  const int64_t v = s.n_vocab;
  t["token_embd.weight"] = {s.type_embd, {d, v}};
  t["output_norm.weight"] = {GgmlType::F32, {d}};
  if (!s.tied_output) t["output.weight"] = {s.type_output, {d, v}};
  t["blk.0.attn_norm.weight"] = {GgmlType::F32, {d}};
  t["blk.0.attn_q.weight"] = {s.type_attn, {d, q}};
  t["blk.0.attn_k.weight"] = {s.type_attn, {d, kv}};
  t["blk.0.attn_v.weight"] = {s.type_attn_v, {d, kv}};
  t["blk.0.attn_output.weight"] = {s.type_attn, {q, d}};
  if (s.arch != "llama") {
    t["blk.0.attn_q_norm.weight"] = {GgmlType::F32, {s.head_dim}};
    t["blk.0.attn_k_norm.weight"] = {GgmlType::F32, {s.head_dim}};
  }
  t["blk.0.ffn_norm.weight"] = {GgmlType::F32, {d}};
  if (s.n_expert == 0) {
    t["blk.0.ffn_gate.weight"] = {s.type_dense, {d, s.n_ff}};
    t["blk.0.ffn_up.weight"] = {s.type_dense, {d, s.n_ff}};
    t["blk.0.ffn_down.weight"] = {s.type_dense, {s.n_ff, d}};
    return t;
  }
  t["blk.0.ffn_gate_inp.weight"] = {GgmlType::F32, {d, s.n_expert}};
  if (s.legacy_experts) {
    for (int e = 0; e < s.n_expert; ++e) {
      const std::string E = "." + std::to_string(e) + ".weight";
      t["blk.0.ffn_gate" + E] = {s.type_experts, {d, s.n_ff_exp}};
      t["blk.0.ffn_up" + E] = {s.type_experts, {d, s.n_ff_exp}};
      t["blk.0.ffn_down" + E] = {s.type_experts, {s.n_ff_exp, d}};
    }
  } else {
    t["blk.0.ffn_gate_exps.weight"] = {s.type_experts, {d, s.n_ff_exp, s.n_expert}};
    t["blk.0.ffn_up_exps.weight"] = {s.type_experts, {d, s.n_ff_exp, s.n_expert}};
    t["blk.0.ffn_down_exps.weight"] = {s.type_experts, {s.n_ff_exp, d, s.n_expert}};
  }
  return t;
}

void check_layout(const GenSpec& s, const gguf::File& f) {
  const auto want = expected_tensors(s);
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end());
    EXPECT_EQ(t.type, it->second.type);
    ASSERT_EQ(t.n_dims, static_cast<int>(it->second.ne.size()));
    for (int i = 0; i < t.n_dims; ++i) EXPECT_EQ(t.ne[i], it->second.ne[i]);
  }
  const std::string a = s.arch + ".";
  EXPECT_EQ(f.get_string("general.architecture"), s.arch);
  EXPECT_EQ(f.get_int(a + "block_count"), s.n_layer);
  EXPECT_EQ(f.get_int(a + "embedding_length"), s.n_embd);
  EXPECT_EQ(f.get_int(a + "context_length"), s.n_ctx);
  EXPECT_EQ(f.get_int(a + "attention.head_count"), s.n_head);
  EXPECT_EQ(f.get_int(a + "attention.head_count_kv"), s.n_head_kv);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float(a + "rope.freq_base")), s.rope_base);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon")), s.rms_eps);
  if (s.n_expert) {
    EXPECT_EQ(f.get_int(a + "expert_count"), s.n_expert);
    EXPECT_EQ(f.get_int(a + "expert_used_count"), s.n_expert_used);
  } else {
    EXPECT_FALSE(f.has(a + "expert_count"));
  }
  if (s.arch == "llama") {
    EXPECT_EQ(f.get_int(a + "feed_forward_length"), s.n_expert ? s.n_ff_exp : s.n_ff);
    EXPECT_EQ(f.get_int(a + "rope.dimension_count"), s.head_dim);
    EXPECT_EQ(f.get_int(a + "vocab_size"), s.n_vocab);
  } else {
    EXPECT_EQ(f.get_int(a + "feed_forward_length"), s.n_ff);
    EXPECT_EQ(f.get_int(a + "attention.key_length"), s.head_dim);
    EXPECT_EQ(f.get_int(a + "attention.value_length"), s.head_dim);
    if (s.n_expert) {
      EXPECT_EQ(f.get_int(a + "expert_feed_forward_length"), s.n_ff_exp);
    }
  }
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), static_cast<size_t>(s.n_vocab));
}

double rms_of(const std::vector<float>& y) {
  double ss = 0;
  for (float v : y) ss += static_cast<double>(v) * v;
  return std::sqrt(ss / static_cast<double>(y.size()));
}

// Every weight dequantizes to finite values within 2× of the intended RMS: 1/sqrt(n_in), 1 for
// embedding rows (fan-in 1), 3× for q and k; norms are 1 but QK-norms (3) and a tied head's final
// norm (1/sqrt(n_embd)).
void check_values(const gguf::File& f) {
  const bool tied = f.find_tensor("output.weight") == nullptr;
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    std::vector<float> y(static_cast<size_t>(t.n_elements()));
    dequantize_row(t.type, t.data, y.data(), t.n_elements());
    ASSERT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
    const double fan_in = 1.0 / std::sqrt(static_cast<double>(t.ne[0]));
    if (t.name.find("norm") != std::string::npos) {
      const bool qk = t.name.find("attn_q_norm") != std::string::npos || t.name.find("attn_k_norm") != std::string::npos;
      const float want = qk ? 3.0f : tied && t.name == "output_norm.weight" ? static_cast<float>(fan_in) : 1.0f;
      EXPECT_TRUE(std::all_of(y.begin(), y.end(), [&](float v) { return v == want; }));
      continue;
    }
    const bool qk_proj = t.name.find("attn_q.") != std::string::npos || t.name.find("attn_k.") != std::string::npos;
    const double target = t.name == "token_embd.weight" ? 1.0
                          : qk_proj && f.get_string("general.architecture") == "llama" ? 3.0 * fan_in
                                                                                       : fan_in;
    const double rms = rms_of(y);
    // Zipf-scaled router rows are larger on purpose; the others must be near the target.
    if (t.name.find("ffn_gate_inp") == std::string::npos) {
      EXPECT_GT(rms, target / 2);
      EXPECT_LT(rms, target * 2);
    }
  }
}

}  // namespace

TEST(GenModel, EveryPresetWritesItsLayoutAndKeys) {
  for (const auto& p : gen_presets()) {
    if (!basic_family(p.name)) continue;
    SCOPED_TRACE(p.name);
    const GenSpec s = small(p.name);
    auto f = gguf::File::open(write(s, std::string(p.name) + ".gguf"));
    check_layout(s, *f);
    check_values(*f);
  }
}

TEST(GenModel, FullSizePresetsCarryTheRealHyperparameters) {
  const GenSpec q30 = gen_preset("qwen3-30b-a3b");
  EXPECT_EQ(q30.arch, "qwen3moe");
  EXPECT_EQ(q30.n_layer, 48);
  EXPECT_EQ(q30.n_embd, 2048);
  EXPECT_EQ(q30.n_head * q30.head_dim, 4096);
  EXPECT_EQ(q30.n_head_kv, 4);
  EXPECT_EQ(q30.n_expert, 128);
  EXPECT_EQ(q30.n_expert_used, 8);
  EXPECT_EQ(q30.n_ff_exp, 768);
  EXPECT_EQ(q30.n_vocab, 151936);
  EXPECT_EQ(q30.n_ctx, 40960);
  EXPECT_FLOAT_EQ(q30.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(q30.rms_eps, 1e-6f);
  EXPECT_EQ(q30.type_experts, GgmlType::Q4_K);
  EXPECT_EQ(q30.type_output, GgmlType::Q6_K);
  const GenSpec q235 = gen_preset("qwen3-235b-a22b");
  EXPECT_EQ(q235.n_layer, 94);
  EXPECT_EQ(q235.n_embd, 4096);
  EXPECT_EQ(q235.n_head, 64);
  EXPECT_EQ(q235.n_ff_exp, 1536);
  const GenSpec mx = gen_preset("mixtral-8x7b");
  EXPECT_EQ(mx.arch, "llama");
  EXPECT_EQ(mx.n_layer, 32);
  EXPECT_EQ(mx.n_head_kv, 8);
  EXPECT_EQ(mx.n_expert, 8);
  EXPECT_EQ(mx.n_expert_used, 2);
  EXPECT_EQ(mx.n_ff_exp, 14336);
  EXPECT_EQ(mx.n_vocab, 32000);
  const GenSpec tiny = gen_preset("tiny");
  EXPECT_EQ(tiny.n_layer, 2);
  EXPECT_EQ(tiny.type_experts, GgmlType::F32);
  EXPECT_TRUE(tiny.tied_output);
}

TEST(GenModel, TinyPresetUsesTheTokenizerSizeAndF32) {
  GenSpec s = gen_preset("tiny");
  s.vocab_from = kVocab;
  auto f = gguf::File::open(write(s, "tiny-full.gguf"));
  EXPECT_EQ(f->tensor("token_embd.weight").ne[1], static_cast<int64_t>(kVocabTokens));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->tensors().size(), 2u + 2u * 12u);  // tied: no output.weight
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, GgmlType::F32) << t.name;
  check_values(*f);
}

TEST(GenModel, TokenizerIsPaddedWithUnusedTokens) {
  auto f = gguf::File::open(write(small("qwen3-30b-a3b"), "padded.gguf"));
  auto vocab = gguf::File::open(kVocab);
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  const auto types = f->get_int_array("tokenizer.ggml.token_type");
  const auto src_tokens = vocab->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(src_tokens.size(), kVocabTokens);
  ASSERT_EQ(tokens.size(), 2048u);
  ASSERT_EQ(types.size(), 2048u);
  EXPECT_TRUE(std::equal(src_tokens.begin(), src_tokens.end(), tokens.begin()));
  EXPECT_EQ(tokens[kVocabTokens], "<|unused_0|>");
  EXPECT_EQ(tokens[2047], "<|unused_" + std::to_string(2047 - kVocabTokens) + "|>");
  EXPECT_EQ(types[kVocabTokens], 5);
  EXPECT_EQ(types[2047], 5);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges"), vocab->get_string_array("tokenizer.ggml.merges"));
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), vocab->get_int("tokenizer.ggml.eos_token_id"));
}

TEST(GenModel, LegacyExpertsWriteOneTensorPerExpert) {
  GenSpec s = small("mixtral-8x7b");
  s.legacy_experts = true;
  auto f = gguf::File::open(write(s, "legacy.gguf"));
  check_layout(s, *f);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_NE(f->find_tensor("blk.0.ffn_down.3.weight"), nullptr);
  check_values(*f);
  GenSpec q = small("qwen3-30b-a3b");
  q.legacy_experts = true;
  EXPECT_THROW(write(q, "legacy-qwen.gguf"), Error);
}

TEST(GenModel, SameSeedSameBytesOtherSeedOtherBytes) {
  GenSpec s = small("qwen3-30b-a3b");
  s.zipf = 1.0;
  const std::string a = slurp(write(s, "seed-a.gguf"));
  const std::string b = slurp(write(s, "seed-b.gguf"));
  s.seed = 2;
  const std::string c = slurp(write(s, "seed-c.gguf"));
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

TEST(GenModelDraw, EveryDrawableTypeHitsTheTargetRms) {
  int n_types = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    auto tt = find_type(id);
    if (!tt) continue;
    if (!gen::undrawable_reason(tt->type).empty()) {
      EXPECT_TRUE(tt->type == GgmlType::I8 || tt->type == GgmlType::I16 || tt->type == GgmlType::I32 ||
                  tt->type == GgmlType::I64)
          << tt->name;
      continue;
    }
    SCOPED_TRACE(std::string(tt->name));
    ++n_types;
    for (double target : {1.0 / 16.0, 1.0 / std::sqrt(14336.0)}) {
      const size_t n_blocks = std::max<size_t>(8, 16384 / tt->block_elems) * 3;  // several 1 MiB chunks for F32
      std::vector<uint64_t> raw((n_blocks * tt->block_bytes + 7) / 8);
      gen::fill_random(tt->type, target, 42, reinterpret_cast<std::byte*>(raw.data()), n_blocks * tt->block_bytes,
                       nullptr);
      std::vector<float> y(n_blocks * tt->block_elems);
      dequantize_row(tt->type, raw.data(), y.data(), static_cast<int64_t>(y.size()));
      ASSERT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
      const double rms = rms_of(y);
      EXPECT_GT(rms, target / 2);
      EXPECT_LT(rms, target * 2);
      // Types with a continuous scale land much closer than the factor 2; MXFP4 only on powers of 2.
      if (tt->type != GgmlType::MXFP4) {
        EXPECT_NEAR(rms / target, 1.0, 0.1);
      }
      const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
      EXPECT_LT(std::abs(mean), 0.1 * target);
    }
  }
  EXPECT_EQ(n_types, 28);  // every float and block type of types.h
}

TEST(GenModelDraw, ChunkingAndThreadsDoNotChangeTheData) {
  // 3.5 MiB of Q4_K: four chunks, drawn with and without a pool, and the first chunk alone.
  const size_t bytes = (7u << 19) / 144 * 144;
  std::vector<std::byte> a(bytes), b(bytes), c(1u << 20);
  ThreadPool pool(2);
  gen::fill_random(GgmlType::Q4_K, 0.01, 7, a.data(), bytes, nullptr);
  gen::fill_random(GgmlType::Q4_K, 0.01, 7, b.data(), bytes, &pool);
  EXPECT_EQ(a, b);
  gen::fill_random(GgmlType::Q4_K, 0.01, 7, c.data(), c.size() / 144 * 144, nullptr);
  EXPECT_TRUE(std::equal(c.begin(), c.begin() + c.size() / 144 * 144, a.begin()));
}

TEST(GenModelZipf, ScalesSkewTopKSelectionAsTargeted) {
  const int n_expert = 128, k = 8;
  const double s = 1.0;
  const auto scales = gen::zipf_router_scales(n_expert, k, s);
  const auto target = gen::zipf_targets(n_expert, k, s);
  EXPECT_NEAR(std::accumulate(target.begin(), target.end(), 0.0), k, 1e-6);
  EXPECT_LE(target[0], gen::kZipfCap + 1e-9);
  EXPECT_DOUBLE_EQ(*std::min_element(scales.begin(), scales.end()), 1.0);
  // Fresh logits (not the fit's samples): measured frequencies follow the targets.
  gen::Rng rng(99);
  std::vector<int> count(n_expert);
  std::vector<float> logits(n_expert), sorted(n_expert);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    for (int e = 0; e < n_expert; ++e) sorted[e] = logits[e] = static_cast<float>(scales[e]) * rng.normal();
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    for (int e = 0; e < n_expert; ++e) count[e] += logits[e] >= sorted[k - 1];
  }
  for (int r : {0, 3, 12, 40, 127}) EXPECT_NEAR(count[r] / double(n), target[r], 0.25 * target[r] + 0.005) << r;
  const double top10 = std::accumulate(count.begin(), count.begin() + 13, 0.0) / (double(n) * k);
  EXPECT_GT(top10, 0.3);  // uniform routing would give 13/128 ≈ 0.10
  const auto flat = gen::zipf_router_scales(n_expert, k, 0.0);
  EXPECT_TRUE(std::all_of(flat.begin(), flat.end(), [](double v) { return v == 1.0; }));
}

TEST(GenModel, InvalidSpecsFailWithTheirReason) {
  auto message = [](GenSpec s) {
    try {
      write(s, "invalid.gguf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THROW(gen_preset("qwen9"), Error);
  GenSpec s = small("qwen3-30b-a3b");
  s.n_head_kv = 3;
  EXPECT_NE(message(s).find("KV heads"), std::string::npos);
  s = small("qwen3-30b-a3b");
  s.type_experts = GgmlType::I32;
  EXPECT_NE(message(s).find("--type-experts I32"), std::string::npos);
  s = small("qwen3-30b-a3b");
  s.n_vocab = 1000;
  EXPECT_NE(message(s).find("smaller than the 1026 tokens"), std::string::npos);
  s = small("qwen3-30b-a3b");
  s.n_embd = 128;  // Q4_K rows need multiples of 256
  EXPECT_NE(message(s).find("block size 256"), std::string::npos);
  s = small("qwen3-dense");
  s.zipf = 1.0;
  EXPECT_NE(message(s).find("--zipf"), std::string::npos);
  s = small("tiny");
  s.vocab_from = "/nonexistent/vocab.gguf";
  EXPECT_NE(message(s).find("/nonexistent/vocab.gguf"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(test::scratch_dir() / "invalid.gguf"));
}

TEST(GenModel, DefaultVocabularyPrefersTheEnvironment) {
  setenv("SLUICE_VOCAB", "/some/vocab.gguf", 1);
  EXPECT_EQ(default_vocab(SLUICE_SOURCE_DIR), "/some/vocab.gguf");
  unsetenv("SLUICE_VOCAB");
  const std::string found = default_vocab(SLUICE_SOURCE_DIR);
  EXPECT_TRUE(found == kVocab || found == std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf") << found;
  EXPECT_EQ(default_vocab("/nonexistent"), "");
}

TEST(GenModelCli, WritesAModelAndRejectsBadTypes) {
  auto run = [](const std::string& args, int* status) {
    test::ShellResult r = test::sh(std::string(SLUICE_BIN) + " gen-model " + args);
    *status = r.status;
    return r.out;
  };
  const std::string path = (test::scratch_dir() / "cli.gguf").string();
  int status = -1;
  std::string out = run("--preset qwen3-30b-a3b --layers 1 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 4 "
                        "--experts-used 2 --ff-exp 256 --vocab 2048 --type-experts Q8_0 --zipf 0.8 --seed 5 --vocab-from " +
                            kVocab + " -o " + path,
                        &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("GB/s"), std::string::npos) << out;
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->tensor("blk.0.ffn_up_exps.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(f->tensor("blk.0.ffn_up_exps.weight").ne[2], 4);
  EXPECT_EQ(f->get_int("qwen3moe.block_count"), 1);

  out = run("--preset tiny --type-experts Q4_Z -o " + path, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--type-experts 'Q4_Z' is not a GGML type name"), std::string::npos) << out;
  out = run("--preset tiny --type-attn I16 --vocab-from " + kVocab + " -o " + path + " --force", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("integer tensor type"), std::string::npos) << out;
}

TEST(GenModelCli, AnExistingOutputNeedsForceAndIsReplacedWhole) {
  auto run = [](const std::string& args) {
    const test::ShellResult r = test::sh(std::string(SLUICE_BIN) + " gen-model --preset tiny " + args);
    return std::make_pair(r.status, r.out);
  };
  const std::filesystem::path dir = test::scratch_dir() / "force";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  auto [st, out] = run("--vocab-from " + kVocab + " -o " + path);
  ASSERT_EQ(st, 0) << out;
  const auto size = std::filesystem::file_size(path);
  std::tie(st, out) = run("--vocab-from " + kVocab + " --seed 9 -o " + path);
  EXPECT_EQ(st, 1);
  EXPECT_NE(out.find("exists: refusing to overwrite it (--force replaces it)"), std::string::npos) << out;
  EXPECT_EQ(std::filesystem::file_size(path), size);
  // Its own input: read whole before the new file is renamed over it.
  std::tie(st, out) = run("--vocab-from " + path + " --seed 9 --force -o " + path);
  ASSERT_EQ(st, 0) << out;
  EXPECT_GT(gguf::File::open(path)->tensor("token_embd.weight").ne[1], 0);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
}

namespace {

// Expert selections per layer over n_tok random tokens, read from the router logits the forward
// pass computes (top-k of the logits is the softmax router's choice).
std::vector<std::vector<int>> routed_counts(const std::string& path, int n_tok) {
  auto file = gguf::File::open(path);
  auto model = load_model(*file);
  auto experts = make_in_place_store(model->expert_layout(), "mmap");
  const HParams& hp = model->hparams();
  ThreadPool pool(1);
  auto kv = model->make_kv_cache(n_tok);
  Batch batch;
  gen::Rng rng(3);
  for (int i = 0; i < n_tok; ++i) batch.add(static_cast<int32_t>(rng.next() % hp.n_vocab), i, 0, i == n_tok - 1);
  std::vector<std::vector<int>> count(hp.n_layer, std::vector<int>(hp.n_expert));
  const int k = hp.n_expert_used;
  ActivationHook hook = [&](const char* name, int layer, const float* data, int64_t rows, int64_t cols) {
    if (std::string_view(name) != "ffn_moe_logits") return;
    std::vector<int> idx(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const float* l = data + r * cols;
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return l[a] > l[b]; });
      for (int j = 0; j < k; ++j) ++count[layer][idx[j]];
    }
  };
  std::vector<float> logits;
  model->forward(pool, batch, *kv, *experts, logits, &hook);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
  return count;
}

// Share of all selections taken by each layer's most popular 10 % of experts, averaged over layers.
double top_decile_share(const std::vector<std::vector<int>>& count) {
  double sum = 0;
  for (auto c : count) {
    std::sort(c.begin(), c.end(), std::greater<int>());
    const size_t top = std::max<size_t>(1, c.size() / 10);
    sum += std::accumulate(c.begin(), c.begin() + top, 0.0) / std::accumulate(c.begin(), c.end(), 0.0);
  }
  return sum / static_cast<double>(count.size());
}

}  // namespace

TEST(GenModelForward, GeneratedModelsGiveFiniteLogits) {
  std::vector<GenSpec> specs;
  GenSpec tiny = gen_preset("tiny");
  tiny.vocab_from = kVocab;
  specs.push_back(tiny);
  for (const auto& p : gen_presets()) {
    if (!basic_family(p.name)) continue;
    GenSpec s = small(p.name);
    s.n_layer = 3;
    specs.push_back(s);
  }
  GenSpec legacy = small("mixtral-8x7b");
  legacy.legacy_experts = true;
  specs.push_back(legacy);
  int i = 0;
  for (const auto& s : specs) {
    SCOPED_TRACE(s.preset + (s.legacy_experts ? " legacy" : ""));
    const std::string path = write(s, "forward-" + std::to_string(i++) + ".gguf");
    auto engine = Engine::load({.model_path = path, .n_threads = 1, .n_ctx = 256});
    EXPECT_EQ(engine->info().n_vocab, s.n_vocab ? s.n_vocab : static_cast<int>(kVocabTokens));
    auto session = engine->new_session();
    const auto tokens = engine->tokenize("The quick brown fox jumps over the lazy dog.", true);
    ASSERT_GT(tokens.size(), 5u);
    const auto logits = session->evaluate(tokens);
    ASSERT_EQ(logits.size(), static_cast<size_t>(engine->info().n_vocab));
    EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
    // Sane scales: logits neither vanish nor explode (N(0, 1)-like through an RMS-normed head).
    std::vector<float> l(logits.begin(), logits.end());
    const double rms = rms_of(l);
    EXPECT_GT(rms, 0.1);
    EXPECT_LT(rms, 10.0);
  }
}

TEST(GenModelForward, ZipfRoutersSkewExpertPopularity) {
  GenSpec s = gen_preset("tiny");
  s.vocab_from = kVocab;
  s.n_expert = 32;
  s.n_expert_used = 4;
  const double uniform = top_decile_share(routed_counts(write(s, "popularity-uniform.gguf"), 300));
  s.zipf = 1.0;
  const double skewed = top_decile_share(routed_counts(write(s, "popularity-zipf.gguf"), 300));
  // Top 3 of 32 experts: 9.4 % of selections when uniform; the Zipf targets give them ~32 %.
  EXPECT_LT(uniform, 0.16);
  EXPECT_GT(skewed, 0.24);
}
