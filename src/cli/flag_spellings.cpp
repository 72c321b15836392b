// llama.cpp's multi-letter short flags rewritten to long names, and the unknown-flag check.
#include "cli/flag_spellings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace sluice::cli {

namespace {

// llama.cpp's spellings that CLI11 cannot declare (several letters after one dash). An alias
// applies only where the command declares its target; elsewhere it is an unknown flag.
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"-np", "--parallel"},       {"-sys", "--system"},         {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},  {"-ngl", "--n-gpu-layers"},   {"-fa", "--flash-attn"},
    {"-ub", "--ubatch-size"},    {"-tb", "--threads-batch"},   {"-ot", "--override-tensor"},
    {"-hf", "--hf-repo"},        {"-hfr", "--hf-repo"},        {"-hff", "--hf-file"},
    {"-sm", "--split-mode"}};

// -fa's value is optional in llama.cpp (older builds: a bare flag meaning on).
constexpr std::string_view kFlashAttnValues[] = {"on", "off", "auto", "1", "0"};

bool is_number(std::string_view s) {
  if (s.size() < 2 || s[0] != '-') return false;
  char* end = nullptr;
  const std::string text(s);
  std::strtod(text.c_str(), &end);
  return end && *end == '\0';
}

bool takes_value(const CLI::Option& o) { return o.get_type_size_max() > 0 && o.get_items_expected_max() > 0; }

[[noreturn]] void unknown_flag(const CLI::App& app, const std::string& typed) {
  std::vector<std::string> known;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& n : o->get_lnames()) known.push_back("--" + n);
    for (const auto& n : o->get_snames()) known.push_back("-" + n);
  }
  for (const auto& [from, to] : kAliases)
    if (app.get_option_no_throw(std::string(to))) known.emplace_back(from);
  const std::string name = typed.substr(0, typed.find('='));
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    // A flag cut short or run on (--temperature for --temp) is nearer than any other spelling.
    const bool stem = k.size() > 2 && name.size() > 2 && (name.starts_with(k) || k.starts_with(name));
    if (const size_t d = stem ? 1 : edit_distance(name, k); d < best_d) best_d = d, best = k;
  }
  throw CLI::ValidationError(name, best.empty() ? std::string("unknown flag")
                                                : fmt::format("unknown flag; did you mean {}?", best));
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

CommandLine::CommandLine(const CLI::App& app, int argc, char** argv) {
  args_.assign(argv, argv + argc);
  for (size_t i = 1; i < args_.size(); ++i) {
    std::string& a = args_[i];
    if (a == "--") break;  // the rest are positional
    if (a.size() < 2 || a[0] != '-' || is_number(a)) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (name[1] != '-' && name.size() > 2) {
      const auto alias = std::find_if(std::begin(kAliases), std::end(kAliases), [&](auto& p) { return p.first == name; });
      if (alias != std::end(kAliases) && app.get_option_no_throw(std::string(alias->second))) {
        a = std::string(alias->second) + (eq == std::string::npos ? "" : a.substr(eq));
      } else {
        // CLI11 would read -n64 as -n 64: allowed for a one-letter option given a number, since
        // that is unambiguous; any other run of letters is a flag name nobody declared.
        const CLI::Option* o = app.get_option_no_throw(a.substr(0, 2));
        if (o && takes_value(*o) && is_number("-" + a.substr(2))) continue;
        unknown_flag(app, a);
      }
    }
    const std::string long_name = a.substr(0, a.find('='));
    const CLI::Option* o = app.get_option_no_throw(long_name);
    if (!o) unknown_flag(app, a);
    if (long_name == "--flash-attn" && a.find('=') == std::string::npos) {
      const bool valued = i + 1 < args_.size() &&
                          std::find(std::begin(kFlashAttnValues), std::end(kFlashAttnValues), args_[i + 1]) !=
                              std::end(kFlashAttnValues);
      a += "=" + (valued ? args_[i + 1] : std::string("on"));
      if (valued) args_.erase(args_.begin() + static_cast<ptrdiff_t>(i) + 1);
      continue;
    }
    // An option's value may itself begin with a dash (a prompt such as "-x"): not a flag. CLI11
    // would read it as one, so it is attached as --name=VALUE.
    if (takes_value(*o) && a.find('=') == std::string::npos && i + 1 < args_.size()) {
      const std::string& next = args_[i + 1];
      if (next.size() > 1 && next[0] == '-' && !is_number(next) && !o->get_lnames().empty()) {
        a = "--" + o->get_lnames()[0] + "=" + next;
        args_.erase(args_.begin() + static_cast<ptrdiff_t>(i) + 1);
      } else {
        ++i;
      }
    }
  }
  for (auto& s : args_) ptrs_.push_back(s.data());
}

}  // namespace sluice::cli
