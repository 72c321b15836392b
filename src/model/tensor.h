// Weight tensors as the model sees them: typed views into memory someone else owns (the GGUF
// mmap or a loaded copy). Views carry GGML dims so every matmul can check its shapes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"
#include "quant/types.h"

namespace sluice {

// Where bytes lie in the model files: part (split file) index, absolute offset, length.
struct FileRange {
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct Tensor {
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGML order: ne[0] is the row length
  const std::byte* data = nullptr;
  FileRange file{};  // the tensor's bytes in the model files (length 0: not from a file)

  explicit operator bool() const { return data != nullptr; }
  uint64_t row_bytes() const { return sluice::row_bytes(type, static_cast<uint64_t>(ne[0])); }
  // The whole tensor as a matrix of ne[1] rows (2-D weights).
  MatView mat() const { return {type, ne[0], ne[1], data, row_bytes()}; }
  // Slice `i` of a 3-D tensor (n_in, n_out, n) as a matrix: merged expert weights are stored
  // expert-major, so each expert is one contiguous slice.
  MatView slice(int64_t i) const {
    return {type, ne[0], ne[1], data + static_cast<uint64_t>(i) * ne[1] * row_bytes(), row_bytes()};
  }
  uint64_t slice_bytes() const { return static_cast<uint64_t>(ne[1]) * row_bytes(); }
  // Where slice `i` of a 3-D tensor lies in the model files.
  FileRange slice_file(int64_t i) const { return {file.part, file.offset + static_cast<uint64_t>(i) * slice_bytes(), slice_bytes()}; }
  // Where row `i` lies in the model files (one expert's bias in an (n_out, n_expert) tensor).
  FileRange row_file(int64_t i) const { return {file.part, file.offset + static_cast<uint64_t>(i) * row_bytes(), row_bytes()}; }
  // F32 vectors (norm weights, biases) are read directly.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

}  // namespace sluice
