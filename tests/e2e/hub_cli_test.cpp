// sluice against a Hugging Face hub in miniature (tests/e2e/hub_server.py, a real HTTP server on
// 127.0.0.1 serving the listing API, resolve/ redirects with X-Linked-Etag/Size, Range, 401 without
// a token) holding generated GGUFs, split and not: remote inspect reads under 1 % of a 200 MB file
// and prints the local plan; -hf downloads, verifies, runs and then runs from the cache; a cut
// connection resumes; a bad checksum, a missing token and a full disk fail as they should; a model
// another tool put in the cache is found offline, listed and removed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "hub/download.h"
#include "hub/http.h"
#include "../unit/test_util.h"

namespace {

namespace fs = std::filesystem;
using sluice::gguf::Value;

const std::string kSluice = SLUICE_BIN;
const std::string kServer = std::string(SLUICE_SOURCE_DIR) + "/tests/e2e/hub_server.py";

using Result = sluice::test::ShellResult;
using sluice::test::sh;

// The hub server as a child process; stopped when destroyed.
class HubServer {
 public:
  HubServer(const fs::path& root, const std::string& options = "") {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      const std::string cmd = "exec python3 " + kServer + " " + root.string() + " " + options;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    close(fds[0]);
    port_ = std::atoi(line.c_str());
    if (port_ <= 0) throw std::runtime_error("the hub server did not start: '" + line + "'");
  }
  ~HubServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Body bytes the server sent from /cdn so far.
  uint64_t served() const {
    sluice::hub::HttpClient client;
    sluice::hub::HttpRequest req;
    req.url = url() + "/_stats";
    const auto resp = client.send(req);
    return nlohmann::json::parse(resp.body)["bytes"].get<uint64_t>();
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Writes `src` again as `n` split parts PREFIX-0000K-of-0000N.gguf (the tensors divided in order).
void write_split(const fs::path& src, const std::string& prefix, int n) {
  const auto f = sluice::gguf::File::open(src.string());
  const auto& ts = f->tensors();
  for (int k = 0; k < n; ++k) {
    sluice::gguf::Writer w(f->alignment());
    if (k == 0)
      for (const auto& [key, v] : f->metadata()) w.set(key, v);
    w.set("split.no", Value::u16(static_cast<uint16_t>(k)));
    w.set("split.count", Value::u16(static_cast<uint16_t>(n)));
    w.set("split.tensors.count", Value::i32(static_cast<int32_t>(ts.size())));
    for (size_t i = k * ts.size() / n; i < (k + 1) * ts.size() / n; ++i)
      w.add_tensor_bytes(ts[i].name, ts[i].type, std::vector<int64_t>(ts[i].ne.begin(), ts[i].ne.begin() + ts[i].n_dims),
                         ts[i].data);
    char name[64];
    std::snprintf(name, sizeof name, "-%05d-of-%05d.gguf", k + 1, n);
    w.write(prefix + name);
  }
}

// The generated repositories, made once for the suite.
class Hub : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("sluice-hub-test-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(root() / "org/tiny");
    fs::create_directories(root() / "org/split");
    fs::create_directories(root() / "org/big");
    const auto gen = [](const std::string& args, const fs::path& out) {
      const Result r = sh(kSluice + " gen-model -q " + args + " -o " + out.string());
      ASSERT_EQ(r.status, 0) << r.out;
    };
    gen("--preset tiny --seed 1", root() / "org/tiny/tiny-Q4_K_M.gguf");
    gen("--preset tiny --seed 2", root() / "org/tiny/tiny-Q8_0.gguf");
    write_split(root() / "org/tiny/tiny-Q4_K_M.gguf", (root() / "org/split/tiny-Q4_K_M").string(), 3);
    // About 200 MB, nearly all of it routed experts, as a real MoE file is.
    gen("--preset tiny --layers 16 --experts 64", root() / "org/big/big-Q4_K_M.gguf");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path root() { return dir_ / "hub"; }
  // A fresh cache directory per test, and the environment that points sluice at it.
  fs::path cache(const std::string& name) { return dir_ / ("cache-" + name); }
  std::string env(const HubServer& s, const fs::path& cache) {
    return "env -u HF_TOKEN -u HF_HUB_OFFLINE -u HF_HOME HF_ENDPOINT=" + s.url() + " HF_HUB_CACHE=" + cache.string() + " ";
  }
  static fs::path dir_;
};
fs::path Hub::dir_;

// The generated text: the line that starts with the prompt "hi" (the log lines go around it).
std::string text(const std::string& out) {
  const size_t at = out.starts_with("hi") ? 0 : out.find("\nhi");
  if (at == std::string::npos) return "(no text)";
  const size_t from = at == 0 ? 0 : at + 1;
  return out.substr(from, out.find('\n', from) - from);
}

// Every line but the file line and the fetched line: the report itself.
std::string report(const std::string& out) {
  std::string kept;
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = out.find('\n', at);
    const std::string line = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.starts_with("file: ") && !line.starts_with("fetched ")) kept += line + "\n";
    at = end == std::string::npos ? out.size() : end + 1;
  }
  return kept;
}

}  // namespace

TEST_F(Hub, RemoteInspectFetchesUnderOnePercentAndPrintsTheLocalPlan) {
  HubServer s(root());
  const fs::path big = root() / "org/big/big-Q4_K_M.gguf";
  const uint64_t size = fs::file_size(big);
  ASSERT_GT(size, 150u << 20);
  const std::string flags = " --ram 160MiB --disk-rate 1GB";
  const Result local = sh(kSluice + " inspect " + big.string() + flags);
  ASSERT_EQ(local.status, 0) << local.out;
  const Result remote = sh(kSluice + " inspect " + s.url() + "/cdn/org/big/big-Q4_K_M.gguf" + flags);
  ASSERT_EQ(remote.status, 0) << remote.out;
  EXPECT_EQ(report(remote.out), report(local.out));
  EXPECT_NE(remote.out.find("plan (what `run --mem-limit`"), std::string::npos) << remote.out;
  const uint64_t served = s.served();
  std::printf("remote inspect of %llu bytes fetched %llu (%.3f %%)\n", static_cast<unsigned long long>(size),
              static_cast<unsigned long long>(served), 100.0 * static_cast<double>(served) / static_cast<double>(size));
  EXPECT_LT(served, size / 100);
  EXPECT_NE(remote.out.find("fetched "), std::string::npos) << remote.out;

  // -hf: the listing picks the quant (case-insensitive), resolve/ redirects to the bytes.
  const Result hf = sh(env(s, cache("inspect")) + kSluice + " inspect -hf org/big:q4_k_m" + flags);
  ASSERT_EQ(hf.status, 0) << hf.out;
  EXPECT_EQ(report(hf.out), report(local.out));
  EXPECT_LT(s.served(), 2 * (size / 100));
  EXPECT_FALSE(fs::exists(cache("inspect"))) << "inspect downloads nothing";

  // A split model: every part's header, the same tensors as the whole file.
  const Result split = sh(env(s, cache("inspect")) + kSluice + " inspect -hf org/split:Q4_K_M --ram 1GiB");
  ASSERT_EQ(split.status, 0) << split.out;
  EXPECT_NE(split.out.find("3 part(s)"), std::string::npos) << split.out;
  const Result whole = sh(kSluice + " inspect " + (root() / "org/tiny/tiny-Q4_K_M.gguf").string() + " --ram 1GiB");
  EXPECT_EQ(report(split.out), report(whole.out));
}

TEST_F(Hub, DownloadVerifiesRunsAndTheSecondRunDownloadsNothing) {
  HubServer s(root(), "--page 2");  // the split repository's 3 files come in two pages
  const fs::path c = cache("run");
  const std::string run = env(s, c) + kSluice + " run -hf org/tiny:Q4_K_M -p hi -n 4 --temp 0";
  const Result first = sh(run);
  ASSERT_EQ(first.status, 0) << first.out;
  const uint64_t size = fs::file_size(root() / "org/tiny/tiny-Q4_K_M.gguf");
  const uint64_t served = s.served();
  EXPECT_GE(served, size);
  // The hub's layout: the blob named by its sha256, a relative snapshot link, refs/main.
  const std::string sha = sluice::hub::sha256_file(root() / "org/tiny/tiny-Q4_K_M.gguf");
  const fs::path repo = c / "models--org--tiny";
  EXPECT_TRUE(fs::is_regular_file(repo / "blobs" / sha));
  std::string commit;
  std::getline(std::ifstream(repo / "refs/main"), commit);
  EXPECT_EQ(commit, "0123456789abcdef0123456789abcdef01234567");
  const fs::path link = repo / "snapshots" / commit / "tiny-Q4_K_M.gguf";
  ASSERT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), fs::path("../../blobs/" + sha));

  const Result second = sh(run);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_EQ(s.served(), served) << "the second run downloaded again";
  EXPECT_EQ(text(second.out), text(first.out));
  EXPECT_NE(text(first.out), "(no text)") << first.out;

  // Without a tag the repository's quants are listed; a tag it lacks says so too.
  Result r = sh(env(s, c) + kSluice + " run -hf org/tiny -p hi -n 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("its quants: Q4_K_M, Q8_0"), std::string::npos) << r.out;
  r = sh(env(s, c) + kSluice + " pull org/tiny:IQ2_XXS");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("has no IQ2_XXS GGUF; its quants: Q4_K_M, Q8_0"), std::string::npos) << r.out;

  // A split model: all parts, run as one.
  r = sh(env(s, c) + kSluice + " pull org/split:q4_k_m");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tiny-Q4_K_M-00003-of-00003.gguf"), std::string::npos) << r.out;
  r = sh(env(s, c) + kSluice + " run -hf org/split:Q4_K_M -p hi -n 4 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(text(r.out), text(first.out));

  // list: each cached GGUF with its quant and a verdict; rm of one quant leaves the others.
  r = sh(env(s, c) + kSluice + " list --json --ram 1GiB");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto listed = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(listed.size(), 2u) << r.out;
  EXPECT_EQ(listed[0]["model"], "org/split:Q4_K_M");
  EXPECT_EQ(listed[1]["model"], "org/tiny:Q4_K_M");
  EXPECT_EQ(listed[1]["bytes"].get<uint64_t>(), size);
  EXPECT_FALSE(listed[1]["verdict"].get<std::string>().empty());
  r = sh(env(s, c) + kSluice + " rm org/tiny:Q4_K_M");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(repo / "blobs" / sha));
  EXPECT_TRUE(fs::exists(c / "models--org--split"));
  r = sh(env(s, c) + kSluice + " rm org/split");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(c / "models--org--split"));
}

TEST_F(Hub, ACutConnectionResumesAndEndsVerified) {
  HubServer s(root(), "--cut tiny-Q4_K_M");
  const fs::path c = cache("cut");
  const Result r = sh(env(s, c) + kSluice + " pull org/tiny:Q4_K_M");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("resuming"), std::string::npos) << r.out;
  const fs::path src = root() / "org/tiny/tiny-Q4_K_M.gguf";
  const std::string sha = sluice::hub::sha256_file(src);
  EXPECT_EQ(sluice::hub::sha256_file(c / "models--org--tiny/blobs" / sha), sha);
  // Half, then the rest: nothing fetched twice.
  EXPECT_EQ(s.served(), fs::file_size(src));
}

TEST_F(Hub, AnInterruptedDownloadResumesFromWhatIsOnDisk) {
  HubServer s(root());
  const fs::path c = cache("resume");
  const fs::path src = root() / "org/tiny/tiny-Q4_K_M.gguf";
  const std::string sha = sluice::hub::sha256_file(src);
  const uint64_t size = fs::file_size(src);
  // What a download stopped half way leaves (as the hub's own tools write it: one stream).
  fs::create_directories(c / "models--org--tiny/blobs");
  {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> half(size / 2);
    in.read(half.data(), static_cast<std::streamsize>(half.size()));
    std::ofstream(c / "models--org--tiny/blobs" / (sha + ".incomplete"), std::ios::binary).write(half.data(), static_cast<std::streamsize>(half.size()));
  }
  // The progress line (drawn at once here) gives sizes, the rate and, while running, the time left.
  const Result r = sh(env(s, c) + "SLUICE_PROGRESS_DELAY=0 " + kSluice + " pull org/tiny:Q4_K_M");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("downloading tiny-Q4_K_M.gguf: done, 5.89 MiB/5.89 MiB, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/s in "), std::string::npos) << r.out;
  EXPECT_EQ(s.served(), size - size / 2);
  EXPECT_TRUE(fs::is_regular_file(c / "models--org--tiny/blobs" / sha));
  EXPECT_FALSE(fs::exists(c / "models--org--tiny/blobs" / (sha + ".incomplete")));
}

TEST_F(Hub, AnInterruptedParallelDownloadFetchesOnlyTheRangesItLacks) {
  HubServer s(root());
  const fs::path c = cache("ranges");
  const fs::path src = root() / "org/tiny/tiny-Q4_K_M.gguf";
  const std::string sha = sluice::hub::sha256_file(src);
  const uint64_t size = fs::file_size(src), a = size / 4, b = size / 2;
  // What connections stopped mid-way leave: the whole-size file with a hole at [a, b) and the
  // ranges beside it ("begin done end": the first range got to a, the second finished).
  const fs::path blobs = c / "models--org--tiny/blobs";
  fs::create_directories(blobs);
  {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> bytes(size);
    in.read(bytes.data(), static_cast<std::streamsize>(size));
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(a), bytes.begin() + static_cast<std::ptrdiff_t>(b), 0);
    std::ofstream(blobs / (sha + ".incomplete"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size));
    std::ofstream(blobs / (sha + ".incomplete.ranges")) << 0 << ' ' << a << ' ' << b << '\n' << b << ' ' << size << ' ' << size << '\n';
  }
  const Result r = sh(env(s, c) + kSluice + " pull org/tiny:Q4_K_M");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(s.served(), b - a);
  EXPECT_EQ(sluice::hub::sha256_file(blobs / sha), sha);
  EXPECT_FALSE(fs::exists(blobs / (sha + ".incomplete.ranges")));
}

TEST_F(Hub, ABadChecksumAMissingTokenAndAFullDiskFail) {
  {
    HubServer s(root(), "--bad-etag tiny-Q4_K_M");
    const fs::path c = cache("bad");
    const Result r = sh(env(s, c) + kSluice + " run -hf org/tiny:Q4_K_M -p hi -n 1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("differs from the hub's"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the download was removed"), std::string::npos) << r.out;
    for (const auto& e : fs::recursive_directory_iterator(c))
      EXPECT_FALSE(e.is_regular_file()) << "left behind: " << e.path();
  }
  {
    HubServer s(root(), "--token secret");
    const fs::path c = cache("token");
    Result r = sh(env(s, c) + kSluice + " pull org/tiny:Q4_K_M");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("HTTP 401"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("HF_TOKEN"), std::string::npos) << r.out;
    r = sh(env(s, c) + "HF_TOKEN=secret " + kSluice + " pull org/tiny:Q4_K_M");
    EXPECT_EQ(r.status, 0) << r.out;
  }
  {
    // A 4 MiB filesystem for the cache (a private mount namespace), a 200 MB model.
    HubServer s(root());
    const fs::path c = cache("full");
    fs::create_directories(c);
    if (sh("unshare -rm true").status != 0) GTEST_SKIP() << "no mount namespace to make a small filesystem in";
    const Result r = sh("unshare -rm sh -c 'mount -t tmpfs -o size=4m none " + c.string() + " && " + env(s, c) + kSluice +
                        " pull org/big:Q4_K_M'");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("more on disk but"), std::string::npos) << r.out;
    EXPECT_EQ(s.served(), 0u) << "it started downloading";
  }
}

TEST_F(Hub, AModelAnotherToolCachedIsFoundOffline) {
  // The layout the hub's tools write, made by hand: no sluice, no server.
  const fs::path c = cache("offline");
  const fs::path src = root() / "org/tiny/tiny-Q8_0.gguf";
  const std::string sha = sluice::hub::sha256_file(src);
  const fs::path repo = c / "models--other--model";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots/abc123/sub");
  fs::copy_file(src, repo / "blobs" / sha);
  fs::create_symlink("../../../blobs/" + sha, repo / "snapshots/abc123/sub/model-Q8_0.gguf");
  std::ofstream(repo / "refs/main") << "abc123";
  const std::string env = "env -u HF_TOKEN HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HUB_CACHE=" + c.string() + " ";
  Result r = sh(env + kSluice + " run -hf other/model:Q8_0 -p hi -n 4 --temp 0");
  ASSERT_EQ(r.status, 0) << r.out;
  r = sh(env + kSluice + " inspect -hf other/model --ram 1GiB");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("snapshots/abc123/sub/model-Q8_0.gguf"), std::string::npos) << r.out;
  r = sh(env + kSluice + " list");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("other/model:Q8_0"), std::string::npos) << r.out;
  // Offline, what is not cached is an error that says so.
  r = sh(env + kSluice + " run -hf org/tiny:Q4_K_M -p hi");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("HF_HUB_OFFLINE"), std::string::npos) << r.out;
}
