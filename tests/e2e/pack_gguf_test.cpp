// `sluice pack-gguf` as tools/train-tiny-moe/export.py runs it: a manifest packed and read back
// through gguf::File key by key and byte by byte, manifests it must refuse (without leaving an
// output file), and the layout of the model it produced, models/sluice-tiny-moe.gguf.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../unit/test_util.h"
#include "gguf/gguf.h"

using namespace sluice;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using CliResult = test::ShellResult;  // status, then stdout and stderr together

CliResult sluice_cli(const std::string& args) { return test::sh(std::string(SLUICE_BIN) + " " + args); }

class PackGguf : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir() / ("pack-" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
    // 8 F32 values, then one Q8_0 block (fp16 scale 0.5 = 0x3800, then 32 int8 values -16..15).
    bytes_.resize(8 * 4 + 34);
    for (int i = 0; i < 8; ++i) {
      float v = 0.25f * static_cast<float>(i) - 1.0f;
      std::memcpy(bytes_.data() + 4 * i, &v, 4);
    }
    bytes_[32] = 0x00;
    bytes_[33] = 0x38;
    for (int i = 0; i < 32; ++i) bytes_[34 + i] = static_cast<char>(i - 16);
    std::ofstream(dir_ / "t.bin", std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    manifest_ = {
        {"metadata",
         {{{"key", "general.architecture"}, {"type", "string"}, {"value", "qwen3moe"}},
          {{"key", "qwen3moe.block_count"}, {"type", "uint32"}, {"value", 6}},
          {{"key", "qwen3moe.rope.freq_base"}, {"type", "float32"}, {"value", 10000.0}},
          {{"key", "tokenizer.ggml.add_bos_token"}, {"type", "bool"}, {"value", false}},
          {{"key", "tokenizer.ggml.tokens"}, {"type", "array"}, {"elem_type", "string"}, {"value", {"a", "Ġb", "<|endoftext|>"}}},
          {{"key", "tokenizer.ggml.token_type"}, {"type", "array"}, {"elem_type", "int32"}, {"value", {1, 1, 3}}}}},
        {"tensors",
         {{{"name", "norm.weight"}, {"type", "F32"}, {"dims", {4, 2}}, {"file", "t.bin"}, {"offset", 0}, {"bytes", 32}},
          {{"name", "w.weight"}, {"type", "Q8_0"}, {"dims", {32}}, {"file", "t.bin"}, {"offset", 32}, {"bytes", 34}}}}};
  }

  // Writes the manifest and packs it; the output path is dir_/out.gguf.
  CliResult pack(const Json& manifest) {
    std::ofstream(dir_ / "m.json") << manifest.dump();
    fs::remove(dir_ / "out.gguf");
    return sluice_cli("pack-gguf " + (dir_ / "m.json").string() + " -o " + (dir_ / "out.gguf").string());
  }

  void expect_refused(const Json& manifest, const std::string& message_part) {
    CliResult r = pack(manifest);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(message_part), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "out.gguf"));
  }

  fs::path dir_;
  std::string bytes_;
  Json manifest_;
};

TEST_F(PackGguf, RoundTripsMetadataAndTensorBytes) {
  CliResult r = pack(manifest_);
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = gguf::File::open((dir_ / "out.gguf").string());
  ASSERT_EQ(f->metadata().size(), 6u);
  EXPECT_EQ(f->metadata()[0].first, "general.architecture");
  EXPECT_EQ(f->get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f->find("qwen3moe.block_count")->type, gguf::ValueType::UINT32);
  EXPECT_EQ(f->get_int("qwen3moe.block_count"), 6);
  EXPECT_EQ(f->find("qwen3moe.rope.freq_base")->type, gguf::ValueType::FLOAT32);
  EXPECT_EQ(f->get_float("qwen3moe.rope.freq_base"), 10000.0);
  EXPECT_FALSE(f->get_bool_or("tokenizer.ggml.add_bos_token", true));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "Ġb", "<|endoftext|>"}));
  EXPECT_EQ(f->find("tokenizer.ggml.token_type")->arr().elem_type, gguf::ValueType::INT32);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));

  ASSERT_EQ(f->tensors().size(), 2u);
  const gguf::TensorInfo& norm = f->tensor("norm.weight");
  EXPECT_EQ(norm.type, GgmlType::F32);
  EXPECT_EQ(norm.shape_string(), "[4, 2]");
  EXPECT_EQ(std::memcmp(norm.data, bytes_.data(), 32), 0);
  const gguf::TensorInfo& w = f->tensor("w.weight");
  EXPECT_EQ(w.type, GgmlType::Q8_0);
  EXPECT_EQ(w.nbytes, 34u);
  EXPECT_EQ(std::memcmp(w.data, bytes_.data() + 32, 34), 0);
}

TEST_F(PackGguf, RefusesBadManifests) {
  Json m = manifest_;
  m["tensors"][0]["bytes"] = 28;
  expect_refused(m, "28 bytes given");

  m = manifest_;
  m["tensors"][1]["dims"] = {16};
  expect_refused(m, "block size 32");

  m = manifest_;
  m["tensors"][1]["type"] = "Q9_9";
  expect_refused(m, "unknown ggml type 'Q9_9'");

  m = manifest_;
  m["tensors"][1]["offset"] = 40;
  expect_refused(m, "past the end");

  m = manifest_;
  m["tensors"][1]["name"] = "norm.weight";
  expect_refused(m, "duplicate name");

  m = manifest_;
  m["metadata"][1]["type"] = "uint8";
  m["metadata"][1]["value"] = 300;
  expect_refused(m, "does not fit");

  m = manifest_;
  m["metadata"][4]["value"][1] = 7;
  expect_refused(m, "expected a string");

  m = manifest_;
  m["metadata"][2]["type"] = "float16";
  expect_refused(m, "unknown value type 'float16'");

  m = manifest_;
  m.erase("tensors");
  expect_refused(m, "missing \"tensors\"");
}

// The shipped default model: what export.py must have produced for sluice's qwen3moe loader.
TEST(TinyMoeModel, HasTheQwen3MoeLayoutItsCardDescribes) {
  const fs::path root = SLUICE_SOURCE_DIR;
  const fs::path model = root / "models" / "sluice-tiny-moe.gguf";
  ASSERT_TRUE(fs::exists(model));
  EXPECT_LE(fs::file_size(model), 20u << 20);
  auto f = gguf::File::open(model.string());
  EXPECT_EQ(f->get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
  const int64_t n_layer = f->get_int("qwen3moe.block_count");
  const int64_t d = f->get_int("qwen3moe.embedding_length");
  const int64_t ff = f->get_int("qwen3moe.expert_feed_forward_length");
  const int64_t n_expert = f->get_int("qwen3moe.expert_count");
  const int64_t head_dim = f->get_int("qwen3moe.attention.key_length");
  const int64_t n_vocab = static_cast<int64_t>(f->get_string_array("tokenizer.ggml.tokens").size());
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), n_vocab - 1);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").back(), "<|endoftext|>");

  EXPECT_EQ(f->tensors().size(), static_cast<size_t>(2 + 12 * n_layer));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied to token_embd
  EXPECT_EQ(f->tensor("token_embd.weight").shape_string(), fmt::format("[{}, {}]", d, n_vocab));
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string b = fmt::format("blk.{}.", i);
    EXPECT_EQ(f->tensor(b + "ffn_gate_exps.weight").shape_string(), fmt::format("[{}, {}, {}]", d, ff, n_expert));
    EXPECT_EQ(f->tensor(b + "ffn_up_exps.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(f->tensor(b + "ffn_down_exps.weight").shape_string(), fmt::format("[{}, {}, {}]", ff, d, n_expert));
    EXPECT_EQ(f->tensor(b + "ffn_gate_inp.weight").shape_string(), fmt::format("[{}, {}]", d, n_expert));
    EXPECT_EQ(f->tensor(b + "attn_q_norm.weight").shape_string(), fmt::format("[{}]", head_dim));
    EXPECT_EQ(f->tensor(b + "attn_k_norm.weight").type, GgmlType::F32);
  }

  // eval.json describes the committed held-out sample, not some other text.
  std::ifstream ej(root / "models" / "sluice-tiny-moe.eval.json");
  ASSERT_TRUE(ej.good());
  const Json eval = Json::parse(ej);
  EXPECT_EQ(fs::file_size(root / eval["text"].get<std::string>()), eval["text_bytes"].get<uint64_t>());
  EXPECT_EQ(eval["n_scored"].get<int64_t>(), eval["n_tokens"].get<int64_t>() - 1);
  EXPECT_GT(eval["perplexity"].get<double>(), 1.0);
}

}  // namespace

TEST_F(PackGguf, AnExistingOutputNeedsForce) {
  ASSERT_EQ(pack(manifest_).status, 0);
  const std::string out = (dir_ / "out.gguf").string(), m = (dir_ / "m.json").string();
  CliResult r = sluice_cli("pack-gguf " + m + " -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("exists: refusing to overwrite it (--force replaces it)"), std::string::npos) << r.out;
  r = sluice_cli("pack-gguf " + m + " -o " + out + " --force");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(gguf::File::open(out)->get_string("general.architecture"), "qwen3moe");
}
