// Logging to stderr with a global level. Diagnostics (expert misses, timings) go through here so
// that stdout carries only generated text or machine-readable output.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace sluice {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);

template <typename... Args>
void log_at(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level > log_level()) return;
  std::string line = fmt::format(f, std::forward<Args>(args)...);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

#define SLUICE_LOG_INFO(...) ::sluice::log_at(::sluice::LogLevel::kInfo, __VA_ARGS__)
#define SLUICE_LOG_WARN(...) ::sluice::log_at(::sluice::LogLevel::kWarn, __VA_ARGS__)
#define SLUICE_LOG_DEBUG(...) ::sluice::log_at(::sluice::LogLevel::kDebug, __VA_ARGS__)

}  // namespace sluice
