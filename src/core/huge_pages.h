// Anonymous memory advised for 2 MiB pages, for large buffers that are read in long sweeps (a KV
// cache's rows at depth, a rank's packed experts). In 4 KiB pages such a sweep takes a page walk
// every 64 cache lines, and with hundreds of MB in play the walks miss the caches too. The mapping
// is aligned to 2 MiB so every whole 2 MiB range inside it can be one page; the advice is only
// advice (where transparent huge pages are off, the buffer is ordinary 4 KiB pages), and physical
// memory follows the pages touched, not the alignment slack.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

class HugePageBuffer {
 public:
  static constexpr uint64_t kHugePage = uint64_t{2} << 20;

  HugePageBuffer() = default;
  // Zero-filled; fails (sluice::Error naming `what`) when the memory cannot be mapped.
  HugePageBuffer(uint64_t bytes, const char* what);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  uint64_t map_bytes_ = 0;
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace sluice
