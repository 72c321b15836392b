// Memory detection: the /proc and cgroup parsers on fixture text, and the whole reader on fake
// /proc + /sys/fs/cgroup trees for cgroup v2, v1 and hybrid layouts, nested limits and missing files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/meminfo.h"
#include "test_util.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

constexpr const char* kProcMeminfo =
    "MemTotal:       24683548 kB\n"
    "MemFree:        23236424 kB\n"
    "MemAvailable:   24181892 kB\n"
    "Buffers:           13436 kB\n";

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

fs::path fresh_root(const std::string& name) {
  fs::path r = test::scratch_dir() / ("meminfo-" + name);
  fs::remove_all(r);
  fs::create_directories(r);
  return r;
}

}  // namespace

TEST(MemInfoParse, ProcMeminfo) {
  MemInfo m;
  parse_proc_meminfo(kProcMeminfo, m);
  EXPECT_EQ(m.mem_total, 24683548ull * 1024);
  EXPECT_EQ(m.mem_available, 24181892ull * 1024);
}

TEST(MemInfoParse, ProcMeminfoWithoutMemAvailableOrGarbage) {
  MemInfo m;
  parse_proc_meminfo("MemTotal: 1000 kB\nMemFree: 12 kB", m);
  EXPECT_EQ(m.mem_total, 1024000u);
  EXPECT_FALSE(m.mem_available);
  MemInfo bad;
  parse_proc_meminfo("MemTotal: lots\nMemAvailable: 12 MB\nMemAvailable", bad);
  EXPECT_FALSE(bad.mem_total);
  EXPECT_FALSE(bad.mem_available);
  MemInfo overflow;
  parse_proc_meminfo("MemTotal: 99999999999999999999 kB\n", overflow);
  EXPECT_FALSE(overflow.mem_total);
}

TEST(MemInfoParse, StatusRss) {
  EXPECT_EQ(parse_status_rss("Name:\tx\nVmPeak:\t 9 kB\nVmRSS:\t    2012 kB\nThreads: 1\n"), 2012u * 1024);
  EXPECT_FALSE(parse_status_rss("Name:\tx\n"));
}

TEST(MemInfoParse, CgroupValues) {
  EXPECT_EQ(parse_cgroup_value("8589934592\n"), 8589934592ull);
  EXPECT_FALSE(parse_cgroup_value("max\n"));
  EXPECT_FALSE(parse_cgroup_value("9223372036854771712\n"));  // v1 unlimited, 4 KiB pages
  EXPECT_FALSE(parse_cgroup_value("9223372036854710272"));    // v1 unlimited, 64 KiB pages
  EXPECT_FALSE(parse_cgroup_value(""));
  EXPECT_FALSE(parse_cgroup_value("12abc"));
  EXPECT_FALSE(parse_cgroup_value("-1"));
}

TEST(MemInfoParse, ProcSelfCgroup) {
  auto v2 = parse_proc_self_cgroup("0::/user.slice/session-1.scope\n");
  EXPECT_EQ(v2.v2, "/user.slice/session-1.scope");
  EXPECT_FALSE(v2.v1);
  auto hybrid = parse_proc_self_cgroup(
      "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/fed8\n3:cpuset:/\n0::/\n");
  EXPECT_EQ(hybrid.v1, "/process_api/fed8");
  EXPECT_EQ(hybrid.v2, "/");
  auto combined = parse_proc_self_cgroup("5:cpu,memory,blkio:/docker/abc:def\n");
  EXPECT_EQ(combined.v1, "/docker/abc:def");
  auto none = parse_proc_self_cgroup("garbage\n3:cpuset:/\n");
  EXPECT_FALSE(none.v1);
  EXPECT_FALSE(none.v2);
}

TEST(MemInfoAvailable, MinOfCgroupHeadroomAndMemAvailable) {
  MemInfo m;
  EXPECT_FALSE(m.available_bytes());
  m.mem_available = 1000;
  EXPECT_EQ(m.available_bytes(), 1000u);
  m.cgroup_limit = 800;
  m.cgroup_usage = 300;
  EXPECT_EQ(m.available_bytes(), 500u);
  m.cgroup_usage = 900;  // over the limit: no headroom, not a wrapped huge number
  EXPECT_EQ(m.available_bytes(), 0u);
  m.cgroup_limit = 5000;
  m.cgroup_usage = 100;
  EXPECT_EQ(m.available_bytes(), 1000u);
  MemInfo only_cg;
  only_cg.cgroup_limit = 64;
  EXPECT_EQ(only_cg.available_bytes(), 64u);
}

TEST(MemInfoRead, CgroupV2NestedLimitBinds) {
  fs::path r = fresh_root("v2");
  put(r / "proc/meminfo", kProcMeminfo);
  put(r / "proc/self/status", "VmRSS:\t 4096 kB\n");
  put(r / "proc/self/cgroup", "0::/a/b\n");
  put(r / "sys/fs/cgroup/cgroup.controllers", "memory\n");
  put(r / "sys/fs/cgroup/a/memory.max", "2147483648\n");
  put(r / "sys/fs/cgroup/a/memory.current", "1073741824\n");
  put(r / "sys/fs/cgroup/a/b/memory.max", "max\n");
  put(r / "sys/fs/cgroup/a/b/memory.current", "5000\n");
  MemInfo m = read_meminfo_at(r.string());
  EXPECT_EQ(m.cgroup_version, 2);
  EXPECT_EQ(m.cgroup_limit, 2147483648ull);
  EXPECT_EQ(m.cgroup_usage, 1073741824ull);
  EXPECT_EQ(m.rss, 4096u * 1024);
  EXPECT_EQ(m.available_bytes(), 1073741824ull);
}

TEST(MemInfoRead, CgroupV1HybridWithUnlimitedValue) {
  fs::path r = fresh_root("v1");
  put(r / "proc/meminfo", "MemTotal: 4096 kB\nMemAvailable: 2048 kB\n");
  put(r / "proc/self/cgroup", "4:memory:/job/7\n0::/\n");
  put(r / "sys/fs/cgroup/unified/cgroup.controllers", "");
  put(r / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  put(r / "sys/fs/cgroup/memory/job/7/memory.limit_in_bytes", "1048576\n");
  put(r / "sys/fs/cgroup/memory/job/7/memory.usage_in_bytes", "524288\n");
  MemInfo m = read_meminfo_at(r.string());
  EXPECT_EQ(m.cgroup_version, 1);
  EXPECT_EQ(m.cgroup_limit, 1048576u);
  EXPECT_EQ(m.available_bytes(), 524288u);

  // Unlimited everywhere: no cgroup limit, MemAvailable decides.
  put(r / "sys/fs/cgroup/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n");
  MemInfo u = read_meminfo_at(r.string());
  EXPECT_EQ(u.cgroup_version, 0);
  EXPECT_FALSE(u.cgroup_limit);
  EXPECT_EQ(u.available_bytes(), 2048u * 1024);
}

TEST(MemInfoRead, MissingEverythingLeavesFieldsUnset) {
  fs::path r = fresh_root("empty");
  MemInfo m = read_meminfo_at(r.string());
  EXPECT_FALSE(m.mem_total);
  EXPECT_FALSE(m.mem_available);
  EXPECT_FALSE(m.cgroup_limit);
  EXPECT_FALSE(m.rss);
  EXPECT_EQ(m.cgroup_version, 0);
  EXPECT_FALSE(m.available_bytes());
  EXPECT_NO_THROW(read_meminfo_at((r / "does-not-exist").string()));
}

TEST(MemInfoRead, LiveSystemReportsSomething) {
  MemInfo m = read_meminfo();
  ASSERT_TRUE(m.mem_total);
  ASSERT_TRUE(m.available_bytes());
  EXPECT_LE(*m.available_bytes(), *m.mem_total);
  ASSERT_TRUE(m.rss);
  EXPECT_GT(*m.rss, 0u);
}
