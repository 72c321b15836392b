// Helpers shared by tests: paths to shared test data and scratch files, a shell command's output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

namespace sluice::test {

inline std::string testdata(const std::string& rel) { return std::string(SLUICE_TESTDATA) + "/" + rel; }

// A fresh scratch directory per test binary run, removed by the OS tmp cleaner, not by us, so a
// failing test leaves its files for inspection.
inline std::filesystem::path scratch_dir() {
  static std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("sluice-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Runs `cmd` through the shell; its exit status (-1 when it did not exit) and stdout + stderr.
struct ShellResult {
  int status;
  std::string out;
};
inline ShellResult sh(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// A whole file as text (empty when it cannot be read).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace sluice::test
