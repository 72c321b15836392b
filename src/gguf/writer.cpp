// GGUF writer: header (metadata, tensor infos with aligned offsets), padding, then each tensor's
// bytes from its fill callback, in the order added; written to a temporary file renamed into place.
#include "gguf/writer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"

namespace sluice::gguf {

namespace {

// The GGUF file goes through AtomicFile (temporary file renamed into place).
class Out : public AtomicFile {
 public:
  using AtomicFile::AtomicFile;
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[4096] = {};
    uint64_t target = (pos() + alignment - 1) / alignment * alignment;
    while (pos() < target) bytes(zeros, std::min<uint64_t>(sizeof(zeros), target - pos()));
  }
};

void write_value(Out& o, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: o.pod<uint8_t>(static_cast<uint8_t>(v.as_u64())); break;
    case ValueType::INT8: o.pod<int8_t>(static_cast<int8_t>(v.as_i64())); break;
    case ValueType::UINT16: o.pod<uint16_t>(static_cast<uint16_t>(v.as_u64())); break;
    case ValueType::INT16: o.pod<int16_t>(static_cast<int16_t>(v.as_i64())); break;
    case ValueType::UINT32: o.pod<uint32_t>(static_cast<uint32_t>(v.as_u64())); break;
    case ValueType::INT32: o.pod<int32_t>(static_cast<int32_t>(v.as_i64())); break;
    case ValueType::UINT64: o.pod<uint64_t>(v.as_u64()); break;
    case ValueType::INT64: o.pod<int64_t>(v.as_i64()); break;
    case ValueType::FLOAT32: o.pod<float>(static_cast<float>(v.as_f64())); break;
    case ValueType::FLOAT64: o.pod<double>(v.as_f64()); break;
    case ValueType::BOOL: o.pod<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
    case ValueType::STRING: o.str(v.str()); break;
    case ValueType::ARRAY:
      o.pod<uint32_t>(static_cast<uint32_t>(v.arr().elem_type));
      o.pod<uint64_t>(v.arr().items.size());
      for (const auto& it : v.arr().items) write_value(o, it);
      break;
  }
}

}  // namespace

void Writer::set(const std::string& key, Value v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void Writer::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill) {
  if (ne.empty() || ne.size() > 4) fail("tensor '{}': {} dimensions, expected 1..4", name, ne.size());
  const TypeTraits& tt = type_traits(type);
  if (ne[0] % tt.block_elems != 0)
    fail("tensor '{}': row length {} is not a multiple of the {} block size {}", name, ne[0], tt.name, tt.block_elems);
  uint64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) fail("tensor '{}': dimension {} must be positive", name, d);
    n *= static_cast<uint64_t>(d);
  }
  tensors_.push_back({name, type, std::move(ne), n / tt.block_elems * tt.block_bytes, std::move(fill)});
}

void Writer::add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                              const void* data) {
  add_tensor(name, type, std::move(ne), [data](std::byte* dst, size_t bytes) { std::memcpy(dst, data, bytes); });
}

void Writer::write(const std::string& path) const {
  Out o(path);
  o.pod<uint32_t>(0x46554747u);
  o.pod<uint32_t>(3);
  o.pod<uint64_t>(tensors_.size());
  bool has_alignment = false;
  for (const auto& [k, v] : kv_) has_alignment |= (k == "general.alignment");
  o.pod<uint64_t>(kv_.size() + ((alignment_ != 32 && !has_alignment) ? 1 : 0));
  for (const auto& [k, v] : kv_) {
    o.str(k);
    o.pod<uint32_t>(static_cast<uint32_t>(v.type));
    write_value(o, v);
  }
  if (alignment_ != 32 && !has_alignment) {
    o.str("general.alignment");
    o.pod<uint32_t>(static_cast<uint32_t>(ValueType::UINT32));
    o.pod<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.str(t.name);
    o.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.pod<int64_t>(d);
    o.pod<uint32_t>(static_cast<uint32_t>(t.type));
    o.pod<uint64_t>(offset);
    offset = (offset + t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  o.pad_to(alignment_);
  constexpr size_t kChunk = 16u << 20;
  std::unique_ptr<std::byte[]> buf;
  size_t buf_size = 0;
  uint64_t total = 0, written = 0;
  for (const auto& t : tensors_) total += t.nbytes;
  Progress progress("writing " + path, total >> 20, "MiB");
  for (const auto& t : tensors_) {
    if (t.nbytes > buf_size) {
      buf_size = std::max<size_t>(t.nbytes, kChunk);
      buf.reset(new std::byte[buf_size]);
    }
    t.fill(buf.get(), t.nbytes);
    o.bytes(buf.get(), t.nbytes);
    o.pad_to(alignment_);
    progress.update((written += t.nbytes) >> 20);
  }
  o.close();
}

}  // namespace sluice::gguf
