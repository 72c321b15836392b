// mpirun as the MPI tests start it: over TCP on this machine, allowed as root, ranks
// outnumbering cores.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "../unit/test_util.h"

namespace sluice::test {

// `wrap` runs each rank through `sh -c` (with $OMPI_COMM_WORLD_RANK) before exec'ing sluice.
inline std::string mpirun(int n, const std::string& args, const std::string& wrap = "") {
  const std::string run = std::string(SLUICE_MPIEXEC) + " --oversubscribe -np " +
                          std::to_string(n) + " --mca btl tcp,self --mca btl_tcp_if_include lo ";
  const std::string env = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  if (wrap.empty()) return env + run + SLUICE_BIN + " " + args;
  return env + run + "sh -c '" + wrap + " exec " + SLUICE_BIN + " " + args + "'";
}

// Runs `args` on n ranks, each in a cgroup v1 memory group of its own limited to `limit` bytes,
// after dropping `model` from the page cache (so each rank's reads are charged to its own group);
// expects every group's peak within the limit (`what` names a rank in messages: "rank", "stage")
// and removes the groups. nullopt: no cgroup v1 memory controller, or no group could be made.
inline std::optional<ShellResult> mpirun_in_cgroups(int n, const std::string& args,
                                                    const std::string& model, uint64_t limit,
                                                    const char* what) {
  namespace fs = std::filesystem;
  const fs::path root = "/sys/fs/cgroup/memory";
  if (!fs::exists(root / "memory.limit_in_bytes")) return std::nullopt;
  const std::string tag = "sluice-mpicg-" + std::to_string(getpid());
  auto group = [&](int r) { return root / (tag + "-" + std::to_string(r)); };
  std::error_code ec;
  for (int r = 0; r < n; ++r) {
    if (!fs::create_directory(group(r), ec)) {
      for (int q = 0; q < r; ++q) fs::remove(group(q), ec);
      return std::nullopt;
    }
    std::ofstream(group(r) / "memory.limit_in_bytes") << limit;
  }
  const int fd = ::open(model.c_str(), O_RDONLY);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  ShellResult result = sh(mpirun(
      n, args, "echo $$ > " + (root / tag).string() + "-$OMPI_COMM_WORLD_RANK/cgroup.procs;"));
  for (int r = 0; r < n; ++r) {
    EXPECT_LE(std::stoull(read_file(group(r) / "memory.max_usage_in_bytes")), limit)
        << what << " " << r;
    fs::remove(group(r), ec);
  }
  return result;
}

// How a job ended after a signal: its status and output, and the seconds from the signal to its end.
struct Ended {
  ShellResult r;
  double seconds;
};

// Runs `args` on 2 ranks (under `timeout 60`), each writing its pid to pids/<rank>; once rank 1 has
// started, waits 3 s (loaded and decoding), sends it `sig` and waits for the job to end.
inline Ended signal_rank_1(const std::string& args, const std::filesystem::path& pids, int sig) {
  namespace fs = std::filesystem;
  fs::create_directories(pids);
  const std::string cmd =
      "timeout 60 " + mpirun(2, args, "echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK;");
  std::chrono::steady_clock::time_point signalled{};
  std::thread killer([&] {
    const fs::path pid_file = pids / "1";
    for (int i = 0; i < 300 && !fs::exists(pid_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::this_thread::sleep_for(std::chrono::seconds(3));
    signalled = std::chrono::steady_clock::now();
    const std::string pid = read_file(pid_file);
    if (!pid.empty()) ::kill(std::stoi(pid), sig);
  });
  ShellResult r = sh(cmd);
  const auto ended = std::chrono::steady_clock::now();
  killer.join();
  return {r, std::chrono::duration<double>(ended - signalled).count()};
}

// The job failed on its own, within 10 s of the signal (not ended by `timeout`), and its output
// names every one of `names`.
inline void expect_failed_naming(const Ended& e, std::initializer_list<const char*> names) {
  EXPECT_NE(e.r.status, 0) << e.r.out;
  EXPECT_NE(e.r.status, 124) << "the job hung: " << e.r.out;
  EXPECT_LT(e.seconds, 10.0) << e.r.out;
  for (const char* n : names) EXPECT_NE(e.r.out.find(n), std::string::npos) << n << " in " << e.r.out;
}

}  // namespace sluice::test
