// Larger-than-RAM runs: a generated MoE model (qwen3moe, and cut-down deepseek-v3, gpt-oss-120b
// and glm-4.5-air in their real layouts) runs with streamed experts inside a cgroup (v1 memory
// controller) whose limit is well below the model's size, then in RAM outside it. The streamed
// logits must equal the in-RAM logits bit for bit and the cgroup's peak usage (page cache
// included) must stay within the limit. The file is dropped from the page cache before the
// capped run, so the pages it maps are charged to its cgroup rather than found already cached by
// the writer. Skipped where no cgroup can be created.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../unit/test_util.h"

namespace fs = std::filesystem;

namespace {

using sluice::test::read_file;
using sluice::test::sh;
using sluice::test::ShellResult;

// Writes back and evicts the file's cached pages.
void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct CgroupCase {
  const char* name;
  const char* gen_args;  // gen-model flags (preset, cut, dims); mostly routed experts
  uint64_t limit;        // cgroup memory limit, under 2/3 of the file
  const char* cache;     // --ssd-streaming-cache-experts, or "auto": no flags, the engine decides
};

class StreamCgroup : public ::testing::TestWithParam<CgroupCase> {};

TEST_P(StreamCgroup, LogitsEqualInRamAndPeakWithinLimit) {
  const CgroupCase& c = GetParam();
  const fs::path cg_root = "/sys/fs/cgroup/memory";
  const std::string tag = std::string(c.name) + "-" + std::to_string(getpid());
  const fs::path cg = cg_root / ("sluice-test-" + tag);
  std::error_code ec;
  if (!fs::exists(cg_root / "memory.limit_in_bytes") || !fs::create_directory(cg, ec))
    GTEST_SKIP() << "no writable cgroup v1 memory controller at " << cg_root;

  const fs::path dir = fs::temp_directory_path() / ("sluice-stream-" + tag);
  fs::create_directories(dir);
  const std::string bin = SLUICE_BIN;
  const std::string model = (dir / "m.gguf").string();
  ShellResult g = sh(bin + " gen-model " + c.gen_args + " --vocab 4096 --seed 7 --force -o " + model);
  ASSERT_EQ(g.status, 0) << g.out;
  const uint64_t size = fs::file_size(model);
  const std::string ref = (dir / "ref.json").string();
  std::ofstream(ref) << R"({"tokens": [1, 5, 9, 200, 17, 33, 2, 8, 99, 100, 101, 7, 3, 64, 12, 250]})";
  const std::string args = " logits -m " + model + " --tokens-from " + ref + " --greedy 4";

  ASSERT_LT(c.limit * 3 / 2, size);
  drop_from_page_cache(model);
  std::ofstream(cg / "memory.limit_in_bytes") << c.limit;
  const std::string stream_json = (dir / "stream.json").string(), ram_json = (dir / "ram.json").string();
  // "auto": no mode or cache flags — the engine must see the cgroup limit, choose streaming and
  // size the cache to fit under it by itself.
  const bool automatic = std::string(c.cache) == "auto";
  const std::string flags = automatic ? "" : std::string(" --experts stream --ssd-streaming-cache-experts ") + c.cache;
  const std::string inner = bin + args + flags + " -o " + stream_json;
  ShellResult b = sh("sh -c 'echo $$ > " + (cg / "cgroup.procs").string() + " && exec " + inner + "'");
  const uint64_t peak = std::stoull(read_file(cg / "memory.max_usage_in_bytes"));
  std::printf("[%s] model %.1f MB, cgroup limit %.1f MB, peak usage %.1f MB\n", c.name, size / 1e6, c.limit / 1e6,
              peak / 1e6);
  fs::remove(cg, ec);
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_LE(peak, c.limit);
  if (automatic) {
    EXPECT_NE(b.out.find("experts: preloaded"), std::string::npos) << "auto mode did not stream: " << b.out;
  }

  ShellResult a = sh(bin + args + " --experts ram -o " + ram_json);
  ASSERT_EQ(a.status, 0) << a.out;
  auto ja = nlohmann::json::parse(read_file(ram_json)), jb = nlohmann::json::parse(read_file(stream_json));
  EXPECT_EQ(ja["top_logits"], jb["top_logits"]);
  EXPECT_EQ(ja["last_logits"], jb["last_logits"]);
  EXPECT_EQ(ja["greedy"], jb["greedy"]);
  fs::remove_all(dir);
}

// Each file is 230–250 MB, nearly all of it routed experts, under a 96 MB limit with a 40 MB
// expert cache (128 MB for deepseek-v3, which peaks at ~113 MB when uncapped). The cut-down models keep their family's layout: MLA with q/kv LoRA, a dense first
// layer and shared experts with 8-group routing (deepseek-v3, Q2_K experts); sinks, biases,
// sliding window and MXFP4 experts (gpt-oss-120b); partial RoPE, biases, shared expert and an
// unused nextn layer that must stay out of memory (glm-4.5-air). deepseek-v4-flash (314 MB, IQ2_XXS/
// Q2_K experts) runs under a limit of less than half its file: hyper-connections, every layer
// kind (window, ratio 4 with the indexer, ratio 128) and three hash layers whose experts are
// prefetched with certainty.
INSTANTIATE_TEST_SUITE_P(
    Models, StreamCgroup,
    ::testing::Values(
        CgroupCase{"qwen3moe",
                   "--preset qwen3-30b-a3b --layers 4 --experts 32 --experts-used 8 --embd 1024 --ff-exp 1024 "
                   "--heads 8 --kv-heads 2 --head-dim 128",
                   96ull << 20, "40MB"},
        CgroupCase{"qwen3moe_auto_budget",
                   "--preset qwen3-30b-a3b --layers 4 --experts 32 --experts-used 8 --embd 1024 --ff-exp 1024 "
                   "--heads 8 --kv-heads 2 --head-dim 128",
                   96ull << 20, "auto"},
        CgroupCase{"deepseek_v3",
                   "--preset deepseek-v3 --layers 4 --leading-dense 1 --experts 64 --embd 1024 --ff 2048 --ff-exp 1024 "
                   "--heads 8",
                   128ull << 20, "40MB"},
        CgroupCase{"gpt_oss_120b",
                   "--preset gpt-oss-120b --layers 4 --experts 32 --embd 1024 --ff-exp 1024 --heads 16 --kv-heads 2",
                   96ull << 20, "40MB"},
        CgroupCase{"glm_45_air",
                   "--preset glm-4.5-air --layers 4 --experts 32 --embd 1024 --ff 2048 --ff-exp 1024 --heads 8 "
                   "--kv-heads 2",
                   96ull << 20, "40MB"},
        CgroupCase{"deepseek_v4_flash",
                   "--preset deepseek-v4-flash --layers 6 --embd 1024 --heads 8 --head-dim 256 --rope-dim 64 --q-lora 256 "
                   "--out-groups 2 --out-lora 256 --experts 48 --experts-used 6 --ff-exp 1024 --indexer-heads 8 "
                   "--indexer-dim 128 --indexer-top-k 16 --window 32",
                   144ull << 20, "48MB"}),
    [](const ::testing::TestParamInfo<CgroupCase>& info) { return std::string(info.param.name); });

}  // namespace
