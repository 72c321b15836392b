// GGUF writer (version 3). Tensor data is produced by callbacks at write time, so gen-model can
// stream multi-GiB files at disk speed without holding them in memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/value.h"
#include "quant/types.h"

namespace sluice::gguf {

class Writer {
 public:
  // Fills exactly `bytes` bytes of tensor data at dst.
  using Fill = std::function<void(std::byte* dst, size_t bytes)>;

  explicit Writer(uint32_t alignment = 32) : alignment_(alignment) {}

  // Keys keep insertion order; setting an existing key replaces its value in place.
  void set(const std::string& key, Value v);
  // ne in GGML order (row length first); validates the row against the block size.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill);
  void add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                        const void* data);

  // Writes the file through a temporary file in the same folder renamed over `path` at the end, so
  // `path` is either the old file or the complete new one; throws sluice::Error on I/O failure.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    Fill fill;
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace sluice::gguf
