// `--split-mode experts` from the command line, without mpirun: inspect's expert-parallel plan
// (each host's share of the experts, its replicas and its budget; placement from the heat profile
// when one was saved) and the errors for a split that cannot run. tests/mpi runs the split itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>

#include "../unit/test_util.h"

namespace fs = std::filesystem;

namespace {

using sluice::test::sh;
using sluice::test::ShellResult;

const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-moe-128.gguf";

std::string bin(const fs::path& heat_dir) {
  return "SLUICE_HEAT_DIR=" + heat_dir.string() + " " + SLUICE_BIN;
}

TEST(ExpertsSplitCli, InspectPlansEachHostsShareRoundRobinThenFromTheHeatProfile) {
  const fs::path heat = fs::temp_directory_path() / ("sluice-epcli-" + std::to_string(getpid()));
  fs::create_directories(heat);
  const std::string inspect = bin(heat) + " inspect -m " + kModel + " --plan 2 --experts-split --ram 60MB";
  ShellResult r = sh(inspect);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dealt round-robin (no heat profile)"), std::string::npos) << r.out;
  // 8 layers × 128 experts, half each; the routed bytes each host holds are half the file's.
  EXPECT_NE(r.out.find("| 0 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1 | "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| 2 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("512 (50.0 %)"), std::string::npos) << r.out;

  // A streamed run saves the heat profile; the next plan balances its load (hot experts spread).
  ShellResult run = sh(bin(heat) + " run -m " + kModel +
                       " --experts stream -n 24 --temp 0 -p 'In the beginning God created'");
  ASSERT_EQ(run.status, 0) << run.out;
  r = sh(inspect);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("placed by the heat profile's load"), std::string::npos) << r.out;
  const std::regex share(R"(rank (\d): 512 experts \(50\.0 %\), ([0-9.]+) % of the profiled load)");
  int ranks = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), share); it != std::sregex_iterator(); ++it) {
    ++ranks;
    const double load = std::stod((*it)[2]);
    EXPECT_GT(load, 45.0) << r.out;
    EXPECT_LT(load, 55.0) << r.out;
  }
  EXPECT_EQ(ranks, 2) << r.out;
  fs::remove_all(heat);
}

// Replicas: 4 per layer on each of 2 hosts (8 layers: 32 each, 53.1 % of the experts held); auto
// takes an eighth of the 128 (16 per layer) where the budget holds them in RAM with room to spare,
// and none where it would not.
TEST(ExpertsSplitCli, InspectShowsEachHostsReplicas) {
  const fs::path heat = fs::temp_directory_path() / ("sluice-eprep-" + std::to_string(getpid()));
  fs::create_directories(heat);
  const std::string inspect = bin(heat) + " inspect -m " + kModel + " --plan 2 --experts-split";
  ShellResult r = sh(inspect + " --ram 1GB --expert-replicas 4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("rank 0: 512 experts (50.0 %) and 32 replicas (53.1 % held)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 512 (50.0 %) | 32 |"), std::string::npos) << r.out;
  r = sh(inspect + " --ram 1GB");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--expert-replicas auto: 16 per layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("and 128 replicas (62.5 % held)"), std::string::npos) << r.out;
  r = sh(inspect + " --ram 60MB");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--expert-replicas auto: none"), std::string::npos) << r.out;
  fs::remove_all(heat);
}

TEST(ExpertsSplitCli, SplitsThatCannotRunArePreciseErrors) {
  ShellResult r = sh(std::string(SLUICE_BIN) + " run -m " + kModel + " -p hi -n 2 --split-mode experts");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--split-mode experts needs an MPI job of several processes"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " run -m " + kModel + " -p hi -n 2 -sm row");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--split-mode"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " inspect -m " + kModel + " --experts-split");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--experts-split needs --plan N"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " inspect -m " + kModel + " --plan 200 --experts-split");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("200 processes for 128 experts per layer"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " run -m " + kModel + " -p hi -n 2 --expert-replicas many");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'many' is neither auto nor a count of experts per layer"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " run -m " + kModel + " -p hi -n 2 --expert-replicas 4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--expert-replicas 4: replicas are for --split-mode experts"), std::string::npos) << r.out;
  r = sh(std::string(SLUICE_BIN) + " inspect -m " + kModel + " --plan 2 --experts-split --expert-replicas 65");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--expert-replicas 65: a process can hold at most 64 replicas per layer"), std::string::npos) << r.out;
}

}  // namespace
