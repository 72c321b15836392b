// GBNF parser (see gbnf.h): a recursive descent over the text that follows llama.cpp's grammar
// rules for spaces, newlines, escapes and repetition, building expressions instead of rewriting
// repetitions into helper rules (the automaton compiler expands them).
#include "grammar/gbnf.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

std::string source_position(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

std::vector<CodeRange> any_char() {
  return {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
}

namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> r, bool negate) {
  std::sort(r.begin(), r.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> merged;
  for (const CodeRange& x : r) {
    if (!merged.empty() && x.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, x.hi);
    else
      merged.push_back(x);
  }
  if (!negate) return merged;
  std::vector<CodeRange> out;
  for (const CodeRange& any : any_char()) {
    uint32_t next = any.lo;
    for (const CodeRange& x : merged) {
      if (x.hi < next || x.lo > any.hi) continue;
      if (x.lo > next) out.push_back({next, x.lo - 1});
      next = std::max(next, x.hi + 1);
      if (next > any.hi) break;
    }
    if (next <= any.hi) out.push_back({next, any.hi});
  }
  return out;
}

std::vector<CodeRange> subtract_ranges(const std::vector<CodeRange>& a,
                                       const std::vector<CodeRange>& b) {
  // a ∩ complement(b)
  const std::vector<CodeRange> keep = normalize_ranges(b, true);
  std::vector<CodeRange> out;
  for (const CodeRange& x : normalize_ranges(a, false))
    for (const CodeRange& k : keep) {
      const uint32_t lo = std::max(x.lo, k.lo), hi = std::min(x.hi, k.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return normalize_ranges(std::move(out), false);
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) { g_.source = std::string(text); }

  Grammar run() {
    skip_space(true);
    while (i_ < s_.size()) parse_rule();
    for (const Rule& r : g_.rules)
      if (!r.defined)
        error(first_use_[r.name], fmt::format("rule '{}' is used but never defined", r.name));
    const auto root = ids_.find("root");
    if (root == ids_.end() || !g_.rules[root->second].defined)
      error(s_.size(), "the grammar has no 'root' rule (generation starts there)");
    g_.root = root->second;
    return std::move(g_);
  }

 private:
  [[noreturn]] void error(size_t pos, const std::string& why) const {
    fail("grammar: {}: {}", source_position(s_, pos), why);
  }

  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }

  // Spaces, tabs and comments; newlines too when `newline_ok` (inside parentheses, after `|`).
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && is_word_char(peek())) ++i_;
    if (i_ == start) error(start, describe_here("a rule name"));
    return std::string(s_.substr(start, i_ - start));
  }

  std::string describe_here(const std::string& what) const {
    if (at_end()) return fmt::format("expected {}, found the end of the text", what);
    const size_t n = utf8::seq_len(static_cast<unsigned char>(peek()));
    std::string c(s_.substr(i_, std::min(n, s_.size() - i_)));
    if (c == "\n") c = "\\n";
    if (c == "\r") c = "\\r";
    return fmt::format("expected {}, found '{}'", what, c);
  }

  int rule_id(const std::string& name, size_t pos) {
    auto [it, added] = ids_.emplace(name, static_cast<int>(g_.rules.size()));
    if (added) {
      g_.rules.push_back({name, {}, pos, false});
      first_use_[name] = pos;
    }
    return it->second;
  }

  void parse_rule() {
    const size_t start = i_;
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") error(i_, describe_here(fmt::format("'::=' after '{}'", name)));
    i_ += 3;
    skip_space(true);
    const int id = rule_id(name, start);
    if (g_.rules[id].defined)
      error(start, fmt::format("rule '{}' is defined twice (first at {})", name,
                               source_position(s_, g_.rules[id].pos)));
    Expr body = parse_alternates(false);
    Rule& r = g_.rules[id];
    r.body = std::move(body);
    r.pos = start;
    r.defined = true;
    if (peek() == '\r') ++i_;
    if (peek() == '\n')
      ++i_;
    else if (!at_end())
      error(i_, describe_here("a newline or the end of the rule"));
    skip_space(true);
  }

  Expr parse_alternates(bool nested) {
    Expr alt;
    alt.kind = Expr::Kind::kAlt;
    alt.pos = i_;
    alt.items.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++i_;
      skip_space(true);
      alt.items.push_back(parse_sequence(nested));
    }
    if (alt.items.size() == 1) return std::move(alt.items[0]);
    return alt;
  }

  Expr parse_sequence(bool nested) {
    Expr seq;
    seq.kind = Expr::Kind::kSeq;
    seq.pos = i_;
    for (;;) {
      const char c = peek();
      const size_t at = i_;
      if (c == '"') {
        ++i_;
        Expr lit;
        lit.kind = Expr::Kind::kLiteral;
        lit.pos = at;
        while (peek() != '"') {
          if (at_end()) error(at, "this literal is not closed (expected '\"')");
          lit.text.push_back(parse_char());
        }
        ++i_;
        seq.items.push_back(std::move(lit));
      } else if (c == '[') {
        seq.items.push_back(parse_class());
      } else if (is_word_char(c)) {
        Expr ref;
        ref.kind = Expr::Kind::kRef;
        ref.pos = at;
        ref.rule = rule_id(parse_name(), at);
        seq.items.push_back(std::move(ref));
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        Expr group = parse_alternates(true);
        if (peek() != ')')
          error(i_, describe_here(fmt::format("')' closing the group opened at {}",
                                              source_position(s_, at))));
        ++i_;
        seq.items.push_back(std::move(group));
      } else if (c == '.') {
        ++i_;
        Expr any;
        any.kind = Expr::Kind::kClass;
        any.pos = at;
        any.ranges = any_char();
        seq.items.push_back(std::move(any));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.items.empty()) error(at, fmt::format("'{}' has nothing before it to repeat", c));
        int min = 0, max = -1;
        ++i_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') parse_counts(at, min, max);
        Expr rep;
        rep.kind = Expr::Kind::kRepeat;
        rep.pos = at;
        rep.min = min;
        rep.max = max;
        rep.items.push_back(std::move(seq.items.back()));
        seq.items.back() = std::move(rep);
      } else {
        break;
      }
      skip_space(nested);
    }
    if (seq.items.empty()) {
      seq.kind = Expr::Kind::kEmpty;
      return seq;
    }
    if (seq.items.size() == 1) return std::move(seq.items[0]);
    return seq;
  }

  // {m}, {m,}, {m,n} and {,n}; `at` is the '{'.
  void parse_counts(size_t at, int& min, int& max) {
    skip_space(false);
    auto number = [&]() {
      const size_t start = i_;
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > kMaxRepetition)
          error(start, fmt::format("a repetition count may be at most {}", kMaxRepetition));
        ++i_;
      }
      if (i_ == start) error(i_, describe_here("a count"));
      return static_cast<int>(v);
    };
    if (peek() != ',') min = number();
    skip_space(false);
    if (peek() == '}') {
      max = min;
    } else if (peek() == ',') {
      ++i_;
      skip_space(false);
      max = peek() == '}' ? -1 : number();
      skip_space(false);
      if (peek() != '}') error(i_, describe_here("'}'"));
    } else {
      error(i_, describe_here("',' or '}'"));
    }
    ++i_;
    if (max >= 0 && max < min)
      error(at, fmt::format("repetition {{{},{}}} has a maximum below its minimum", min, max));
  }

  Expr parse_class() {
    Expr cls;
    cls.kind = Expr::Kind::kClass;
    cls.pos = i_;
    ++i_;
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++i_;
    }
    std::vector<CodeRange> ranges;
    while (peek() != ']') {
      if (at_end()) error(cls.pos, "this character class is not closed (expected ']')");
      const size_t at = i_;
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
        ++i_;
        hi = parse_char();
        if (hi < lo) error(at, "this range ends before it starts");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    cls.ranges = normalize_ranges(std::move(ranges), negate);
    return cls;
  }

  uint32_t parse_hex(int digits) {
    const size_t start = i_;
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      if (d < 0) error(start, fmt::format("expected {} hex digits after the escape", digits));
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 character.
  uint32_t parse_char() {
    const size_t at = i_;
    uint32_t cp = 0;
    if (peek() == '\\') {
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case 'x':
          cp = parse_hex(2);
          break;
        case 'u':
          cp = parse_hex(4);
          break;
        case 'U':
          cp = parse_hex(8);
          break;
        case 't':
          cp = '\t';
          break;
        case 'r':
          cp = '\r';
          break;
        case 'n':
          cp = '\n';
          break;
        case '\\':
        case '"':
        case '[':
        case ']':
          cp = static_cast<unsigned char>(e);
          break;
        default:
          error(at, fmt::format("unknown escape '\\{}'",
                                e == '\0' ? std::string() : std::string(1, e)));
      }
    } else {
      const size_t n = utf8::valid_char_len(s_, i_);
      if (n == 0) error(at, "the text is not valid UTF-8 here");
      cp = utf8::decode_at(s_, i_, n);
      i_ += n;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      error(at, fmt::format("U+{:04X} is not a Unicode scalar value (UTF-8 cannot hold it)", cp));
    return cp;
  }

  std::string_view s_;
  size_t i_ = 0;
  Grammar g_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<std::string, size_t> first_use_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) {
  return Parser(text).run();
}

}  // namespace sluice::grammar
