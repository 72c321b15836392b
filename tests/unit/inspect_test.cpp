// Model sizing behind `sluice inspect`: byte totals by class and layer against sums computed here
// from the tensor list alone, routed-expert sizes, KV-cache estimates (GQA, MLA, per-layer heads,
// MTP layers), verdict thresholds, flag sizes, and the CLI's JSON and error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "plan/sizing.h"
#include "test_util.h"

using namespace sluice;

namespace {

constexpr uint64_t kRam = uint64_t{64} << 30;

uint64_t cls(const ModelReport& r, TensorClass c) { return r.class_totals[static_cast<size_t>(c)]; }

// Bytes from shape and block geometry, independent of the reader's own nbytes.
uint64_t bytes_from_shape(const gguf::TensorInfo& t) {
  uint64_t n = 1;
  for (int d = 0; d < t.n_dims; ++d) n *= static_cast<uint64_t>(t.ne[d]);
  const TypeTraits& tt = type_traits(t.type);
  return n / tt.block_elems * tt.block_bytes;
}

struct Sums {
  uint64_t total = 0, routed = 0, shared = 0, attention = 0;
  std::map<int, uint64_t> per_layer;                // -1: global
  std::map<int, uint64_t> expert_bytes_per_layer;   // one expert: Σ nbytes / ne[last]
};

Sums independent_sums(const gguf::File& f) {
  static const std::regex layer_re(R"(^blk\.(\d+)\.)");
  static const std::regex routed_re(R"(\.ffn_(gate|up|down)_exps\.)");
  static const std::regex attn_re(R"(\.attn_(?!.*norm))");
  Sums s;
  for (const auto& t : f.tensors()) {
    const uint64_t b = bytes_from_shape(t);
    s.total += b;
    std::smatch m;
    int layer = std::regex_search(t.name, m, layer_re) ? std::stoi(m[1]) : -1;
    s.per_layer[layer] += b;
    if (std::regex_search(t.name, routed_re)) {
      s.routed += b;
      s.expert_bytes_per_layer[layer] += b / static_cast<uint64_t>(t.ne[t.n_dims - 1]);
    }
    if (t.name.find("_shexp") != std::string::npos) s.shared += b;
    if (std::regex_search(t.name, attn_re)) s.attention += b;
  }
  return s;
}

std::string write_model(const std::string& name, const std::function<void(gguf::Writer&)>& fill) {
  gguf::Writer w;
  fill(w);
  const std::string path = (test::scratch_dir() / name).string();
  w.write(path);
  return path;
}

void add_zeros(gguf::Writer& w, const std::string& name, std::vector<int64_t> ne) {
  w.add_tensor(name, GgmlType::F32, std::move(ne), [](std::byte* dst, size_t n) { std::fill(dst, dst + n, std::byte{0}); });
}

std::string run(const std::string& args, int* status) {
  test::ShellResult r = test::sh(std::string(SLUICE_BIN) + " " + args);
  *status = r.status;
  return r.out;
}

}  // namespace

TEST(InspectSizing, ByteTotalsMatchIndependentSums) {
  const char* files[] = {"reference/qwen3moe-f32.gguf",  "reference/mixtral-f32.gguf",
                         "reference/qwen3moe-256-q4km.gguf", "reference/qwen3moe-256-q2k.gguf",
                         "reference/deepseek2-q8_0.gguf", "reference/gptoss-mxfp4.gguf",
                         "reference/glm4moe-f32.gguf",    "models/stories260K.gguf"};
  for (const char* rel : files) {
    SCOPED_TRACE(rel);
    auto f = gguf::File::open(test::testdata(rel));
    const ModelReport r = analyze_model(*f, {.ctx = 256, .ram = kRam});
    const Sums s = independent_sums(*f);
    EXPECT_EQ(r.total_bytes, s.total);
    EXPECT_LE(r.total_bytes, f->total_size());
    EXPECT_EQ(cls(r, TensorClass::RoutedExpert), s.routed);
    EXPECT_EQ(cls(r, TensorClass::SharedExpert), s.shared);
    EXPECT_EQ(cls(r, TensorClass::Attention), s.attention);
    uint64_t class_sum = 0;
    for (uint64_t b : r.class_totals) class_sum += b;
    EXPECT_EQ(class_sum, r.total_bytes);
    ASSERT_EQ(r.layers.size(), s.per_layer.size());
    for (const auto& lb : r.layers) EXPECT_EQ(lb.total(), s.per_layer.at(lb.layer.value_or(-1)));
    // The verdict counts what the plan counts: the forward layers' weights (a nextn block is
    // neither resident nor routed).
    EXPECT_EQ(r.verdict.resident, r.facts.resident_bytes);
    EXPECT_EQ(r.verdict.routed, s.routed);
    if (r.first_mtp_layer < 0) {
      EXPECT_EQ(r.verdict.resident, s.total - s.routed);
    }
    // One routed expert per layer: every layer with experts appears in exactly one shape.
    size_t layers_in_shapes = 0;
    for (const auto& shape : r.expert_shapes)
      for (int layer : shape.layers) {
        ++layers_in_shapes;
        EXPECT_EQ(shape.bytes_per_expert, s.expert_bytes_per_layer.at(layer)) << "layer " << layer;
      }
    EXPECT_EQ(layers_in_shapes, s.expert_bytes_per_layer.size());
  }
}

TEST(InspectSizing, DeepSeek2CheckedByHand) {
  auto f = gguf::File::open(test::testdata("reference/deepseek2-q8_0.gguf"));
  const ModelReport r = analyze_model(*f, {.ctx = std::nullopt, .ram = kRam});
  // Layers 1-2: gate/up/down_exps of [.., .., 16] Q8_0 at 139264 B each; shared experts 3 × 8704.
  EXPECT_EQ(cls(r, TensorClass::RoutedExpert), 2u * 3 * 139264);
  EXPECT_EQ(cls(r, TensorClass::SharedExpert), 2u * 3 * 8704);
  // MLA attention per layer: k_b 8704 + kv_a_mqa 10880 + output 17408 + q_a 13056 + q_b 19584 + v_b 8704.
  EXPECT_EQ(cls(r, TensorClass::Attention), 3u * 78336);
  EXPECT_EQ(cls(r, TensorClass::Router), 2u * (8192 + 64));
  EXPECT_EQ(cls(r, TensorClass::DenseFfn), 3u * 34816);
  ASSERT_EQ(r.expert_shapes.size(), 1u);
  EXPECT_EQ(r.expert_shapes[0].layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(r.expert_shapes[0].n_experts, 16);
  EXPECT_EQ(r.expert_shapes[0].bytes_per_expert, 3u * 8704);
  // MLA cache: (kv_lora 64 + rope 16) f32 per token per layer, default ctx = context_length 4096.
  EXPECT_TRUE(r.model.is_mla);
  EXPECT_EQ(r.kv.ctx, 4096);
  EXPECT_EQ(r.kv.bytes_per_token, 3u * 80 * 4);
  EXPECT_EQ(r.kv.bytes, 4096u * 960);
}

TEST(InspectSizing, QuantMixGivesPerLayerExpertShapes) {
  auto f = gguf::File::open(test::testdata("reference/qwen3moe-256-q4km.gguf"));
  const ModelReport r = analyze_model(*f, {.ctx = 100, .ram = kRam});
  // Q4_K_M keeps some ffn_down_exps in Q6_K, so not all layers share one expert size.
  EXPECT_GE(r.expert_shapes.size(), 2u);
  EXPECT_EQ(r.kv.bytes_per_token, 3u * 2 * (64 + 64) * 4);
  EXPECT_EQ(r.kv.bytes, 100u * 3072);
}

TEST(InspectSizing, KvDefaultsAndGqaWithoutKeyLength) {
  auto mixtral = gguf::File::open(test::testdata("reference/mixtral-f32.gguf"));
  // No key_length: head size is embedding 128 / 4 heads = 32; 2 KV heads, 3 layers.
  EXPECT_EQ(analyze_model(*mixtral, {.ctx = 10, .ram = kRam}).kv.bytes_per_token, 3u * 2 * 64 * 4);
  auto stories = gguf::File::open(test::testdata("models/stories260K.gguf"));
  EXPECT_EQ(analyze_model(*stories, {.ctx = std::nullopt, .ram = kRam}).kv.ctx, 2048);  // context_length
}

TEST(InspectSizing, PerLayerHeadsMtpLayersAndLongContext) {
  const std::string path = write_model("hetero.gguf", [](gguf::Writer& w) {
    w.set("general.architecture", gguf::Value::str("glm4moe"));
    w.set("glm4moe.block_count", gguf::Value::u32(4));
    w.set("glm4moe.context_length", gguf::Value::u32(131072));
    w.set("glm4moe.embedding_length", gguf::Value::u32(64));
    w.set("glm4moe.attention.head_count", gguf::Value::u32(4));
    w.set("glm4moe.attention.head_count_kv", gguf::Value::i32_array({0, 2, 4, 4}));
    w.set("glm4moe.attention.key_length", gguf::Value::u32(16));
    w.set("glm4moe.attention.value_length", gguf::Value::u32(8));
    w.set("glm4moe.nextn_predict_layers", gguf::Value::u32(1));
    add_zeros(w, "token_embd.weight", {64, 10});
    add_zeros(w, "blk.2.ffn_up_exps.weight", {64, 32, 4});
    add_zeros(w, "blk.3.ffn_up_exps.weight", {64, 32, 4});
    add_zeros(w, "blk.3.nextn.eh_proj.weight", {128, 64});
  });
  auto f = gguf::File::open(path);
  const ModelReport r = analyze_model(*f, {.ctx = std::nullopt, .ram = kRam});
  EXPECT_EQ(r.kv.ctx, 4096);     // 131072 capped
  EXPECT_EQ(r.kv.n_layer, 3);    // the MTP block keeps no cache
  EXPECT_EQ(r.kv.bytes_per_token, (0u + 2 + 4) * (16 + 8) * 4);
  EXPECT_EQ(cls(r, TensorClass::RoutedExpert), 64u * 32 * 4 * 4);  // block 2 only
  EXPECT_EQ(cls(r, TensorClass::Other), 64u * 32 * 4 * 4 + 128 * 64 * 4);
  ASSERT_EQ(r.expert_shapes.size(), 1u);
  EXPECT_EQ(r.expert_shapes[0].layers, std::vector<int>{2});
}

TEST(InspectSizing, VocabOnlyFile) {
  auto f = gguf::File::open(test::testdata("vocab/ggml-vocab-llama-spm.gguf"));
  const ModelReport r = analyze_model(*f, {.ctx = std::nullopt, .ram = uint64_t{16} << 30});
  EXPECT_EQ(r.total_bytes, 0u);
  EXPECT_TRUE(r.layers.empty());
  EXPECT_TRUE(r.expert_shapes.empty());
  EXPECT_EQ(r.model.arch, "llama");
  EXPECT_EQ(r.tokenizer.model, "llama");
  EXPECT_EQ(r.tokenizer.n_vocab, 32000u);
  EXPECT_EQ(r.tokenizer.bos_id, 1);
  EXPECT_EQ(r.tokenizer.eos_id, 2);
  EXPECT_FALSE(r.tokenizer.has_chat_template);
  // 32 layers × 32 KV heads × (128 + 128) × 4 B.
  EXPECT_EQ(r.kv.bytes_per_token, 32u * 32 * 256 * 4);
  EXPECT_TRUE(r.verdict.flags.empty());
  EXPECT_EQ(r.verdict.level, VerdictLevel::NearInRam);
}

// A header claiming 2^40 layers (what the fuzzer found) gets no KV estimate instead of per-layer
// tables of that size; a plausible count still gets one.
TEST(InspectSizing, AbsurdLayerCountGivesNoKvEstimate) {
  ModelSummary m;
  m.arch = "llama";
  m.n_head = {32};
  m.n_head_kv = {8};
  m.key_length = 128;
  m.n_layer = int64_t{1} << 40;
  EXPECT_EQ(estimate_kv(m, 4096).bytes_per_token, 0u);
  m.n_layer = 48;
  EXPECT_EQ(estimate_kv(m, 4096).bytes_per_token, 48u * 8 * (128 + 128) * 4);
}

// The KV rule is the family's (its registry entry): deepseek2 caches the MLA latent, gpt-oss
// windows every other layer; an architecture sluice cannot run gets the latent when the file
// names a kv_lora_rank, else K/V heads and no window.
TEST(InspectSizing, KvLayoutIsTheFamilysRule) {
  ModelSummary m;
  m.n_layer = 4;
  m.n_head = {8};
  m.n_head_kv = {2};
  m.key_length = 64;
  m.kv_lora_rank = 32;
  m.rope_dim = 16;
  m.is_mla = true;
  m.sliding_window = 16;
  const uint64_t heads = 4u * 2 * (64 + 64) * 4, latent = 4u * (32 + 16) * 4;
  for (const char* arch : {"deepseek2", "mystery"}) {
    m.arch = arch;
    EXPECT_EQ(estimate_kv(m, 100).bytes_per_token, latent) << arch;
    EXPECT_TRUE(estimate_kv(m, 100).values_are_keys) << arch;
  }
  m.arch = "glm4moe";  // a GQA family whatever the file says
  EXPECT_EQ(estimate_kv(m, 100).bytes_per_token, heads);
  m.kv_lora_rank.reset();
  m.is_mla = false;
  m.arch = "mystery";
  EXPECT_EQ(estimate_kv(m, 100).bytes, 100 * heads);
  m.arch = "deepseek2";  // an MLA family without its latent width: no estimate
  EXPECT_EQ(estimate_kv(m, 100).bytes, 0u);
  // gpt-oss: layers 0 and 2 keep a ring (window + step, fixed), 1 and 3 grow with the context.
  m.arch = "gpt-oss";
  const KvEstimate swa = estimate_kv(m, 4096, engine_kv_config(KvType::kF32, KvType::kF32));
  EXPECT_EQ(swa.bytes_per_token, heads / 2);
  EXPECT_GT(swa.fixed_bytes, 0u);
}

// A plan whose fixed costs (100 B resident, 50 B KV, no margin) take 150 B of `usable`.
Verdict verdict_at(uint64_t usable, uint64_t routed = 1000) {
  MemoryFacts f;
  f.resident_bytes = 100;
  f.routed_bytes = routed;
  MemoryPlan p;
  p.usable = usable;
  p.kv_bytes = 50;
  p.fixed = 150;
  return make_verdict(f, p, usable);
}

TEST(InspectVerdict, Thresholds) {
  // 1000 B of routed experts: the expert budget is usable − fixed = usable − 150.
  EXPECT_EQ(verdict_at(1150).level, VerdictLevel::NearInRam);
  EXPECT_DOUBLE_EQ(verdict_at(5000).fraction, 1.0);
  EXPECT_EQ(verdict_at(850).level, VerdictLevel::NearInRam);  // exactly 70 %
  EXPECT_EQ(verdict_at(850).message, "near in-RAM speed");
  EXPECT_EQ(verdict_at(849).level, VerdictLevel::Usable);
  EXPECT_EQ(verdict_at(849).message, "usable, prompt-dependent");
  EXPECT_EQ(verdict_at(550).level, VerdictLevel::Usable);  // exactly 40 %
  EXPECT_EQ(verdict_at(549).level, VerdictLevel::TooSmall);
  EXPECT_EQ(verdict_at(549).message, "choose a smaller quant");
  EXPECT_EQ(verdict_at(100).expert_budget, 0u);
  EXPECT_NE(verdict_at(100).message.find("exceed"), std::string::npos);
  // What the planner keeps back (the unusable share, margin, overhead) is the verdict's reserve.
  MemoryFacts f;
  f.routed_bytes = 1000;
  MemoryPlan p;
  p.usable = 950;
  p.margin = 20;
  p.overhead = 30;
  p.fixed = 50;
  const Verdict v = make_verdict(f, p, 1000);
  EXPECT_EQ(v.reserved, 100u);
  EXPECT_EQ(v.expert_budget, 900u);
  // No routed experts: nothing to place, the verdict is whether the rest fits.
  EXPECT_EQ(verdict_at(200, 0).level, VerdictLevel::NearInRam);
  EXPECT_EQ(verdict_at(120, 0).level, VerdictLevel::TooSmall);
  // Large values do not overflow the threshold arithmetic.
  EXPECT_EQ(verdict_at(UINT64_MAX, UINT64_MAX / 2).level, VerdictLevel::NearInRam);
}

TEST(InspectVerdict, FlagSizesParseBackWithinOnePercent) {
  for (uint64_t b : {uint64_t{0}, uint64_t{700}, uint64_t{150} << 10, (uint64_t{1} << 30) + 12345,
                     (uint64_t{37} << 30) + (uint64_t{700} << 20), uint64_t{1} << 40}) {
    const std::string s = format_flag_size(b);
    const uint64_t back = parse_byte_size(s, "--ssd-streaming-cache-experts");
    EXPECT_LE(back, b) << s;
    EXPECT_GE(static_cast<double>(back), 0.99 * static_cast<double>(b)) << s;
  }
  EXPECT_EQ(format_flag_size((uint64_t{37} << 30) + (uint64_t{700} << 20)), "37.6GiB");
}

TEST(InspectCli, JsonMatchesLibrary) {
  const std::string model = test::testdata("reference/gptoss-mxfp4.gguf");
  int status = 0;
  const std::string out = run("inspect " + model + " --json --ram 1MiB --ctx 512", &status);
  ASSERT_EQ(status, 0) << out;
  auto j = nlohmann::json::parse(out);
  auto f = gguf::File::open(model);
  const ModelReport r = analyze_model(*f, {.ctx = 512, .ram = uint64_t{1} << 20});
  EXPECT_EQ(j["model"]["architecture"], "gpt-oss");
  EXPECT_EQ(j["tensors"].size(), f->tensors().size());
  EXPECT_EQ(j["total_bytes"], r.total_bytes);
  EXPECT_EQ(j["class_totals"]["routed_expert"], cls(r, TensorClass::RoutedExpert));
  EXPECT_EQ(j["class_totals"]["attention"], cls(r, TensorClass::Attention));
  EXPECT_EQ(j["kv_cache"]["bytes"], 512u * 4 * 2 * 64 * 4);
  EXPECT_EQ(j["verdict"]["message"], r.verdict.message);
  EXPECT_EQ(j["verdict"]["flags"], r.verdict.flags);
  int sinks = 0;
  for (const auto& t : j["tensors"]) {
    if (t["name"].get<std::string>().find("attn_sinks") == std::string::npos) continue;
    EXPECT_EQ(t["class"], "attention");
    ++sinks;
  }
  EXPECT_EQ(sinks, 4);
}

TEST(InspectCli, HumanOutputAndErrors) {
  int status = 0;
  std::string out = run("inspect " + test::testdata("vocab/ggml-vocab-llama-spm.gguf") + " --ram 8GiB", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("no tensors (vocabulary-only file)"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: near in-RAM speed"), std::string::npos) << out;
  // A missing file and a bad size are argument errors (exit 2), naming the file and the flag.
  out = run("inspect /nonexistent.gguf --ram 1GB", &status);
  EXPECT_EQ(status, 2);
  EXPECT_NE(out.find("File does not exist: /nonexistent.gguf"), std::string::npos) << out;
  out = run("inspect " + test::testdata("models/stories260K.gguf") + " --ram 12XB", &status);
  EXPECT_EQ(status, 2);
  EXPECT_NE(out.find("--ram: unknown unit 'xb'"), std::string::npos) << out;
}
