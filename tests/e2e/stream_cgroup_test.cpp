// Larger-than-RAM run: a generated MoE model is evaluated in RAM, then with streamed experts
// inside a cgroup (v1 memory controller) whose limit is well below the model's size. The
// streamed logits must equal the in-RAM logits bit for bit and the cgroup's peak usage (page
// cache included) must stay within the limit. Skipped where no cgroup can be created.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace fs = std::filesystem;

namespace {

struct Result {
  int status;
  std::string out;
};

Result sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  return s;
}

}  // namespace

TEST(StreamCgroup, LogitsEqualInRamAndPeakWithinLimit) {
  const fs::path cg_root = "/sys/fs/cgroup/memory";
  const fs::path cg = cg_root / ("sluice-test-" + std::to_string(getpid()));
  std::error_code ec;
  if (!fs::exists(cg_root / "memory.limit_in_bytes") || !fs::create_directory(cg, ec))
    GTEST_SKIP() << "no writable cgroup v1 memory controller at " << cg_root;

  const fs::path dir = fs::temp_directory_path() / ("sluice-stream-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string bin = SLUICE_BIN;
  const std::string model = (dir / "m.gguf").string();
  // ~240 MB, most of it routed experts (4 layers × 32 experts, Q4_K).
  Result g = sh(bin + " gen-model --preset qwen3-30b-a3b --layers 4 --experts 32 --experts-used 8 --embd 1024 "
                      "--ff-exp 1024 --heads 8 --kv-heads 2 --head-dim 128 --vocab 4096 --seed 7 -o " + model);
  ASSERT_EQ(g.status, 0) << g.out;
  const uint64_t size = fs::file_size(model);
  const std::string ref = (dir / "ref.json").string();
  std::ofstream(ref) << R"({"tokens": [1, 5, 9, 200, 17, 33, 2, 8, 99, 100, 101, 7, 3, 64, 12, 250]})";

  const std::string ram_json = (dir / "ram.json").string(), stream_json = (dir / "stream.json").string();
  Result a = sh(bin + " logits -m " + model + " --tokens-from " + ref + " --greedy 4 --experts ram -o " + ram_json);
  ASSERT_EQ(a.status, 0) << a.out;

  const uint64_t limit = 96ull << 20;  // half the file
  ASSERT_LT(limit * 3 / 2, size);
  std::ofstream(cg / "memory.limit_in_bytes") << limit;
  const std::string inner = bin + " logits -m " + model + " --tokens-from " + ref +
                            " --greedy 4 --experts stream --ssd-streaming-cache-experts 40MB -o " + stream_json;
  Result b = sh("sh -c 'echo $$ > " + (cg / "cgroup.procs").string() + " && exec " + inner + "'");
  const uint64_t peak = std::stoull(read_file(cg / "memory.max_usage_in_bytes"));
  std::printf("model %.1f MB, cgroup limit %.1f MB, peak usage %.1f MB\n", size / 1e6, limit / 1e6, peak / 1e6);
  fs::remove(cg, ec);
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_LE(peak, limit);

  auto ja = nlohmann::json::parse(read_file(ram_json)), jb = nlohmann::json::parse(read_file(stream_json));
  EXPECT_EQ(ja["top_logits"], jb["top_logits"]);
  EXPECT_EQ(ja["last_logits"], jb["last_logits"]);
  EXPECT_EQ(ja["greedy"], jb["greedy"]);
  fs::remove_all(dir);
}
