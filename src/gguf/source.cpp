// The mmapped local file behind gguf::File::open(path).
#include "gguf/source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace sluice::gguf {

namespace {

class MappedSource final : public ByteSource {
 public:
  explicit MappedSource(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open '{}': {}", path_, std::strerror(errno));
    struct stat st{};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd_);
      fail("'{}' is not a regular file", path_);
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* m = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (m == MAP_FAILED) {
        close(fd_);
        fail("cannot mmap '{}': {}", path_, std::strerror(errno));
      }
      map_ = static_cast<const std::byte*>(m);
    }
  }
  ~MappedSource() override {
    if (map_) munmap(const_cast<std::byte*>(map_), size_);
    close(fd_);
  }
  const std::string& name() const override { return path_; }
  uint64_t size() const override { return size_; }
  const std::byte* bytes(uint64_t offset, uint64_t) override { return map_ + offset; }
  const std::byte* map() const override { return map_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  const std::byte* map_ = nullptr;
};

}  // namespace

std::unique_ptr<ByteSource> open_mapped(const std::string& path) { return std::make_unique<MappedSource>(path); }

}  // namespace sluice::gguf
