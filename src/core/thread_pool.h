// Persistent thread pool for the forward pass, built to degrade gracefully when other processes
// take cores. A decode step dispatches hundreds of small parallel loops (one per matmul), so:
//  - workers spin briefly on a generation counter, then sleep on it (futex through
//    std::atomic::wait): a wake per loop would cost more than the loop on small models, but a
//    worker spinning forever would steal time from whoever shares its core;
//  - work is claimed dynamically and a worker only takes part in a loop if it arrives while the
//    loop is open: the caller never waits for a worker that the OS has descheduled, only for one
//    that holds a piece of work;
//  - when such waits keep happening (a worker preempted while holding work), the pool runs the
//    next loops on the caller alone for a while, doubling that stretch on each repeat, so a
//    contended pool is about as fast as one thread instead of many times slower.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  // n_threads counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) on the calling thread and on every worker that becomes free
  // while the caller's call runs, then waits for those workers. A worker may not join at all, so
  // fn must claim its work dynamically (from a shared counter) rather than by thread_index; the
  // index only tells threads apart (per-thread scratch).
  void run(const std::function<void(int, int)>& fn);

  // Calls fn(begin, end) on chunks that cover [0, n) exactly once, claimed dynamically by the
  // threads taking part; chunks are small enough that a slow thread holds back little.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // Odd while a job is open to joiners; every open and close adds one. 32-bit so that waiting on
  // it is a plain futex.
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> active_{0};    // workers inside the open (or just closed) job
  std::atomic<int> sleepers_{0};  // workers waiting on generation_
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // first worker exception of the current job
  // Stall backoff, touched by the calling thread only.
  int solo_left_ = 0;
  int solo_stretch_ = 0;
};

// Threads a compute pool should use by default: one per physical core that this process may run
// on (its affinity mask), capped by its cgroup CPU quota; hyperthread siblings share one core's
// vector units, so a second thread per core only adds contention.
int default_thread_count();

// The default thread count for a model whose decode token reads `bytes_per_token` of weights, on
// `cores` cores: one thread per kMinBytesPerThread, at least one. Below that a token is a
// millisecond of work, and splitting each of its matmuls across threads costs more in
// synchronisation than it gains, much more when another process holds a core (the shipped 13 MB
// model: 2367 t/s on one thread, 2158 on two; with a busy loop on one core 2372 vs 1464).
inline constexpr uint64_t kMinBytesPerThread = 16ull << 20;
int threads_for_work(int cores, uint64_t bytes_per_token);

// The parts of default_thread_count that read the system, exposed for tests: sysfs_cpu is the
// directory holding cpuN/topology (normally /sys/devices/system/cpu), allowed lists the CPUs in the
// affinity mask, cgroup_cpu_max is the content of cpu.max ("" when absent).
int physical_cores(const std::string& sysfs_cpu, const std::vector<int>& allowed);
int cgroup_cpu_limit(const std::string& cgroup_cpu_max);

}  // namespace sluice
