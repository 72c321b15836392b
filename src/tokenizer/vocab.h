// The token table every tokenizer model works on: texts, scores and GGUF token types, with a
// text → id index. Kept separate from Tokenizer so the BPE, SPM and WordPiece models can be
// written and tested against a plain table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

// Values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  // Transparent hashing lets lookups take string_view without building a std::string per probe.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> id_of;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = id_of.find(s);
    return it == id_of.end() ? -1 : it->second;
  }
};

// GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE merges work
// on text without spaces or control characters (space → "Ġ", newline → "Ċ").
namespace byte_level {
// UTF-8 of the code point standing for byte b.
const std::string& byte_to_text(uint8_t b);
// Maps each byte of raw to its code point.
std::string encode(std::string_view raw);
// Inverse of encode; false when some character is not in the alphabet (the token is then not a
// byte-level token and callers fall back to its literal text).
bool decode(std::string_view text, std::string* out);
}  // namespace byte_level

}  // namespace sluice
