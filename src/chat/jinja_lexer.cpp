// Jinja lexer (see jinja_lexer.h). Preprocessing rewrites the source the way the reference does
// with regular expressions; an offset map from the rewritten text back to the original keeps
// error positions meaningful after characters were removed.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <string_view>

#include "chat/jinja_value.h"
#include "core/error.h"

namespace sluice::jinja {

const char* tok_name(Tok t) {
  static const char* const names[] = {
      "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
      "OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket",
      "CloseSquareBracket", "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe",
      "AdditiveBinaryOperator", "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator",
      "ComparisonBinaryOperator", "UnaryOperator", "Comment"};
  return names[static_cast<int>(t)];
}

namespace {

// Text plus, for each byte, its offset in the original template.
struct Mapped {
  std::string text;
  std::vector<uint32_t> orig;

  void push(std::string_view s, const uint32_t* offsets) {
    text.append(s);
    orig.insert(orig.end(), offsets, offsets + s.size());
  }
};

bool at_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  char c = s[i - 1];
  if (c == '\n' || c == '\r') return true;
  // U+2028 / U+2029 end lines in JavaScript's multiline regular expressions.
  return i >= 3 && s.compare(i - 3, 2, "\xe2\x80") == 0 && (s[i - 1] == '\xa8' || s[i - 1] == '\xa9');
}

Mapped preprocess(const std::string& source) {
  Mapped m;
  m.text = source;
  m.orig.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) m.orig[i] = static_cast<uint32_t>(i);
  if (!m.text.empty() && m.text.back() == '\n') {
    m.text.pop_back();
    m.orig.pop_back();
  }

  // lstrip_blocks: drop spaces and tabs between a line start and a block or comment opener.
  Mapped a;
  for (size_t i = 0; i < m.text.size();) {
    if (at_line_start(m.text, i)) {
      size_t j = i;
      while (j < m.text.size() && (m.text[j] == ' ' || m.text[j] == '\t')) ++j;
      if (j + 1 < m.text.size() && m.text[j] == '{' &&
          (m.text[j + 1] == '#' || m.text[j + 1] == '%' || m.text[j + 1] == '-')) {
        i = j;
      }
    }
    a.push(std::string_view(m.text).substr(i, 1), &m.orig[i]);
    ++i;
  }

  // trim_blocks: drop the newline right after a block or comment closer.
  Mapped b;
  for (size_t i = 0; i < a.text.size(); ++i) {
    b.push(std::string_view(a.text).substr(i, 1), &a.orig[i]);
    if ((a.text[i] == '#' || a.text[i] == '%' || a.text[i] == '-') && i + 2 < a.text.size() &&
        a.text[i + 1] == '}' && a.text[i + 2] == '\n') {
      b.push("}", &a.orig[i + 1]);
      i += 2;
    }
  }

  // {% generation %} / {% endgeneration %} are transformers markers, not Jinja: remove them,
  // honouring their own `-` modifiers.
  Mapped c;
  const std::string& t = b.text;
  size_t last = 0, pos = 0;
  while ((pos = t.find("{%", pos)) != std::string::npos) {
    size_t p = pos + 2;
    bool lstrip = p < t.size() && t[p] == '-';
    if (lstrip) ++p;
    while (size_t n = js_space_len(t, p)) p += n;
    if (t.compare(p, 3, "end") == 0 && t.compare(p + 3, 10, "generation") == 0) p += 3;
    if (t.compare(p, 10, "generation") != 0) {
      pos += 2;
      continue;
    }
    p += 10;
    while (size_t n = js_space_len(t, p)) p += n;
    bool rstrip = p < t.size() && t[p] == '-';
    if (rstrip) ++p;
    if (t.compare(p, 2, "%}") != 0) {
      pos += 2;
      continue;
    }
    p += 2;
    size_t after = p;
    while (size_t n = js_space_len(t, p)) p += n;
    size_t end = pos;
    while (lstrip && end > last) {
      size_t n = js_space_len_before(t, end);
      if (!n) break;
      end -= n;
    }
    c.push(std::string_view(t).substr(last, end - last), b.orig.data() + last);
    if (!rstrip) c.push(std::string_view(t).substr(after, p - after), b.orig.data() + after);
    last = pos = p;
  }
  c.push(std::string_view(t).substr(last), b.orig.data() + last);
  return c;
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

struct Rule {
  const char* seq;
  Tok type;
};

// Order matters: longer operators before their prefixes, as in the reference's table.
constexpr Rule kRules[] = {
    {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
    {"}}", Tok::CloseExpression}, {"(", Tok::OpenParen}, {")", Tok::CloseParen},
    {"{", Tok::OpenCurlyBracket}, {"}", Tok::CloseCurlyBracket}, {"[", Tok::OpenSquareBracket},
    {"]", Tok::CloseSquareBracket}, {",", Tok::Comma}, {".", Tok::Dot}, {":", Tok::Colon},
    {"|", Tok::Pipe}, {"<=", Tok::ComparisonBinaryOperator}, {">=", Tok::ComparisonBinaryOperator},
    {"==", Tok::ComparisonBinaryOperator}, {"!=", Tok::ComparisonBinaryOperator},
    {"<", Tok::ComparisonBinaryOperator}, {">", Tok::ComparisonBinaryOperator},
    {"+", Tok::AdditiveBinaryOperator}, {"-", Tok::AdditiveBinaryOperator},
    {"~", Tok::AdditiveBinaryOperator}, {"**", Tok::ExponentiationBinaryOperator},
    {"*", Tok::MultiplicativeBinaryOperator}, {"//", Tok::MultiplicativeBinaryOperator},
    {"/", Tok::MultiplicativeBinaryOperator}, {"%", Tok::MultiplicativeBinaryOperator},
    {"=", Tok::Equals},
};

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(preprocess(source)), s_(src_.text) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source.size(); ++i)
      if (source[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
    source_ = &source;
  }

  std::vector<Token> run();

 private:
  [[noreturn]] void error(const std::string& msg, size_t at) const {
    auto [line, col] = position(at);
    fail("chat template line {}, column {}: {}", line, col, msg);
  }

  std::pair<uint32_t, uint32_t> position(size_t at) const {
    uint32_t off = at < src_.orig.size() ? src_.orig[at] : static_cast<uint32_t>(source_->size());
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - 1;
    uint32_t col = 1;
    for (uint32_t i = *it; i < off; ++i)
      if ((static_cast<unsigned char>((*source_)[i]) & 0xc0) != 0x80) ++col;
    return {static_cast<uint32_t>(it - line_starts_.begin() + 1), col};
  }

  void push(Tok type, std::string value, size_t at) {
    auto [line, col] = position(at);
    tokens_.push_back(Token{type, std::move(value), line, col});
  }

  // `len` gives the byte length of the matching character at a position, 0 when it does not match.
  template <typename Len>
  std::string consume_while(Len len) {
    size_t start = pos_;
    while (size_t n = len(pos_)) {
      pos_ += n;
      if (pos_ >= s_.size()) error("Unexpected end of input", pos_);
    }
    return s_.substr(start, pos_ - start);
  }

  std::string consume_string(char quote);
  void strip_trailing_whitespace();
  void skip_leading_whitespace() {
    while (size_t n = js_space_len(s_, pos_)) pos_ += n;
  }

  Mapped src_;
  const std::string& s_;
  const std::string* source_ = nullptr;
  std::vector<uint32_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

std::string Lexer::consume_string(char quote) {
  std::string out;
  while (true) {
    if (pos_ >= s_.size()) error("Unexpected end of input", pos_);
    char c = s_[pos_];
    if (c == quote) break;
    ++pos_;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (pos_ >= s_.size()) error("Unexpected end of input", pos_);
    char e = s_[pos_++];
    if (e == 'x' || e == 'u') {
      size_t n = e == 'x' ? 2 : 4;
      std::string hex = s_.substr(pos_, n);
      if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
        error("Invalid hexadecimal escape sequence: \\" + std::string(1, e) + hex, pos_);
      uint32_t cp = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
      pos_ += n;
      // A \uD8xx\uDCxx pair spells one astral character, as in JavaScript.
      if (cp >= 0xd800 && cp < 0xdc00 && s_.compare(pos_, 2, "\\u") == 0 && pos_ + 6 <= s_.size()) {
        std::string lo = s_.substr(pos_ + 2, 4);
        if (std::all_of(lo.begin(), lo.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
          uint32_t low = static_cast<uint32_t>(std::stoul(lo, nullptr, 16));
          if (low >= 0xdc00 && low < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            pos_ += 6;
          }
        }
      }
      append_utf8(out, cp);
      continue;
    }
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      default: error(std::string("Unexpected escaped character: ") + e, pos_ - 1);
    }
  }
  return out;
}

void Lexer::strip_trailing_whitespace() {
  if (tokens_.empty() || tokens_.back().type != Tok::Text) return;
  auto& v = tokens_.back().value;
  v.resize(js_trim_end(v).size());
  if (v.empty()) tokens_.pop_back();
}

std::vector<Token> Lexer::run() {
  int curly_depth = 0;
  while (pos_ < s_.size()) {
    bool have_last = !tokens_.empty();
    Tok last = have_last ? tokens_.back().type : Tok::Text;

    if (!have_last || last == Tok::CloseStatement || last == Tok::CloseExpression || last == Tok::Comment) {
      size_t end = pos_;
      while (true) {
        end = s_.find('{', end);
        if (end == std::string::npos) {
          end = s_.size();
          break;
        }
        char next = end + 1 < s_.size() ? s_[end + 1] : '\0';
        if (next == '%' || next == '{' || next == '#') break;
        ++end;
      }
      if (end > pos_) {
        push(Tok::Text, s_.substr(pos_, end - pos_), pos_);
        pos_ = end;
        continue;
      }
    }

    if (s_[pos_] == '{') {
      char next = pos_ + 1 < s_.size() ? s_[pos_ + 1] : '\0';
      if (next == '#') {
        size_t open = pos_;
        pos_ += 2;
        bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
        if (strip_before) ++pos_;
        size_t end = s_.find("#}", pos_);
        if (end == std::string::npos) error("Missing end of comment tag", open);
        std::string comment = s_.substr(pos_, end - pos_);
        bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_after) comment.pop_back();
        if (strip_before) strip_trailing_whitespace();
        push(Tok::Comment, std::move(comment), open);
        pos_ = end + 2;
        if (strip_after) skip_leading_whitespace();
        continue;
      }
      if (pos_ + 2 < s_.size() && s_[pos_ + 2] == '-') {
        if (next == '%') {
          strip_trailing_whitespace();
          push(Tok::OpenStatement, "{%", pos_);
          pos_ += 3;
          continue;
        }
        if (next == '{') {
          strip_trailing_whitespace();
          push(Tok::OpenExpression, "{{", pos_);
          curly_depth = 0;
          pos_ += 3;
          continue;
        }
      }
    }

    consume_while([&](size_t p) { return js_space_len(s_, p); });
    char c = s_[pos_];

    if (c == '-' && pos_ + 2 < s_.size() && s_[pos_ + 2] == '}') {
      char next = s_[pos_ + 1];
      if (next == '%' || next == '}') {
        push(next == '%' ? Tok::CloseStatement : Tok::CloseExpression, next == '%' ? "%}" : "}}", pos_);
        pos_ += 3;
        skip_leading_whitespace();
        continue;
      }
    }

    if (c == '-' || c == '+') {
      if (!have_last || last == Tok::Text) error(std::string("Unexpected character: ") + c, pos_);
      bool binary = last == Tok::Identifier || last == Tok::NumericLiteral || last == Tok::StringLiteral ||
                    last == Tok::CloseParen || last == Tok::CloseSquareBracket;
      if (!binary) {
        size_t at = pos_++;
        std::string num = consume_while([&](size_t p) { return size_t{is_digit(s_[p])}; });
        if (!num.empty() && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
          ++pos_;
          num += "." + consume_while([&](size_t p) { return size_t{is_digit(s_[p])}; });
        }
        push(num.empty() ? Tok::UnaryOperator : Tok::NumericLiteral, std::string(1, c) + num, at);
        continue;
      }
    }

    bool matched = false;
    for (const auto& rule : kRules) {
      std::string_view seq(rule.seq);
      if (seq == "}}" && curly_depth > 0) continue;
      if (s_.compare(pos_, seq.size(), seq) != 0) continue;
      push(rule.type, std::string(seq), pos_);
      if (rule.type == Tok::OpenExpression) curly_depth = 0;
      if (rule.type == Tok::OpenCurlyBracket) ++curly_depth;
      if (rule.type == Tok::CloseCurlyBracket) --curly_depth;
      pos_ += seq.size();
      matched = true;
      break;
    }
    if (matched) continue;

    if (c == '\'' || c == '"') {
      size_t at = pos_++;
      std::string str = consume_string(c);
      push(Tok::StringLiteral, std::move(str), at);
      ++pos_;
      continue;
    }
    if (is_digit(c)) {
      size_t at = pos_;
      std::string num = consume_while([&](size_t p) { return size_t{is_digit(s_[p])}; });
      if (last != Tok::Dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
        ++pos_;
        num += "." + consume_while([&](size_t p) { return size_t{is_digit(s_[p])}; });
      }
      push(Tok::NumericLiteral, std::move(num), at);
      continue;
    }
    if (is_word(c)) {
      size_t at = pos_;
      std::string word = consume_while([&](size_t p) { return size_t{is_word(s_[p])}; });
      push(Tok::Identifier, std::move(word), at);
      continue;
    }
    error(std::string("Unexpected character: ") + c, pos_);
  }
  return std::move(tokens_);
}

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace sluice::jinja
