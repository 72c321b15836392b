// Helpers shared by tests: paths to shared test data and scratch files.
#pragma once

#include <filesystem>
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

}  // namespace sluice::test
