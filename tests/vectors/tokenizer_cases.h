// Reads llama.cpp-style tokenizer cases: NAME.inp holds inputs, each followed by a line
// "__ggml_vocab_test__"; NAME.out holds the expected ids of each input on one line. The reference
// ids come from HF tokenizers with add_special_tokens=False.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace sluice::test {

struct TokCase {
  std::string input;
  std::vector<int32_t> ids;
};

inline std::string slurp_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Empty when either file is missing or the counts disagree (callers assert non-empty).
inline std::vector<TokCase> read_tok_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string raw = slurp_file(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(out_path);
  std::vector<TokCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    if (i >= inputs.size()) return {};
    TokCase c{inputs[i], {}};
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  if (cases.size() != inputs.size()) return {};
  return cases;
}

// Encodes every case (add_special = false, parse_special = false, as the reference did) and
// returns how many matched; mismatches are described in *report.
inline size_t run_tok_cases(const Tokenizer& tok, const std::vector<TokCase>& cases, std::string* report) {
  size_t ok = 0;
  for (const auto& c : cases) {
    const auto got = tok.encode(c.input, false, false);
    if (got == c.ids) {
      ++ok;
      continue;
    }
    *report += fmt::format("  input {:?}\n    want {}\n    got  {}\n", c.input, c.ids, got);
  }
  return ok;
}

}  // namespace sluice::test
