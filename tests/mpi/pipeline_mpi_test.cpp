// Pipeline stages across MPI processes (mpirun --oversubscribe over TCP on one machine):
// - 2 and 3 stages give logits (every prompt position, greedy continuation) identical to one
//   process on the qwen3moe, deepseek2 and gpt-oss reference models;
// - each stage streaming its experts under its own cgroup memory limit gives the in-RAM logits,
//   with every stage's peak within its limit (the three reference models in 2 and 3 stages, and a
//   240 MB generated model);
// - a stage that stops responding (SIGSTOP: a hung process or an unreachable host) or dies
//   (SIGKILL) makes the job exit non-zero within 10 s, naming the stage (or its rank);
// - with stages in separate network namespaces joined by veth (scripts/mpi-netns, root only) the
//   logits are still those of one process, and the hidden states crossed the veth links.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../unit/test_util.h"
#include "mpi_util.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRef = fs::path(SLUICE_TESTDATA) / "reference";

using sluice::test::read_file;
using sluice::test::sh;
using sluice::test::ShellResult;

using sluice::test::Ended;
using sluice::test::mpirun;

class PipelineMpi : public ::testing::TestWithParam<const char*> {};

TEST_P(PipelineMpi, TwoAndThreeStagesGiveOneProcessLogits) {
  const std::string stem = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-mpi-" + stem + "-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string args = "logits -t 1 --greedy 4 -m " + (kRef / (stem + ".gguf")).string() +
                           " --tokens-from " + (kRef / (stem + ".prompt1.json")).string() + " -o ";
  ShellResult one = sh(std::string(SLUICE_BIN) + " " + args + (dir / "one.json").string());
  ASSERT_EQ(one.status, 0) << one.out;
  const std::string expected = read_file(dir / "one.json");
  for (int n : {2, 3}) {
    const fs::path out = dir / ("np" + std::to_string(n) + ".json");
    ShellResult r = sh(mpirun(n, args + out.string()));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("stage " + std::to_string(n - 1) + ": rank"), std::string::npos) << r.out;
    EXPECT_EQ(read_file(out), expected) << stem << " in " << n << " stages";
  }
  fs::remove_all(dir);
}

// The same with every stage streaming its experts through a 1 MB cache under a cgroup memory
// limit of its own (the file dropped from the page cache first, so each stage's reads are charged
// to its own group).
TEST_P(PipelineMpi, StreamingStagesUnderTheirOwnCgroupLimitsGiveOneProcessLogits) {
  const fs::path cg_root = "/sys/fs/cgroup/memory";
  if (!fs::exists(cg_root / "memory.limit_in_bytes"))
    GTEST_SKIP() << "no cgroup v1 memory controller";
  const std::string stem = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-mpi-stream-" + stem + "-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string model = (kRef / (stem + ".gguf")).string();
  const std::string args = "logits -t 1 --greedy 4 -m " + model + " --tokens-from " +
                           (kRef / (stem + ".prompt1.json")).string() + " -o ";
  ShellResult one =
      sh(std::string(SLUICE_BIN) + " " + args + (dir / "one.json").string() + " --experts ram");
  ASSERT_EQ(one.status, 0) << one.out;
  for (int n : {2, 3}) {
    const fs::path out = dir / ("stream-np" + std::to_string(n) + ".json");
    const std::optional<ShellResult> run = sluice::test::mpirun_in_cgroups(
        n, args + out.string() + " --experts stream --ssd-streaming-cache-experts 1MB", model,
        64ull << 20, "stage");
    if (!run) GTEST_SKIP() << "no cgroup v1 memory controller to limit each stage";
    const ShellResult& r = *run;
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("experts stream"), std::string::npos) << r.out;
    EXPECT_EQ(read_file(out), read_file(dir / "one.json"))
        << stem << " streamed in " << n << " stages";
  }
  fs::remove_all(dir);
}

// Three stages, ranks 1 and 2 each in its own network namespace: every hidden state crosses a veth
// link (0 → 1 and 1 → 2 over the bridge), never shared memory or the loopback.
TEST(PipelineMpiNetns, StagesInSeparateNetworkNamespacesGiveOneProcessLogits) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  if (sh("ip netns add sluice-probe-" + std::to_string(getpid()) + " && ip netns del sluice-probe-" +
         std::to_string(getpid()))
          .status != 0)
    GTEST_SKIP() << "cannot create network namespaces here";
  const std::string stem = "qwen3moe-256-q8_0";
  const fs::path dir = fs::temp_directory_path() / ("sluice-netns-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string args = "logits -t 1 --greedy 4 -m " + (kRef / (stem + ".gguf")).string() +
                           " --tokens-from " + (kRef / (stem + ".prompt1.json")).string() + " -o ";
  ShellResult one = sh(std::string(SLUICE_BIN) + " " + args + (dir / "one.json").string());
  ASSERT_EQ(one.status, 0) << one.out;
  ShellResult r = sh("MPIEXEC=" + std::string(SLUICE_MPIEXEC) + " " + SLUICE_SOURCE_DIR +
                     "/scripts/mpi-netns 3 --oversubscribe -- " + SLUICE_BIN + " " + args +
                     (dir / "netns.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_file(dir / "netns.json"), read_file(dir / "one.json"));
  // Each stage reports its namespace as its host, and each namespace's link brought in at least
  // the hidden states of the prompt: 172 tokens × 256 floats = 176 KB.
  for (int rank : {1, 2}) {
    const std::string stage = "stage " + std::to_string(rank) + ": rank " + std::to_string(rank) + " on sluice-";
    EXPECT_NE(r.out.find(stage), std::string::npos) << r.out;
    const size_t at = r.out.find("mpi-netns: rank " + std::to_string(rank) + " ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const size_t in = r.out.find("): ", at);
    ASSERT_NE(in, std::string::npos) << r.out;
    EXPECT_GT(std::stoull(r.out.substr(in + 3)), 100000u) << r.out;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Reference, PipelineMpi,
                         ::testing::Values("qwen3moe-256-q8_0", "deepseek2-f32", "gptoss-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// A generated qwen3moe of ~240 MB, nearly all routed experts, shared by the tests below.
class PipelineMpiModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("sluice-mpi-model-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "m.gguf").string();
    ShellResult g = sh(std::string(SLUICE_BIN) +
                       " gen-model --preset qwen3-30b-a3b --layers 4 --experts 32 --experts-used 8 "
                       "--embd 1024 --ff-exp 1024 "
                       "--heads 8 --kv-heads 2 --head-dim 128 --vocab 4096 --seed 7 --force -o " +
                       model_);
    if (g.status != 0) model_.clear();
    std::ofstream(dir_ / "ref.json")
        << R"({"tokens": [1, 5, 9, 200, 17, 33, 2, 8, 99, 100, 101, 7, 3, 64, 12, 250]})";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (model_.empty()) GTEST_FAIL() << "gen-model failed";
  }

  // A long generation in 2 stages with `sig` sent to stage 1 while it decodes.
  Ended signal_stage(int sig) {
    return sluice::test::signal_rank_1(
        "run -t 1 -c 4096 -n 4000 --ignore-eos -p hello --temp 0 --stage-timeout 3 -m " + model_,
        dir_ / ("pids-" + std::to_string(sig)), sig);
  }

  static inline fs::path dir_;
  static inline std::string model_;
};

TEST_F(PipelineMpiModel, EachStageStreamsUnderItsOwnCgroupLimit) {
  const fs::path cg_root = "/sys/fs/cgroup/memory";
  const std::string tag = "sluice-mpi-" + std::to_string(getpid());
  std::error_code ec;
  if (!fs::exists(cg_root / "memory.limit_in_bytes"))
    GTEST_SKIP() << "no cgroup v1 memory controller";
  constexpr uint64_t kLimit = 96ull << 20;  // each stage; the file is ~240 MB
  for (int r = 0; r < 2; ++r) {
    const fs::path cg = cg_root / (tag + "-" + std::to_string(r));
    if (!fs::create_directory(cg, ec)) GTEST_SKIP() << "cannot create cgroup " << cg;
    std::ofstream(cg / "memory.limit_in_bytes") << kLimit;
  }
  const std::string args =
      "logits -t 1 --greedy 4 -m " + model_ + " --tokens-from " + (dir_ / "ref.json").string();
  // Out of the page cache, so each stage's pages are charged to its own cgroup.
  const int fd = ::open(model_.c_str(), O_RDONLY);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  ShellResult s =
      sh(mpirun(2,
                args + " --experts stream --ssd-streaming-cache-experts 24MB -o " +
                    (dir_ / "stream.json").string(),
                "echo $$ > " + (cg_root / tag).string() + "-$OMPI_COMM_WORLD_RANK/cgroup.procs;"));
  uint64_t peak[2];
  for (int r = 0; r < 2; ++r) {
    const fs::path cg = cg_root / (tag + "-" + std::to_string(r));
    peak[r] = std::stoull(read_file(cg / "memory.max_usage_in_bytes"));
    std::printf("stage %d: peak %.1f MB of a %.1f MB limit\n", r, peak[r] / 1e6, kLimit / 1e6);
    fs::remove(cg, ec);
  }
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_LE(peak[0], kLimit);
  EXPECT_LE(peak[1], kLimit);
  ShellResult a = sh(std::string(SLUICE_BIN) + " " + args + " --experts ram -o " +
                     (dir_ / "ram.json").string());
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(read_file(dir_ / "stream.json"), read_file(dir_ / "ram.json"));
}

// `run` in 2 stages: both ranks print their summary, and neither reports drafts (a pipeline
// verifies none) nor a step count of 0 (rank 1 printed "8 tokens in 0 forward passes").
TEST(PipelineMpiRun, StagesReportNoDraftsAndNoEmptyStepCount) {
  const std::string model = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";
  const ShellResult r = sh(mpirun(2, "run -t 1 -m " + model + " -p 'In the beginning' -n 8 --temp 0"));
  ASSERT_EQ(r.status, 0) << r.out;
  size_t decodes = 0;
  for (size_t at = r.out.find("decode: 8 tokens"); at != std::string::npos; at = r.out.find("decode: 8 tokens", at + 1))
    ++decodes;
  EXPECT_EQ(decodes, 2u) << r.out;
  EXPECT_EQ(r.out.find("forward passes"), std::string::npos) << r.out;
}

TEST_F(PipelineMpiModel, StoppedStageFailsTheJobNamingIt) {
  sluice::test::expect_failed_naming(signal_stage(SIGSTOP), {"stage 1 (rank 1 on", "stopped responding"});
}

// mpirun reports the dead process by rank; the plan printed at start maps rank 1 to stage 1.
TEST_F(PipelineMpiModel, KilledStageEndsTheJobWithinTenSeconds) {
  sluice::test::expect_failed_naming(signal_stage(SIGKILL), {"rank 1", "stage 1: rank 1 on"});
}

}  // namespace
