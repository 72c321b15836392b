// Where a GGUF's bytes come from. The reader parses headers through this interface only, so a local
// file (mmapped) and a remote one (fetched with HTTP range requests, hub/remote_source.h) are read
// by the same validated parser; only a mapped source gives tensors a data pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::gguf {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual const std::string& name() const = 0;  // a path or URL, for messages
  virtual uint64_t size() const = 0;
  // The bytes [offset, offset + n), which the caller has checked lie inside size(). The pointer
  // is valid until the next call.
  virtual const std::byte* bytes(uint64_t offset, uint64_t n) = 0;
  // The whole file in memory (a mapped local file), else nullptr.
  virtual const std::byte* map() const { return nullptr; }
};

// A local file, mmapped read-only. Throws sluice::Error when it cannot be opened.
std::unique_ptr<ByteSource> open_mapped(const std::string& path);

// Opens the part named `name` (the first part's name, or a sibling's from split_part_path).
using SourceOpener = std::function<std::unique_ptr<ByteSource>(const std::string& name)>;

}  // namespace sluice::gguf
