// Random-read disk probe (see disk_probe.h). Several threads keep several reads in flight, as the
// expert stream's io_uring queue does; a single synchronous reader would understate an SSD.
#include "core/disk_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/aligned.h"
#include "core/error.h"
#include "core/timer.h"

namespace sluice {

namespace {
constexpr uint64_t kAlign = 4096;
}

DiskProbe probe_disk(const std::string& path, double seconds, uint64_t block_bytes, int n_threads) {
  DiskProbe out;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) {
    out.direct = false;
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) fail("--measure-disk: cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("--measure-disk: cannot stat '{}': {}", path, std::strerror(errno));
  }
  const uint64_t block = std::max<uint64_t>(kAlign, (block_bytes + kAlign - 1) / kAlign * kAlign);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < block) {
    ::close(fd);
    fail("--measure-disk: '{}' is {} bytes, smaller than one {} byte read", path, size, block);
  }
  const uint64_t n_offsets = (size - block) / kAlign + 1;
  std::atomic<uint64_t> bytes{0}, reads{0};
  std::atomic<bool> error{false};
  Timer timer;
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, n_threads); ++t)
    threads.emplace_back([&, t] {
      AlignedBuffer buf(block, kAlign);
      std::mt19937_64 rng(0x5eed + t);
      while (timer.seconds() < seconds) {
        const off_t off = static_cast<off_t>(rng() % n_offsets * kAlign);
        const ssize_t n = ::pread(fd, buf.data(), block, off);
        if (n <= 0) {
          error = true;
          return;
        }
        bytes += static_cast<uint64_t>(n);
        ++reads;
      }
    });
  for (auto& th : threads) th.join();
  const double secs = timer.seconds();
  ::close(fd);
  if (error) fail("--measure-disk: reading '{}' failed", path);
  out.reads = reads;
  out.bytes_per_second = secs > 0 ? static_cast<double>(bytes) / secs : 0;
  return out;
}

}  // namespace sluice
