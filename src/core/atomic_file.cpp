// Temporary file plus rename; see atomic_file.h.
#include "core/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace sluice {

namespace {
std::string temp_name(const std::string& path) {
  const std::filesystem::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + fmt::format(".tmp{}", getpid()))).string();
}
}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(temp_name(path)), f_(nullptr) {
  // Said before anything is written: a rename over a directory fails only at the end, in words
  // naming the temporary file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("'{}' is a directory", path);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail("cannot create '{}': {}", tmp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!done_) std::remove(tmp_.c_str());
}

void AtomicFile::bytes(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n) fail("write to '{}' failed: {}", tmp_, std::strerror(errno));
  pos_ += n;
}

void AtomicFile::close() {
  FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail("closing '{}' failed: {}", tmp_, std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("renaming '{}' to '{}' failed: {}", tmp_, path_, std::strerror(errno));
  done_ = true;
}

}  // namespace sluice
