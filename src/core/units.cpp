// Byte-size parsing and formatting.
#include "core/units.h"

#include <cctype>
#include <cmath>
#include <string>

#include "core/error.h"

namespace sluice {

namespace {

// The value of `text`, or why it is not a size (`why` non-empty).
uint64_t byte_size(std::string_view text, std::string& why) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number(text.substr(0, i));
  std::string unit(text.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    why = fmt::format("'{}' is not a size (examples: 4GB, 512MiB, 1073741824)", text);
    return 0;
  }
  double value = std::stod(number);
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "tb") mult = 1e12;
  else {
    why = fmt::format("unknown unit '{}' in '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", unit, text);
    return 0;
  }
  double bytes = value * mult;
  if (!(bytes >= 0) || bytes > 1.8e19) {
    why = fmt::format("'{}' is out of range", text);
    return 0;
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace

uint64_t parse_byte_size(std::string_view text, std::string_view what) {
  std::string why;
  const uint64_t bytes = byte_size(text, why);
  if (!why.empty()) fail("{}: {}", what, why);
  return bytes;
}

std::string byte_size_error(std::string_view text) {
  std::string why;
  byte_size(text, why);
  return why;
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace sluice
