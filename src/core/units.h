// Human byte sizes: parse "4GB", "512MiB", "1.5G" or plain bytes for flags, and format sizes for
// reports. GB/MB/KB are decimal, GiB/MiB/KiB binary; a bare G/M/K is binary, as memory tools print.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// Throws sluice::Error naming `what` (the flag) and the rejected text.
uint64_t parse_byte_size(std::string_view text, std::string_view what);
// Why `text` is not a byte size, or "" when it is one (for flag validators).
std::string byte_size_error(std::string_view text);
std::string format_bytes(uint64_t bytes);

}  // namespace sluice
