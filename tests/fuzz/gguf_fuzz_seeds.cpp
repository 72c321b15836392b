// Writes small valid GGUF files for the fuzz corpus: the shared test data is too large to use
// whole (big inputs slow libFuzzer down), and a header prefix of it never reaches the tensor infos.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/writer.h"

using namespace sluice;
using namespace sluice::gguf;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto zeros = [](std::byte* dst, size_t n) { std::fill(dst, dst + n, std::byte{0}); };
  try {
    Writer moe;
    moe.set("general.architecture", Value::str("qwen3moe"));
    moe.set("qwen3moe.block_count", Value::u32(2));
    moe.set("qwen3moe.context_length", Value::u32(4096));
    moe.set("qwen3moe.embedding_length", Value::u32(32));
    moe.set("qwen3moe.attention.head_count", Value::u32(2));
    moe.set("qwen3moe.attention.head_count_kv", Value::i32_array({1, 2}));
    moe.set("qwen3moe.expert_count", Value::u32(4));
    moe.set("qwen3moe.expert_used_count", Value::u32(2));
    moe.set("tokenizer.ggml.model", Value::str("gpt2"));
    moe.set("tokenizer.ggml.tokens", Value::str_array({"a", "b", "c"}));
    moe.set("tokenizer.ggml.bos_token_id", Value::u32(0));
    moe.set("nested", Value::array(ValueType::ARRAY, {Value::f32_array({1.5f}), Value::f32_array({})}));
    moe.set("flag", Value::boolean(true));
    moe.set("i64", Value::i64(-5));
    moe.set("f64", Value::f64(0.25));
    moe.add_tensor("token_embd.weight", GgmlType::Q8_0, {32, 3}, zeros);
    moe.add_tensor("blk.0.attn_q.weight", GgmlType::F16, {32, 32}, zeros);
    moe.add_tensor("blk.0.ffn_up_exps.weight", GgmlType::Q4_K, {256, 2, 4}, zeros);
    moe.add_tensor("blk.1.ffn_down.3.weight", GgmlType::MXFP4, {32, 2}, zeros);
    moe.add_tensor("output_norm.weight", GgmlType::F32, {32}, zeros);
    moe.write(dir + "/moe.gguf");

    Writer mla(64);
    mla.set("general.architecture", Value::str("deepseek2"));
    mla.set("deepseek2.block_count", Value::u32(1));
    mla.set("deepseek2.attention.kv_lora_rank", Value::u32(16));
    mla.set("deepseek2.rope.dimension_count", Value::u32(8));
    mla.set("deepseek2.nextn_predict_layers", Value::u32(1));
    mla.add_tensor("blk.0.attn_kv_a_mqa.weight", GgmlType::BF16, {8, 24}, zeros);
    mla.write(dir + "/mla.gguf");

    Writer vocab;
    vocab.set("general.architecture", Value::str("llama"));
    vocab.set("tokenizer.ggml.tokens", Value::str_array({"<s>", "</s>", "x"}));
    vocab.set("tokenizer.chat_template", Value::str("{{ messages }}"));
    vocab.write(dir + "/vocab.gguf");
  } catch (const Error& e) {
    std::fprintf(stderr, "gguf_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
