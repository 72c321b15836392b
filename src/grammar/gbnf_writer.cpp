// GBNF writing (see gbnf_writer.h).
#include "grammar/gbnf_writer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

namespace {

// A rule name from free text: letters, digits and '-' (what llama.cpp's parser reads).
std::string sanitize(std::string_view hint) {
  std::string out;
  for (char c : hint) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (word)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || out == "root") out = "r" + out;
  return out.substr(0, 48);
}

// One code point as it may appear inside a literal or class; `cls` also escapes '[', ']', '-'
// and '^', which a class would otherwise read.
std::string escape(uint32_t cp, bool cls) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (cls && (cp == '[' || cp == ']')) return fmt::format("\\{}", static_cast<char>(cp));
  if (cls && (cp == '-' || cp == '^')) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  return utf8::encode(cp);
}

}  // namespace

std::string GbnfWriter::reserve(std::string_view hint) {
  const std::string base = sanitize(hint);
  std::string name = base;
  for (int k = 1; used_.count(name); ++k) name = fmt::format("{}-{}", base, k);
  used_.insert(name);
  rules_.emplace_back(name, "");
  return name;
}

void GbnfWriter::define(const std::string& name, const std::string& body) {
  for (auto& [n, b] : rules_)
    if (n == name) {
      b = body;
      return;
    }
  fail("grammar writer: rule '{}' was never reserved", name);
}

std::string GbnfWriter::rule(std::string_view hint, const std::string& body) {
  if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
  const std::string name = reserve(hint);
  define(name, body);
  by_body_[body] = name;
  return name;
}

std::string GbnfWriter::text(const std::string& root_body) const {
  std::string out = "root ::= " + root_body + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string GbnfWriter::literal(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8::valid_char_len(s, i);
    if (n == 0) fail("grammar writer: text is not valid UTF-8");
    out += escape(utf8::decode_at(s, i, n), false);
    i += n;
  }
  return out + "\"";
}

std::string GbnfWriter::char_class(const std::vector<CodeRange>& ranges) {
  if (ranges.empty()) return "[^\\x00-\\U0010FFFF]";
  std::string out = "[";
  for (const CodeRange& r : ranges) {
    out += escape(r.lo, true);
    if (r.hi > r.lo) out += "-" + escape(r.hi, true);
  }
  return out + "]";
}

}  // namespace sluice::grammar
