// Weight tensors as every layer sees them: typed views into memory someone else owns (the GGUF
// mmap, a loaded copy, an expert-cache slot). Views carry GGML dims so every matmul can check its
// shapes. The ground floor above the block formats: ops, the expert store and the model use these
// views, and this header names none of them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace sluice {

// Where bytes lie in the model files: part (split file) index, absolute offset, length.
struct FileRange {
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A 2-D weight matrix in GGML layout: n_out rows of n_in values, rows contiguous, any block type.
struct MatView {
  GgmlType type;
  int64_t n_in;   // ne[0], values per row
  int64_t n_out;  // number of rows
  const std::byte* data;
  uint64_t row_stride;  // bytes between rows
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
