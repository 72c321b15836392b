// A long context inside a memory limit: a generated MoE model asked for a 65,536-token context
// with a q8_0 KV cache. `inspect` must plan it under the limit (the KV cache counted at the full
// context) and refuse f32 keys and values, which do not fit; under a cgroup (v1 memory
// controller) of that limit the engine must run a 1,200-token prompt with peak usage within it and
// refuse the f32 cache with the planner's message before allocating. The cache grows with the
// tokens held (kv/kv_cache.h), so with the expert cache fixed the peak at -c 65536 stays near the
// peak at -c 4096 instead of adding the 136 MiB a 65,536-position q8_0 cache takes. Skipped where
// no cgroup can be created.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "../unit/test_util.h"

namespace fs = std::filesystem;

namespace {

using sluice::test::read_file;
using sluice::test::sh;
using sluice::test::ShellResult;

struct CappedRun {
  ShellResult result;
  uint64_t peak = 0;
};

// Runs `cmd` (a sluice command line) as the only process of a fresh memory cgroup of `limit`
// bytes and reads the cgroup's peak usage (page cache included).
CappedRun run_capped(const fs::path& cg, uint64_t limit, const std::string& cmd) {
  fs::create_directory(cg);
  std::ofstream(cg / "memory.limit_in_bytes") << limit;
  CappedRun r;
  r.result = sh("sh -c 'echo $$ > " + (cg / "cgroup.procs").string() + " && exec " + cmd + "'");
  r.peak = std::stoull(read_file(cg / "memory.max_usage_in_bytes"));
  std::error_code ec;
  fs::remove(cg, ec);
  return r;
}

void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

TEST(LongContextCgroup, Q8CachePlansAndRunsAt64kWithinTheLimit) {
  const fs::path cg_root = "/sys/fs/cgroup/memory";
  const std::string tag = "sluice-test-kv64k-" + std::to_string(getpid());
  {
    std::error_code ec;
    if (!fs::exists(cg_root / "memory.limit_in_bytes") || !fs::create_directory(cg_root / tag, ec))
      GTEST_SKIP() << "no writable cgroup v1 memory controller at " << cg_root;
    fs::remove(cg_root / tag, ec);
  }
  const fs::path dir = fs::temp_directory_path() / tag;
  fs::create_directories(dir);
  const std::string bin = SLUICE_BIN;
  const std::string model = (dir / "m.gguf").string();
  // 4 layers of 2 KV heads × 128: 2,176 B per position as q8_0 (136 MiB at 65,536), 8 KiB as f32.
  ShellResult g = sh(bin +
                     " gen-model --preset qwen3-30b-a3b --layers 4 --experts 32 --experts-used 8 --embd 1024 "
                     "--ff-exp 1024 --heads 8 --kv-heads 2 --head-dim 128 --vocab 4096 --seed 7 --force -o " +
                     model);
  ASSERT_EQ(g.status, 0) << g.out;
  const uint64_t limit = 320ull << 20;
  const uint64_t kv64k = 65536ull * 4 * 2 * 2 * 136;  // positions × layers × heads × (K, V) × q8_0 bytes

  // The plan: the KV cache at the full context is counted, q8_0 fits, f32 does not.
  const std::string insp = bin + " inspect " + model + " -c 65536 --ram 320MiB --json";
  ShellResult iq = sh(insp + " -ctk q8_0 -ctv q8_0");
  ASSERT_EQ(iq.status, 0) << iq.out;
  const nlohmann::json pq = nlohmann::json::parse(iq.out.substr(iq.out.find('{')))["plan"];
  EXPECT_TRUE(pq["ok"].get<bool>()) << pq.dump();
  EXPECT_EQ(pq["kv_bytes"].get<uint64_t>(), kv64k);
  EXPECT_EQ(pq["placement"].get<std::string>(), "stream");
  EXPECT_GT(pq["cache_bytes"].get<uint64_t>(), 0u);
  ShellResult ifl = sh(insp);
  ASSERT_EQ(ifl.status, 0) << ifl.out;
  const nlohmann::json pf = nlohmann::json::parse(ifl.out.substr(ifl.out.find('{')))["plan"];
  EXPECT_FALSE(pf["ok"].get<bool>()) << pf.dump();
  EXPECT_EQ(pf["kv_bytes"].get<uint64_t>(), kv64k * 4 * 32 / 34);

  std::mt19937 rng(1);
  nlohmann::json prompt;
  for (int i = 0; i < 1200; ++i) prompt["tokens"].push_back(static_cast<int>(5 + rng() % 4000));
  const std::string prompt_path = (dir / "prompt.json").string();
  std::ofstream(prompt_path) << prompt.dump();
  const std::string logits = bin + " logits -m " + model + " -t 2 --tokens-from " + prompt_path + " -o " +
                             (dir / "out.json").string();

  // Auto placement under the cgroup: the engine plans with the cgroup's limit, streams with what
  // the 64k cache leaves, and stays within the limit.
  drop_from_page_cache(model);
  CappedRun q8 = run_capped(cg_root / tag, limit, logits + " -c 65536 -ctk q8_0 -ctv q8_0");
  std::printf("[q8_0 -c 65536, auto] limit %.1f MiB, peak %.1f MiB\n", limit / 1048576.0, q8.peak / 1048576.0);
  ASSERT_EQ(q8.result.status, 0) << q8.result.out;
  EXPECT_LE(q8.peak, limit);

  // f32 keys and values at 65,536 positions (512 MiB) are refused by the plan, not by the kernel.
  CappedRun f32 = run_capped(cg_root / tag, limit, logits + " -c 65536");
  EXPECT_NE(f32.result.status, 0);
  EXPECT_NE(f32.result.out.find("512.00 MiB of KV cache"), std::string::npos) << f32.result.out;
  EXPECT_LT(f32.peak, limit / 4);

  // The same prompt with the expert cache fixed: the 65,536-position context costs what the held
  // tokens take, not the whole cache.
  const std::string fixed = logits + " -ctk q8_0 -ctv q8_0 --experts stream --ssd-streaming-cache-experts 64MB";
  drop_from_page_cache(model);
  CappedRun small = run_capped(cg_root / tag, limit, fixed + " -c 4096");
  drop_from_page_cache(model);
  CappedRun large = run_capped(cg_root / tag, limit, fixed + " -c 65536");
  std::printf("[q8_0, 64 MB expert cache] peak at -c 4096 %.1f MiB, at -c 65536 %.1f MiB\n",
              small.peak / 1048576.0, large.peak / 1048576.0);
  ASSERT_EQ(small.result.status, 0) << small.result.out;
  ASSERT_EQ(large.result.status, 0) << large.result.out;
  EXPECT_LT(large.peak, small.peak + kv64k / 4);
  fs::remove_all(dir);
}
