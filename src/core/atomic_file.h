// A file written whole or not at all: bytes go to a temporary file next to `path`, renamed over
// `path` by close(), so a reader (a server mapping the old file, an input that is also the output,
// a session restored after a crash) never sees a torn file. Destroyed unclosed, it removes the
// temporary file and leaves `path` as it was.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace sluice {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void bytes(const void* p, size_t n);
  template <typename T>
  void pod(T v) { bytes(&v, sizeof(T)); }
  void close();  // throws sluice::Error when the data cannot be flushed or renamed into place
  uint64_t pos() const { return pos_; }

 private:
  std::string path_, tmp_;
  FILE* f_;
  uint64_t pos_ = 0;
  bool done_ = false;
};

}  // namespace sluice
