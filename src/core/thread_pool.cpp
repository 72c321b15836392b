// Thread pool: see thread_pool.h for the join protocol and the stall backoff. The join protocol in
// short: opening a job makes generation_ odd, closing it makes it even again. A worker that sees
// an odd generation registers in active_ and only then re-reads generation_; if the job is still
// the one it saw, the caller cannot have returned (it waits for active_ to drain after closing), so
// job_ is safe to call. A worker that registers late finds the generation moved on and leaves.
#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "core/meminfo.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// How long an idle worker spins before sleeping: longer than the gap between the loops of one
// decode step, far shorter than an OS time slice.
constexpr auto kSpinTime = std::chrono::microseconds(200);
// A caller that waits longer than this, and longer than its own share of the job took, for
// workers to finish their claimed pieces has been stalled by a descheduled worker: a healthy
// worker finishes its last piece within about one piece of the caller's.
constexpr auto kStallTime = std::chrono::microseconds(200);
// Loops run on the caller alone after the first stall; doubled on each further stall up to the
// maximum (a few tokens of a small model), shortened by one for each clean parallel loop: a stall
// costs a time slice of the OS, far more than one parallel loop gains.
constexpr int kSoloFirst = 16;
constexpr int kSoloMax = 4096;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(2, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto deadline = Clock::now() + kSpinTime;
      for (int spin = 0; g == seen; ++spin) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if ((spin & 63) == 63 && Clock::now() > deadline) break;
      }
      if (g == seen) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while ((g = generation_.load(std::memory_order_seq_cst)) == seen)
          generation_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    if ((g & 1) == 0) continue;  // a job we missed has already closed
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == g) {
      try {
        (*job_)(index, n_threads_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    active_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  if (solo_left_ > 0) {
    --solo_left_;
    fn(0, n_threads_);
    return;
  }
  job_ = &fn;
  generation_.fetch_add(1, std::memory_order_seq_cst);  // open
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  const auto start = Clock::now();
  std::exception_ptr caller_error;
  try {
    fn(0, n_threads_);
  } catch (...) {
    caller_error = std::current_exception();
  }
  const auto own_done = Clock::now();
  generation_.fetch_add(1, std::memory_order_seq_cst);  // close: no new joiners
  for (int spin = 0; active_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4096) cpu_relax();
    else std::this_thread::yield();
  }
  const auto waited = Clock::now() - own_done;
  if (waited > kStallTime && waited > own_done - start) {
    solo_stretch_ = std::clamp(solo_stretch_ * 2, kSoloFirst, kSoloMax);
    solo_left_ = solo_stretch_;
  } else if (solo_stretch_ > 0) {
    --solo_stretch_;
  }
  std::exception_ptr worker_error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    worker_error = std::exchange(error_, nullptr);
  }
  if (caller_error) std::rethrow_exception(caller_error);
  if (worker_error) std::rethrow_exception(worker_error);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  // About four chunks per thread: enough for the others to absorb a slow thread's share.
  const int64_t chunk = std::max<int64_t>(1, n / (4 * static_cast<int64_t>(n_threads_)));
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    for (int64_t b; (b = next.fetch_add(chunk, std::memory_order_relaxed)) < n;)
      fn(b, std::min(n, b + chunk));
  });
}

int physical_cores(const std::string& sysfs_cpu, const std::vector<int>& allowed) {
  std::set<std::pair<long, long>> cores;
  for (int cpu : allowed) {
    const std::string dir = sysfs_cpu + "/cpu" + std::to_string(cpu) + "/topology/";
    long package = -1, core = -1;
    std::ifstream(dir + "physical_package_id") >> package;
    std::ifstream(dir + "core_id") >> core;
    // Without topology (some containers hide it) each CPU counts as a core of its own.
    if (package < 0 || core < 0) cores.emplace(-1 - cpu, -1);
    else cores.emplace(package, core);
  }
  return static_cast<int>(cores.size());
}

int cgroup_cpu_limit(const std::string& cgroup_cpu_max) {
  std::istringstream in(cgroup_cpu_max);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  double q = 0;
  try {
    q = std::stod(quota);
  } catch (...) {
    return 0;
  }
  if (q <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(q / period)));
}

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The tightest cpu.max quota (cgroup v2) from this process's cgroup up to the root, 0 when none:
// a parent's quota binds its children too.
int own_cgroup_cpu_limit() {
  const CgroupPaths paths = parse_proc_self_cgroup(read_all("/proc/self/cgroup"));
  std::string dir = paths.v2.value_or("/");
  int limit = 0;
  for (;;) {
    const int here = cgroup_cpu_limit(read_all("/sys/fs/cgroup" + dir + "/cpu.max"));
    if (here > 0) limit = limit > 0 ? std::min(limit, here) : here;
    if (dir.empty() || dir == "/") break;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  return limit;
}

}  // namespace

int default_thread_count() {
  std::vector<int> allowed;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
  }
  if (allowed.empty()) {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned cpu = 0; cpu < n; ++cpu) allowed.push_back(static_cast<int>(cpu));
  }
  int n = std::max(1, physical_cores("/sys/devices/system/cpu", allowed));
  if (const int limit = own_cgroup_cpu_limit(); limit > 0) n = std::min(n, limit);
  return n;
}

int threads_for_work(int cores, uint64_t bytes_per_token) {
  const uint64_t by_work = std::max<uint64_t>(1, bytes_per_token / kMinBytesPerThread);
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(std::max(1, cores)), by_work));
}

}  // namespace sluice
