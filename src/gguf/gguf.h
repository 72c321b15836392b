// GGUF reader: versions 2 and 3, every value type, split models presented as one file. Local files
// are mmapped read-only; a remote one is read through a gguf::ByteSource (gguf/source.h) that
// fetches only the header. Every count, size and offset is validated against the file before use,
// so a truncated or corrupted file fails at open with a message naming the key or tensor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/source.h"
#include "gguf/value.h"
#include "quant/types.h"

namespace sluice::gguf {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t nbytes = 0;
  uint32_t file_index = 0;    // which split part holds the data
  uint64_t file_offset = 0;   // absolute byte offset of the data in that part
  const std::byte* data = nullptr;  // the same bytes, through the part's mmap (null when remote)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return sluice::row_bytes(type, static_cast<uint64_t>(ne[0])); }
  // "[2048, 768, 128]" in GGML order (row length first).
  std::string shape_string() const;
};

class File {
 public:
  // Opens `path`; when it is part 1 of a split model (split.count > 1), opens the sibling parts
  // named PREFIX-0000K-of-0000N.gguf and merges their tensors. Throws sluice::Error.
  static std::unique_ptr<File> open(const std::string& path);
  // The same for parts that `opener` provides by name (a URL's siblings are URLs): only the bytes
  // the header needs are asked for.
  static std::unique_ptr<File> open(const std::string& name, const SourceOpener& opener);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t n_parts() const { return parts_.size(); }
  const std::string& part_path(size_t i) const { return parts_[i].path; }
  uint64_t part_size(size_t i) const { return parts_[i].size; }
  uint64_t total_size() const;

  // Metadata of part 1, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: the *_or forms return the fallback when the key is absent; all of them throw
  // when the key is present with an incompatible type, naming key, found type and expected type.
  std::string get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the tensor

 private:
  struct Part {
    std::string path;
    uint64_t size = 0;
    std::unique_ptr<ByteSource> source;
  };
  File() = default;
  void parse_part(size_t index, bool is_first);

  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<Part> parts_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
};

// Split file names: "model-00001-of-00003.gguf" → part k name; nullopt when not of that form.
std::optional<std::string> split_part_path(const std::string& first_path, int part, int count);

}  // namespace sluice::gguf
