// Tensor declaration checks (see weights.h).
#include "model/weights.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace sluice {

namespace {
std::string dims_string(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  bool first = true;
  for (int64_t d : dims) {
    s += fmt::format("{}{}", first ? "" : ", ", d);
    first = false;
  }
  return s + "]";
}
}  // namespace

Tensor WeightLoader::check(const gguf::TensorInfo& t, std::initializer_list<int64_t> dims) const {
  bool ok = static_cast<int>(dims.size()) >= t.n_dims;
  int i = 0;
  for (int64_t d : dims) {
    if (t.ne[i] != d) ok = false;
    ++i;
  }
  if (!ok)
    fail("tensor '{}' has dims {}, expected {}", t.name, t.shape_string(), dims_string(dims));
  Tensor out;
  out.type = t.type;
  out.ne = t.ne;
  out.data = t.data;
  out.file = {part_base_ + t.file_index, t.file_offset, t.nbytes};
  return out;
}

Tensor WeightLoader::require(const std::string& name, std::initializer_list<int64_t> dims) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (!t) fail("tensor '{}' (dims {}) is missing from the model", name, dims_string(dims));
  return check(*t, dims);
}

Tensor WeightLoader::optional(const std::string& name, std::initializer_list<int64_t> dims) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  return t ? check(*t, dims) : Tensor{};
}

Tensor WeightLoader::require_f32(const std::string& name, std::initializer_list<int64_t> dims) const {
  Tensor t = require(name, dims);
  if (t.type != GgmlType::F32) fail("tensor '{}' has type {}, expected F32", name, type_name(t.type));
  return t;
}

Tensor WeightLoader::optional_f32(const std::string& name, std::initializer_list<int64_t> dims) const {
  Tensor t = optional(name, dims);
  if (t && t.type != GgmlType::F32) fail("tensor '{}' has type {}, expected F32", name, type_name(t.type));
  return t;
}

bool WeightLoader::has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

}  // namespace sluice
