// deepseek2 in the older GGUF layout: one attn_kv_b (kv_lora → n_head·(nope+v)) instead of the
// split attn_k_b/attn_v_b, and no key_length_mla/value_length_mla (key_length is then nope+rope).
// The split reference model is rewritten into that layout (W_kb transposed back, W_vb appended
// per head) and must reproduce the reference engine's logits of the split file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

// Rewrites the split-layout file `f` as a legacy attn_kv_b file at `dst`; `keep` owns the new
// tensors' data until the write.
void write_legacy(const gguf::File& f, const std::string& dst, std::vector<std::vector<float>>& keep) {
  const std::string a = f.get_string("general.architecture") + ".";
  const int64_t n_head = f.get_int(a + "attention.head_count");
  const int64_t kv_lora = f.get_int(a + "attention.kv_lora_rank");
  const int64_t n_rot = f.get_int(a + "rope.dimension_count");
  const int64_t hd_k = f.get_int(a + "attention.key_length_mla");
  const int64_t dv = f.get_int(a + "attention.value_length_mla");
  const int64_t nope = hd_k - n_rot;
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata()) {
    if (k == a + "attention.key_length_mla" || k == a + "attention.value_length_mla") continue;
    if (k == a + "attention.key_length") w.set(k, gguf::Value::u32(static_cast<uint32_t>(hd_k)));
    else if (k == a + "attention.value_length") w.set(k, gguf::Value::u32(static_cast<uint32_t>(dv)));
    else w.set(k, v);
  }
  const int n_layer = static_cast<int>(f.get_int(a + "block_count"));
  for (const auto& t : f.tensors()) {
    if (t.name.find("attn_k_b") != std::string::npos || t.name.find("attn_v_b") != std::string::npos) continue;
    w.add_tensor_bytes(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data);
  }
  for (int il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const float* kb = reinterpret_cast<const float*>(f.tensor(p + "attn_k_b.weight").data);  // (nope, kv_lora, n_head)
    const float* vb = reinterpret_cast<const float*>(f.tensor(p + "attn_v_b.weight").data);  // (kv_lora, dv, n_head)
    std::vector<float>& kvb = keep.emplace_back(n_head * (nope + dv) * kv_lora);  // (kv_lora, n_head·(nope+dv))
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < nope + dv; ++i)
        for (int64_t r = 0; r < kv_lora; ++r)
          kvb[(h * (nope + dv) + i) * kv_lora + r] =
              i < nope ? kb[(h * kv_lora + r) * nope + i] : vb[(h * dv + (i - nope)) * kv_lora + r];
    w.add_tensor_bytes(p + "attn_kv_b.weight", GgmlType::F32, {kv_lora, n_head * (nope + dv)}, kvb.data());
  }
  w.write(dst);
}

TEST(DeepSeek2Legacy, KvBLayoutMatchesReference) {
  const fs::path ref_dir = fs::path(SLUICE_TESTDATA) / "reference";
  const fs::path model = ref_dir / "deepseek2-f32.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is not present";
  const fs::path legacy = fs::path(::testing::TempDir()) / "deepseek2-legacy-kv_b.gguf";
  std::vector<std::vector<float>> keep;
  {
    auto f = gguf::File::open(model.string());
    write_legacy(*f, legacy.string(), keep);
  }
  {
    auto f = gguf::File::open(legacy.string());
    ASSERT_TRUE(f->find_tensor("blk.0.attn_kv_b.weight"));
    ASSERT_FALSE(f->find_tensor("blk.0.attn_k_b.weight"));
    ASSERT_FALSE(f->has("deepseek2.attention.key_length_mla"));
  }

  std::ifstream in(ref_dir / "deepseek2-f32.prompt1.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  EngineOptions eo;
  eo.model_path = legacy.string();
  eo.n_ctx = static_cast<int>(tokens.size() + 8);
  auto engine = Engine::load(eo);
  const int n_vocab = engine->info().n_vocab;
  const std::vector<float> all = engine->new_session()->evaluate_all(tokens);
  ASSERT_EQ(all.size(), tokens.size() * n_vocab);
  double max_err = 0;
  for (size_t i = 0; i < tokens.size(); ++i)
    for (const auto& pair : ref["top_logits"][i])
      max_err = std::max(max_err, std::fabs(all[i * n_vocab + pair[0].get<int>()] - pair[1].get<double>()));
  EXPECT_LE(max_err, 2e-3);
  fs::remove(legacy);
}

}  // namespace
