// JSON Schema strings and numbers (see json_schema.h): string lengths and formats, keys outside a
// set of names, and decimal ranges for minimum / maximum.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

namespace {

// One character of a JSON string: unescaped, or an escape; \u escapes of UTF-16 surrogates are
// left out, so each character is one code point (what minLength and maxLength count).
constexpr const char* kStringChar =
    R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))";
// The same without characters beyond U+FFFF, for strings with a maxLength: JSON Schema counts
// such a character once, JavaScript (zod's .max()) twice, and a string must satisfy both.
constexpr const char* kBmpStringChar =
    R"([^"\\\x00-\x1F\U00010000-\U0010FFFF] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))";
constexpr const char* kQuote = R"("\"")";

// Largest magnitude a bounded number is written with (15 digits).
constexpr int64_t kLimit = 999'999'999'999'999;

std::string digits_literal(const std::string& d) {
  return GbnfWriter::literal(d);
}

// Decimal strings of equal length from a to b (a ≤ b), as a GBNF sequence.
std::string same_length(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a == b) return digits_literal(a);
  const size_t rest = a.size() - 1;
  if (a[0] == b[0])
    return digits_literal(a.substr(0, 1)) + " " + same_length(a.substr(1), b.substr(1));
  const bool low_zeros = a.find_first_not_of('0', 1) == std::string::npos;
  const bool high_nines = b.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alts;
  if (!low_zeros)
    alts.push_back(digits_literal(a.substr(0, 1)) + " " +
                   same_length(a.substr(1), std::string(rest, '9')));
  const char from = low_zeros ? a[0] : static_cast<char>(a[0] + 1);
  const char to = high_nines ? b[0] : static_cast<char>(b[0] - 1);
  if (from <= to) {
    std::string cls = fmt::format("[{}-{}]", from, to);
    if (rest > 0) cls += fmt::format(" [0-9]{{{}}}", rest);
    alts.push_back(cls);
  }
  if (!high_nines)
    alts.push_back(digits_literal(b.substr(0, 1)) + " " +
                   same_length(std::string(rest, '0'), b.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// Non-negative integers in [a, b], without leading zeros.
std::string unsigned_range(uint64_t a, uint64_t b) {
  std::vector<std::string> alts;
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  for (size_t len = sa.size(); len <= sb.size(); ++len) {
    const std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
    const std::string hi = len == sb.size() ? sb : std::string(len, '9');
    alts.push_back(same_length(lo, hi));
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

std::string format_grammar(const std::string& format) {
  const std::string d31 = R"(( "0" [1-9] | [12] [0-9] | "3" [01] ))";
  const std::string d30 = R"(( "0" [1-9] | [12] [0-9] | "30" ))";
  const std::string d28 =
      R"(( "0" [1-9] | "1" [0-9] | "2" [0-8] ))";  // 29 February only in leap years
  const std::string date = fmt::format(
      R"([0-9]{{4}} "-" ( ( "0" [13578] | "1" [02] ) "-" {} | ( "0" [469] | "11" ) "-" {} | "02-" {} ))",
      d31, d30, d28);
  const std::string time =
      R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + " \"T\" " + time;
  if (format == "uuid")
    return R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})";
  return "";
}

}  // namespace

std::string integer_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) {
    const int64_t top = std::min<int64_t>(hi, -1);
    alts.push_back("\"-\" " +
                   unsigned_range(static_cast<uint64_t>(-top), static_cast<uint64_t>(-lo)));
  }
  if (hi >= 0)
    alts.push_back(
        unsigned_range(static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi)));
  if (alts.size() == 1) return "( " + alts[0] + " )";
  return "( " + alts[0] + " | " + alts[1] + " )";
}

std::string key_outside(GbnfWriter& w, const std::string& prefix,
                        const std::vector<std::string>& names) {
  const std::vector<CodeRange> safe =
      subtract_ranges(any_char(), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  const std::string any = w.rule(prefix + "key-char", GbnfWriter::char_class(safe));
  // A trie of the names over code points; a key leaves it at the first character no name has
  // there, or ends where no name ends.
  struct Node {
    bool end = false;
    std::map<uint32_t, int> kids;
  };
  std::vector<Node> trie(1);
  for (const std::string& n : names) {
    int at = 0;
    bool representable = true;
    for (size_t i = 0; i < n.size();) {
      const size_t len = utf8::valid_char_len(n, i);
      if (len == 0) {
        representable = false;
        break;
      }
      const uint32_t cp = utf8::decode_at(n, i, len);
      i += len;
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        representable = false;  // an unescaped key never equals it
        break;
      }
      auto [it, added] = trie[at].kids.emplace(cp, static_cast<int>(trie.size()));
      if (added) trie.emplace_back();
      at = it->second;
    }
    if (representable) trie[at].end = true;
  }
  std::function<std::string(int)> node = [&](int at) {
    std::vector<std::string> alts;
    if (!trie[at].end) alts.push_back("");
    std::vector<CodeRange> taken;
    for (const auto& [cp, kid] : trie[at].kids) {
      alts.push_back(GbnfWriter::literal(utf8::encode(cp)) + " " + node(kid));
      taken.push_back({cp, cp});
    }
    const std::vector<CodeRange> other = subtract_ranges(safe, taken);
    if (!other.empty()) alts.push_back(GbnfWriter::char_class(other) + " " + any + "*");
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return w.rule(prefix + "key", body);
  };
  return node(0);
}

std::string JsonSchemaConverter::string(const OrderedJson& s, const std::string& path) {
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    if (!s["format"].is_string()) error(path + "/format", "'format' must be a string");
    const std::string f = s["format"].get<std::string>();
    const std::string g = format_grammar(f);
    if (g.empty())
      error(path + "/format",
            fmt::format("format '{}' is not supported (date, time, date-time and uuid are)", f));
    if (lengths || s.contains("pattern"))
      error(path, "'format' together with minLength, maxLength or pattern is not supported");
    return w_.rule(name(f), fmt::format("{} {} {}", kQuote, g, kQuote));
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) error(path + "/pattern", "'pattern' must be a string");
    if (lengths) error(path, "'pattern' together with minLength or maxLength is not supported");
    return w_.rule(
        name("pattern"),
        fmt::format("{} {} {}", kQuote,
                    pattern_grammar(s["pattern"].get<std::string>(), path + "/pattern"), kQuote));
  }
  auto length = [&](const char* key, int64_t def) {
    if (!s.contains(key)) return def;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
      error(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
    return s[key].get<int64_t>();
  };
  const int64_t min = length("minLength", 0);
  int64_t max = length("maxLength", -1);
  if (max >= 0 && min > max) error(path, "minLength is larger than maxLength");
  if (min > kMaxRepetition)
    error(path + "/minLength", fmt::format("minLength above {} is not supported", kMaxRepetition));
  if (max > kMaxRepetition) max = kMaxRepetition;  // shorter strings stay valid
  const std::string c =
      max >= 0 ? w_.rule(name("bmp-char"), kBmpStringChar) : w_.rule(name("char"), kStringChar);
  std::string count = "*";
  if (min > 0 || max >= 0)
    count = fmt::format("{{{},{}}}", min, max < 0 ? "" : std::to_string(max));
  return w_.rule(name("string"), fmt::format("{} {}{} {}", kQuote, c, count, kQuote));
}

std::string JsonSchemaConverter::number(const OrderedJson& s, const std::string& path,
                                        bool integer) {
  // The tightest lower and upper bounds, and whether each excludes its value.
  bool has_lo = false, has_hi = false, excl_lo = false, excl_hi = false;
  double lo = 0, hi = 0;
  auto bound = [&](const char* key, bool upper, bool exclusive) {
    if (!s.contains(key)) return;
    const OrderedJson& v = s[key];
    if (v.is_boolean()) return;  // draft 4's exclusive flags, read with minimum / maximum
    if (!v.is_number()) error(path + "/" + key, fmt::format("'{}' must be a number", key));
    const double x = v.get<double>();
    if (!std::isfinite(x)) error(path + "/" + key, fmt::format("'{}' must be finite", key));
    bool& has = upper ? has_hi : has_lo;
    double& b = upper ? hi : lo;
    bool& excl = upper ? excl_hi : excl_lo;
    const bool tighter =
        !has || (upper ? x < b || (x == b && exclusive) : x > b || (x == b && exclusive));
    if (tighter) b = x, excl = exclusive, has = true;
  };
  bound("minimum", false, s.value("exclusiveMinimum", OrderedJson(false)) == true);
  bound("maximum", true, s.value("exclusiveMaximum", OrderedJson(false)) == true);
  bound("exclusiveMinimum", false, true);
  bound("exclusiveMaximum", true, true);
  const std::string frac = R"("." [0-9]{1,15})";
  if (!has_lo && !has_hi) {
    const std::string i = R"("-"? ( "0" | [1-9] [0-9]{0,14} ))";
    if (integer) return w_.rule(name("integer"), i);
    return w_.rule(name("number"),
                   fmt::format(R"({} ( {} )? ( [eE] [-+]? [0-9]{{1,2}} )?)", i, frac));
  }
  auto clamp = [](double x) { return static_cast<int64_t>(std::clamp(x, -1e16, 1e16)); };
  // Integers inside the bounds.
  int64_t ilo = has_lo ? clamp(excl_lo ? std::floor(lo) + 1 : std::ceil(lo)) : -kLimit;
  int64_t ihi = has_hi ? clamp(excl_hi ? std::ceil(hi) - 1 : std::floor(hi)) : kLimit;
  ilo = std::max(ilo, -kLimit);
  ihi = std::min(ihi, kLimit);
  std::vector<std::string> alts;
  if (ilo <= ihi) alts.push_back(integer_range(ilo, ihi));
  if (!integer) {
    // i.f lies in [i, i + 1), and -i.f in (-(i + 1), -i]: whole units inside the bounds.
    const int64_t pos_lo = std::max<int64_t>(0, ilo);
    const int64_t pos_hi = has_hi ? std::min(kLimit, clamp(std::floor(hi)) - 1) : kLimit;
    if (pos_lo <= pos_hi) alts.push_back(integer_range(pos_lo, pos_hi) + " " + frac);
    const int64_t neg_lo = std::max<int64_t>(0, -ihi);
    const int64_t neg_hi = has_lo ? std::min(kLimit, clamp(std::floor(-lo)) - 1) : kLimit;
    if (neg_lo <= neg_hi) alts.push_back("\"-\" " + integer_range(neg_lo, neg_hi) + " " + frac);
  }
  if (alts.empty())
    error(
        path,
        integer
            ? "no integer lies between the minimum and the maximum"
            : "the range between minimum and maximum holds no integer or whole unit this converter "
              "can write");
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return w_.rule(name(integer ? "integer" : "number"), body);
}

}  // namespace sluice::grammar
