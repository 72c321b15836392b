// libFuzzer target for the GGUF reader: each input is written to a memfd and opened by path, as a
// model file would be, then every metadata value and tensor info is touched and the model is
// sized the way `sluice inspect` does. sluice::Error is the expected outcome for bad input; any
// other exception, crash or sanitizer report is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "gguf/gguf.h"
#include "plan/sizing.h"

namespace {

// One memfd for the whole run: creating a file per input would dominate the cost of small inputs.
int input_fd() {
  static const int fd = [] {
    int f = memfd_create("gguf-fuzz-input", MFD_CLOEXEC);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  return fd;
}

// Keeps the reads of metadata and tensor bytes from being optimised away.
volatile uint64_t g_sink = 0;

void write_input(const uint8_t* data, size_t size) {
  const int fd = input_fd();
  if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) std::abort();
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) std::abort();
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void touch(const sluice::gguf::Value& v, uint64_t& sink) {
  using sluice::gguf::ValueType;
  if (v.type == ValueType::ARRAY) {
    for (const auto& item : v.arr().items) touch(item, sink);
  } else if (v.type == ValueType::STRING) {
    sink += v.str().size();
  } else if (v.is_number()) {
    sink += static_cast<uint64_t>(v.as_i64()) + v.as_u64();
    sink += static_cast<uint64_t>(v.as_f64() != 0.0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  const std::string path = "/proc/self/fd/" + std::to_string(input_fd());
  uint64_t sink = 0;
  try {
    auto file = sluice::gguf::File::open(path);
    for (const auto& [key, value] : file->metadata()) {
      touch(value, sink);
      sink += value.to_display().size();
    }
    for (const auto& t : file->tensors()) {
      sink += t.shape_string().size() + static_cast<uint64_t>(t.n_elements()) + t.row_bytes();
      // The first and last data byte must lie inside the mapping.
      if (t.nbytes > 0) sink += static_cast<uint8_t>(t.data[0]) + static_cast<uint8_t>(t.data[t.nbytes - 1]);
    }
    const sluice::ModelReport r = sluice::analyze_model(*file, {.ctx = 4096, .ram = uint64_t{1} << 30});
    sink += r.total_bytes + r.kv.bytes + r.verdict.flags.size();
  } catch (const sluice::Error&) {
  }
  g_sink = sink;
  return 0;
}
