// Declaring a model's tensors: each architecture asks for tensors by name with the dims it
// expects; a missing tensor or a dim mismatch fails at load, naming the tensor, the dims found
// and the dims expected. Tensors are views of the GGUF mmap.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace sluice {

namespace gguf { class File; struct TensorInfo; }

class WeightLoader {
 public:
  explicit WeightLoader(const gguf::File& file) : file_(file) {}
  // Tensors of a second file read alongside the model (a separate MTP GGUF): their split parts
  // are numbered after the model's `part_base` parts, so FileRange.part indexes one list of paths.
  WeightLoader(const gguf::File& file, uint32_t part_base) : file_(file), part_base_(part_base) {}

  // dims in GGML order; throws when absent or shaped differently.
  Tensor require(const std::string& name, std::initializer_list<int64_t> dims) const;
  // Empty tensor when absent; throws when present with other dims.
  Tensor optional(const std::string& name, std::initializer_list<int64_t> dims) const;
  // Norm weights and biases must be F32 so ops read them directly.
  Tensor require_f32(const std::string& name, std::initializer_list<int64_t> dims) const;
  Tensor optional_f32(const std::string& name, std::initializer_list<int64_t> dims) const;
  bool has(const std::string& name) const;

  static std::string layer_name(int il, const char* what) { return "blk." + std::to_string(il) + "." + what; }

 private:
  Tensor check(const gguf::TensorInfo& t, std::initializer_list<int64_t> dims) const;
  const gguf::File& file_;
  uint32_t part_base_ = 0;
};

}  // namespace sluice
