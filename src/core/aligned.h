// Aligned heap buffers. O_DIRECT reads need 4096-byte alignment and SIMD kernels like 64; one
// owning type serves both so expert slots, weights and activations share the same allocator.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace sluice {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

inline void* aligned_alloc_bytes(size_t alignment, size_t bytes) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

// Owning, non-copyable byte buffer with a fixed alignment.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t alignment = 64)
      : data_(static_cast<std::byte*>(aligned_alloc_bytes(alignment, bytes))), size_(bytes) {}
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_.get()); }

 private:
  std::unique_ptr<std::byte, AlignedFree> data_;
  size_t size_ = 0;
};

}  // namespace sluice
