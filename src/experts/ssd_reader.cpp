// SSD readers: io_uring and a pread thread pool (see ssd_reader.h).
#include "experts/ssd_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

namespace sluice {

int open_for_streaming(const std::string& path, bool* direct) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  *direct = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}' for streaming: {}", path, std::strerror(errno));
  return fd;
}

namespace {

class PreadReader final : public SsdReader {
 public:
  explicit PreadReader(int n_threads) {
    for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~PreadReader() override {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::span<const ReadRequest> reqs) override {
    {
      std::lock_guard<std::mutex> l(m_);
      for (const auto& r : reqs) queue_.push_back(r);
      in_flight_ += reqs.size();
    }
    cv_.notify_all();
  }
  void reap(std::vector<ReadCompletion>& out, bool block) override {
    std::unique_lock<std::mutex> l(m_);
    if (block) done_cv_.wait(l, [&] { return !done_.empty() || in_flight_ == 0; });
    for (auto& c : done_) out.push_back(c);
    in_flight_ -= done_.size();
    done_.clear();
  }
  size_t in_flight() const override {
    std::lock_guard<std::mutex> l(m_);
    return in_flight_;
  }
  const char* name() const override { return "pread"; }

 private:
  void loop() {
    for (;;) {
      ReadRequest r;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        r = queue_.front();
        queue_.pop_front();
      }
      uint64_t got = 0;
      int64_t result = 0;
      while (got < r.length) {
        ssize_t n = ::pread(r.fd, static_cast<char*>(r.dst) + got, r.length - got, static_cast<off_t>(r.offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          result = n < 0 ? -errno : static_cast<int64_t>(got);
          break;
        }
        got += static_cast<uint64_t>(n);
        result = static_cast<int64_t>(got);
      }
      {
        std::lock_guard<std::mutex> l(m_);
        done_.push_back({r.tag, result, r.length});
      }
      done_cv_.notify_all();
    }
  }
  mutable std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<ReadRequest> queue_;
  std::vector<ReadCompletion> done_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

#ifdef SLUICE_HAVE_URING
class UringReader final : public SsdReader {
 public:
  explicit UringReader(unsigned depth) {
    int rc = io_uring_queue_init(depth, &ring_, 0);
    if (rc < 0) fail("io_uring_queue_init: {}", std::strerror(-rc));
  }
  ~UringReader() override {
    std::vector<ReadCompletion> drain;
    while (in_flight_ > 0) reap(drain, true);
    io_uring_queue_exit(&ring_);
  }
  void submit(std::span<const ReadRequest> reqs) override {
    for (const auto& r : reqs) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (!sqe) {
        // Submission queue full: hand the queued entries to the kernel, which frees the ring.
        io_uring_submit(&ring_);
        sqe = io_uring_get_sqe(&ring_);
        if (!sqe) fail("io_uring: no submission entry after submit");
      }
      io_uring_prep_read(sqe, r.fd, r.dst, r.length, r.offset);
      io_uring_sqe_set_data64(sqe, track({r.tag, 0, r.length}));
      ++in_flight_;
    }
    io_uring_submit(&ring_);
  }
  void reap(std::vector<ReadCompletion>& out, bool block) override {
    if (ready_.empty()) collect(block && in_flight_ > 0);
    for (auto& c : ready_) out.push_back(c);
    ready_.clear();
  }
  size_t in_flight() const override { return in_flight_; }
  const char* name() const override { return "io_uring"; }

 private:
  void collect(bool block) {
    io_uring_cqe* cqe = nullptr;
    if (block) {
      int rc;
      do rc = io_uring_wait_cqe(&ring_, &cqe); while (rc == -EINTR);
      if (rc < 0) fail("io_uring_wait_cqe: {}", std::strerror(-rc));
    }
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
      const uint64_t index = io_uring_cqe_get_data64(cqe);
      ReadCompletion c = pending_[index];
      free_.push_back(index);
      c.result = cqe->res;
      ready_.push_back(c);
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
  }
  // In-flight reads live in pending_ at the index passed as user_data; indices are recycled.
  uint64_t track(const ReadCompletion& c) {
    if (free_.empty()) {
      pending_.push_back(c);
      return pending_.size() - 1;
    }
    const uint64_t i = free_.back();
    free_.pop_back();
    pending_[i] = c;
    return i;
  }
  io_uring ring_{};
  std::vector<ReadCompletion> pending_;
  std::vector<uint64_t> free_;
  std::vector<ReadCompletion> ready_;
  size_t in_flight_ = 0;
};
#endif

}  // namespace

std::unique_ptr<SsdReader> make_pread_reader(int n_threads) { return std::make_unique<PreadReader>(n_threads); }

std::unique_ptr<SsdReader> make_ssd_reader(unsigned queue_depth) {
#ifdef SLUICE_HAVE_URING
  const char* off = std::getenv("SLUICE_NO_URING");
  if (!(off && *off == '1')) {
    try {
      return std::make_unique<UringReader>(queue_depth);
    } catch (const Error&) {
      // Fall through to the portable reader (e.g. io_uring blocked by seccomp).
    }
  }
#endif
  return make_pread_reader(4);
}

}  // namespace sluice
