// Command lines as users type them, made into what CLI11 parses. llama.cpp spells many flags as
// several letters after one dash (-ngl, -fa, -ub, -hf); CLI11 reads those as bundles of one-letter
// flags (`-ngl 99` became `-n gl`), so they are rewritten to their long names first. Every other
// flag must be one the command declares: an unknown one is an argument error naming it and the
// nearest known spelling, never a bundle guessed into something else.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace sluice::cli {

class CommandLine {
 public:
  // Rewrites argv[1..argc) for `app` (argv[0]: the command name). Throws CLI::ValidationError
  // naming an unknown flag.
  CommandLine(const CLI::App& app, int argc, char** argv);
  int argc() const { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

// Levenshtein distance: how far a mistyped flag is from a known one.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace sluice::cli
