// HugePageBuffer: one anonymous mapping, over-allocated by a huge page so that the buffer can
// start on a 2 MiB boundary.
#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace sluice {

HugePageBuffer::HugePageBuffer(uint64_t bytes, const char* what) : size_(bytes) {
  if (bytes == 0) return;
  map_bytes_ = bytes + kHugePage;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("{}: cannot allocate {:.1f} MiB: {}", what, static_cast<double>(bytes) / (1 << 20),
         std::strerror(errno));
  }
  data_ = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(map_) + kHugePage - 1) &
                                       ~uintptr_t{kHugePage - 1});
  madvise(data_, bytes, MADV_HUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() {
  if (map_) munmap(map_, map_bytes_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, map_bytes_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace sluice
