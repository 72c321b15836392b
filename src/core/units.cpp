// Byte-size parsing and formatting.
#include "core/units.h"

#include <cctype>
#include <cmath>
#include <string>

#include "core/error.h"

namespace sluice {

uint64_t parse_byte_size(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number(text.substr(0, i));
  std::string unit(text.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.'))
    fail("{}: '{}' is not a size (examples: 4GB, 512MiB, 1073741824)", what, text);
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
  else fail("{}: unknown unit '{}' in '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", what, unit, text);
  double bytes = value * mult;
  if (!(bytes >= 0) || bytes > 1.8e19) fail("{}: '{}' is out of range", what, text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace sluice
