// Weight tensors as the model sees them: typed views into memory someone else owns (the GGUF
// mmap or a loaded copy). Views carry GGML dims so every matmul can check its shapes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"
#include "quant/types.h"

namespace sluice {

struct Tensor {
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGML order: ne[0] is the row length
  const std::byte* data = nullptr;

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
  // F32 vectors (norm weights, biases) are read directly.
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

}  // namespace sluice
