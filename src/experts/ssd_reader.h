// Asynchronous positional reads for expert streaming. io_uring (liburing) submits a whole
// layer's misses in one system call and reaps completions as they land; a pread thread pool is
// the fallback where io_uring is unavailable (old kernels, seccomp). Reads target O_DIRECT file
// descriptors so expert bytes never enter the page cache (which would count against the memory
// budget twice); offsets, lengths and buffers must then be 4096-byte aligned.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice {

constexpr uint64_t kDirectAlign = 4096;

struct ReadRequest {
  int fd = -1;
  uint64_t offset = 0;
  uint32_t length = 0;
  void* dst = nullptr;
  uint64_t tag = 0;  // returned with the completion
};

struct ReadCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes read, or −errno
  uint32_t expected = 0;
};

class SsdReader {
 public:
  virtual ~SsdReader() = default;
  virtual void submit(std::span<const ReadRequest> reqs) = 0;
  // Appends finished reads to `out`; with `block`, waits until at least one has finished
  // (returns immediately when nothing is in flight).
  virtual void reap(std::vector<ReadCompletion>& out, bool block) = 0;
  virtual size_t in_flight() const = 0;
  virtual const char* name() const = 0;
};

// io_uring when available (and not disabled by SLUICE_NO_URING=1), else the pread pool.
std::unique_ptr<SsdReader> make_ssd_reader(unsigned queue_depth);
std::unique_ptr<SsdReader> make_pread_reader(int n_threads);

// Opens a model part for streaming: O_DIRECT when the filesystem supports it; otherwise a plain
// descriptor (then *direct is false and callers drop pages with posix_fadvise after reading).
int open_for_streaming(const std::string& path, bool* direct);

}  // namespace sluice
