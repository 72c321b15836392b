// GBNF, llama.cpp's grammar syntax, parsed into rules of expressions over Unicode code points:
//
//   root   ::= object                 # a rule: name ::= alternatives, one per line
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" [^\n"\\]{1,8} | "\u00e9" .
//   ws     ::= [ \t\n]*
//
// Literals and character classes take the escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \];
// classes hold ranges and may be negated ([^...]); `.` is any character; groups, `?`, `*`, `+`
// and `{m}`, `{m,}`, `{m,n}` repeat. Newlines end a rule except inside parentheses and after `|`.
// Errors are sluice::Error with the line, the column and the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive
};

struct Expr {
  enum class Kind { kEmpty, kLiteral, kClass, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::vector<uint32_t> text;     // kLiteral: code points
  std::vector<CodeRange> ranges;  // kClass: sorted, disjoint, negation already applied
  int rule = -1;                  // kRef: index into Grammar::rules
  std::vector<Expr> items;        // kSeq, kAlt: the parts; kRepeat: the one repeated item
  int min = 0, max = -1;          // kRepeat: counts, max −1 for unbounded
  size_t pos = 0;                 // byte offset in the source, for messages
};

struct Rule {
  std::string name;
  Expr body;
  size_t pos = 0;
  bool defined = false;  // a referenced name without a definition is an error after parsing
};

struct Grammar {
  std::vector<Rule> rules;
  int root = -1;
  std::string source;  // the text, kept for positions in later messages
};

// Parses GBNF text; every rule must be defined, once, and `root` must exist.
Grammar parse_gbnf(std::string_view text);

// "line L, column C" of a byte offset in `text` (columns count characters).
std::string source_position(std::string_view text, size_t pos);

// The largest count a {m,n} repetition may name (llama.cpp's limit).
constexpr int kMaxRepetition = 2000;

// Every character: U+0000..U+10FFFF without the surrogates UTF-8 cannot encode.
std::vector<CodeRange> any_char();
// Sorted, merged ranges; `negate` takes the complement within any_char().
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate);
// `a` without the code points of `b`.
std::vector<CodeRange> subtract_ranges(const std::vector<CodeRange>& a,
                                       const std::vector<CodeRange>& b);

}  // namespace sluice::grammar
