// A short random-read probe of the disk a file lives on, for the planner's decode estimate: the
// rate at which streamed experts can arrive.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

struct DiskProbe {
  double bytes_per_second = 0;
  uint64_t reads = 0;
  bool direct = true;  // false: O_DIRECT was refused (tmpfs, some overlays); the page cache may serve reads
};

// Reads blocks of `block_bytes` (rounded up to 4 KiB) at random 4 KiB-aligned offsets of `path`
// for `seconds`, from `n_threads` threads, with O_DIRECT as the expert stream reads. Throws
// sluice::Error naming the file when it cannot be opened or read.
DiskProbe probe_disk(const std::string& path, double seconds, uint64_t block_bytes, int n_threads = 4);

}  // namespace sluice
