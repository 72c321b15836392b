// GPT-2 byte ↔ unicode mapping. Printable Latin-1 bytes (33..126, 161..172, 174..255) stand for
// themselves; the remaining 68 bytes are assigned code points 256, 257, ... in byte order. Both
// directions are built once, on first use.
#include <array>
#include <unordered_map>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace sluice::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> to_text;
  std::unordered_map<uint32_t, uint8_t> to_byte;  // code point → byte

  Tables() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      to_text[b] = utf8::encode(cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_text(uint8_t b) { return tables().to_text[b]; }

std::string encode(std::string_view raw) {
  const auto& t = tables();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += t.to_text[static_cast<uint8_t>(c)];
  return out;
}

bool decode(std::string_view text, std::string* out) {
  const auto& t = tables();
  out->clear();
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8::valid_char_len(text, i);
    if (n == 0) return false;
    auto it = t.to_byte.find(utf8::decode_at(text, i, n));
    if (it == t.to_byte.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

}  // namespace sluice::byte_level
