// JSON Schema `pattern` (an ECMAScript regular expression, read with the u flag as validators do)
// to GBNF over the string's JSON text: literals, classes with ranges and negation, \d \w \s and
// their negations, `.`, groups (capturing, non-capturing, named), alternation and every
// quantifier (lazy ones match the same strings). Lookaround, backreferences, word boundaries and
// Unicode property escapes have no grammar and are refused by name. A character JSON must escape
// is written escaped.
#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

namespace {

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodeRange> kSpace = {
    {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodeRange> kLineEnds = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

class Regex {
 public:
  Regex(std::string_view p, const std::string& path) : p_(p), path_(path) {}

  std::string run() {
    // Each top-level alternative may be anchored at either end; an open end matches anything.
    const std::string any = "( " + json_chars(any_char()) + " )*";
    std::vector<std::string> alts;
    for (;;) {
      const bool start = eat('^');
      bool end = false;
      std::string seq = sequence(true, &end);
      if (!start) seq = any + " " + seq;
      if (!end) seq += " " + any;
      alts.push_back(seq);
      if (!eat('|')) break;
    }
    if (i_ < p_.size()) error(fmt::format("unmatched '{}'", p_[i_]));
    return join(alts);
  }

 private:
  [[noreturn]] void error(const std::string& why) const {
    fail("json schema: at {}: pattern {}: {} (at offset {})", path_,
         OrderedJson(std::string(p_)).dump(), why, i_);
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : '\0'; }
  bool eat(char c) {
    if (peek() != c || at_end()) return false;
    ++i_;
    return true;
  }

  static std::string join(const std::vector<std::string>& alts) {
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
    return out + " )";
  }

  std::string alternation() {
    std::vector<std::string> alts{sequence(false, nullptr)};
    while (eat('|')) alts.push_back(sequence(false, nullptr));
    return join(alts);
  }

  // Items up to '|', ')' or the end. At the top level a '$' may end it (`end` set).
  std::string sequence(bool top, bool* end) {
    std::string out;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++i_;
        if (top && (at_end() || peek() == '|')) {
          *end = true;
          break;
        }
        error("'$' before the end of the pattern cannot be expressed");
      }
      if (peek() == '^') error("'^' after the start of the pattern cannot be expressed");
      std::string item = atom();
      item += quantifier();
      out += (out.empty() ? "" : " ") + item;
    }
    return out;
  }

  std::string quantifier() {
    std::string q;
    if (eat('*'))
      q = "*";
    else if (eat('+'))
      q = "+";
    else if (eat('?'))
      q = "?";
    else if (peek() == '{') {
      ++i_;
      auto number = [&]() {
        const size_t start = i_;
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9')
          v = std::min<int64_t>(v * 10 + (p_[i_++] - '0'), 1 << 30);
        if (i_ == start) error("a repetition needs a count");
        return v;
      };
      const int64_t min = number();
      int64_t max = min;
      if (eat(',')) max = peek() == '}' ? -1 : number();
      if (!eat('}')) error("a repetition must end with '}'");
      if (max >= 0 && max < min) error("a repetition's maximum is below its minimum");
      if (min > kMaxRepetition)
        error(fmt::format("repetitions above {} are not supported", kMaxRepetition));
      if (max > kMaxRepetition) max = kMaxRepetition;  // fewer repetitions stay valid
      q = fmt::format("{{{},{}}}", min, max < 0 ? "" : std::to_string(max));
    } else {
      return "";
    }
    eat('?');  // lazy: the same strings
    return q;
  }

  std::string atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
          while (!at_end() && peek() != '>') ++i_;
          if (!eat('>')) error("a group name must end with '>'");
        } else {
          error("lookaround assertions cannot be expressed");
        }
      }
      std::string inner = alternation();
      if (!eat(')')) error("missing ')'");
      return inner;
    }
    if (c == '[') return json_chars(char_class());
    if (c == '.') {
      ++i_;
      return json_chars(subtract_ranges(any_char(), kLineEnds));
    }
    if (c == '\\') {
      std::vector<CodeRange> set;
      if (class_escape(set, false)) return json_chars(set);
      error("unreachable");
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
      error(fmt::format("'{}' has nothing to repeat", c));
    if (c == ']' || c == '}') error(fmt::format("a lone '{}' is not allowed", c));
    const uint32_t cp = literal_char();
    return json_chars({{cp, cp}});
  }

  uint32_t literal_char() {
    const size_t n = utf8::valid_char_len(p_, i_);
    if (n == 0) error("the pattern is not valid UTF-8");
    const uint32_t cp = utf8::decode_at(p_, i_, n);
    i_ += n;
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) error("malformed hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // An escape at i_ ('\\'): adds its characters to `set`. `in_class`: \b is a backspace there.
  bool class_escape(std::vector<CodeRange>& set, bool in_class) {
    ++i_;
    if (at_end()) error("the pattern ends with '\\'");
    const char e = p_[i_++];
    auto one = [&](uint32_t cp) { set.push_back({cp, cp}); };
    switch (e) {
      case 'd':
        set.insert(set.end(), kDigit.begin(), kDigit.end());
        return true;
      case 'D':
        for (auto r : normalize_ranges(kDigit, true)) set.push_back(r);
        return true;
      case 'w':
        set.insert(set.end(), kWord.begin(), kWord.end());
        return true;
      case 'W':
        for (auto r : normalize_ranges(kWord, true)) set.push_back(r);
        return true;
      case 's':
        set.insert(set.end(), kSpace.begin(), kSpace.end());
        return true;
      case 'S':
        for (auto r : normalize_ranges(kSpace, true)) set.push_back(r);
        return true;
      case 't':
        one('\t');
        return true;
      case 'n':
        one('\n');
        return true;
      case 'r':
        one('\r');
        return true;
      case 'v':
        one('\v');
        return true;
      case 'f':
        one('\f');
        return true;
      case '0':
        one(0);
        return true;
      case 'x':
        one(hex(2));
        return true;
      case 'u': {
        uint32_t cp;
        if (eat('{')) {
          cp = 0;
          const size_t start = i_;
          while (!at_end() && peek() != '}') cp = cp * 16 + hex(1);
          if (i_ == start || !eat('}') || cp > 0x10FFFF) error("malformed \\u{...} escape");
        } else {
          cp = hex(4);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) error("surrogate escapes are not supported");
        one(cp);
        return true;
      }
      case 'b':
        if (in_class) {
          one('\b');
          return true;
        }
        error("word boundaries (\\b) cannot be expressed");
      case 'B':
        error("word boundaries (\\B) cannot be expressed");
      case 'p':
      case 'P':
        error("Unicode property escapes cannot be expressed");
      case 'k':
        error("backreferences cannot be expressed");
      case 'c':
        error("control escapes (\\c) are not supported");
      default:
        break;
    }
    if (e >= '1' && e <= '9') error("backreferences cannot be expressed");
    // Identity escapes of syntax characters (the only ones the u flag allows).
    if (std::string_view("^$\\.*+?()[]{}|/-").find(e) == std::string_view::npos)
      error(fmt::format("unknown escape '\\{}'", e));
    one(static_cast<unsigned char>(e));
    return true;
  }

  std::vector<CodeRange> char_class() {
    ++i_;  // '['
    const bool negate = eat('^');
    std::vector<CodeRange> set;
    auto single = [&](std::vector<CodeRange>& into) {
      if (peek() == '\\') {
        class_escape(into, true);
      } else {
        const uint32_t cp = literal_char();
        into.push_back({cp, cp});
      }
    };
    while (!eat(']')) {
      if (at_end()) error("missing ']'");
      std::vector<CodeRange> lo;
      single(lo);
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        std::vector<CodeRange> hi;
        single(hi);
        if (lo.size() != 1 || hi.size() != 1 || lo[0].lo != lo[0].hi || hi[0].lo != hi[0].hi)
          error("a class range needs single characters at both ends");
        if (hi[0].lo < lo[0].lo) error("a class range ends before it starts");
        set.push_back({lo[0].lo, hi[0].lo});
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    return normalize_ranges(std::move(set), negate);
  }

  std::string_view p_;
  std::string path_;
  size_t i_ = 0;
};

// A control character as JSON writes it inside a string.
std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    default:
      return fmt::format("\\u{:04x}", cp);
  }
}

}  // namespace

std::string json_chars(const std::vector<CodeRange>& ranges) {
  const std::vector<CodeRange> special = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  std::vector<std::string> alts;
  const std::vector<CodeRange> plain = subtract_ranges(ranges, special);
  if (!plain.empty()) alts.push_back(GbnfWriter::char_class(plain));
  for (const CodeRange& r : normalize_ranges(ranges, false))
    for (uint32_t cp = r.lo; cp <= r.hi && cp <= '\\'; ++cp)
      if (cp < 0x20 || cp == '"' || cp == '\\')
        alts.push_back(GbnfWriter::literal(json_escape(cp)));
  if (alts.empty()) return GbnfWriter::char_class({});
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
  return out + " )";
}

std::string pattern_grammar(std::string_view pattern, const std::string& path) {
  return Regex(pattern, path).run();
}

}  // namespace sluice::grammar
