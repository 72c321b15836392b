// Runtime value semantics of the Jinja interpreter, following @huggingface/jinja (see
// jinja_value.h): truthiness, printing, JSON, JavaScript equality and number formatting.
#include "chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_error.h"

namespace sluice::jinja {

Value Value::array(Array items, Kind kind) {
  Value v;
  v.kind = kind;
  v.arr = std::make_shared<Array>(std::move(items));
  return v;
}

Value Value::object(ObjectMap m, Kind kind) {
  Value v;
  v.kind = kind;
  v.obj = std::make_shared<ObjectMap>(std::move(m));
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

const Value* ObjectMap::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

Value* ObjectMap::find(std::string_view key) {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void ObjectMap::set(const std::string& key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(v));
}

bool ObjectMap::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "UndefinedValue";
    case Kind::Null: return "NullValue";
    case Kind::Bool: return "BooleanValue";
    case Kind::Int: return "IntegerValue";
    case Kind::Float: return "FloatValue";
    case Kind::String: return "StringValue";
    case Kind::Array: return "ArrayValue";
    case Kind::Tuple: return "TupleValue";
    case Kind::Object: return "ObjectValue";
    case Kind::Kwargs: return "KeywordArgumentsValue";
    case Kind::Namespace: return "NamespaceValue";
    case Kind::Function: return "FunctionValue";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::Null: return false;
    case Kind::Bool: return v.b;
    case Kind::Int:
    case Kind::Float: return v.num != 0 && !std::isnan(v.num);
    case Kind::String: return !v.str.empty();
    case Kind::Array:
    case Kind::Tuple: return !v.arr->empty();
    case Kind::Object:
    case Kind::Kwargs: return !v.obj->empty();
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  // Shortest round-trip digits, then JavaScript's choice between plain and exponent notation.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  int n = std::atoi(sci.c_str() + e + 1) + 1;
  int k = static_cast<int>(digits.size());
  std::string out = d < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return out;
}

namespace {

std::string float_output(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && std::fmod(d, 1.0) == 0 && std::fabs(d) < 1e21) return fmt::format("{:.1f}", d);
  return js_number(d);
}

bool is_array_index(const std::string& k) {
  if (k.empty() || k.size() > 10) return false;
  if (k.size() > 1 && k[0] == '0') return false;
  for (char c : k)
    if (c < '0' || c > '9') return false;
  return std::stoull(k) < 4294967295ull;
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    uint32_t cp = decode_utf8(s, pos);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (cp < 0x20) {
      out += fmt::format("\\u{:04x}", cp);
    } else if (ensure_ascii && cp >= 0x7f) {
      // The reference escapes UTF-16 code units, so astral characters become surrogate pairs.
      if (cp > 0xffff) {
        uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

// JavaScript localeCompare approximation for sort_keys: case-insensitive first, lower case first on
// ties, as ICU's root collation orders ASCII letters.
bool locale_less(const std::string& a, const std::string& b) {
  std::string la = js_lower(a), lb = js_lower(b);
  if (la != lb) return la < lb;
  return a > b;
}

}  // namespace

std::string to_output(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "undefined";
    case Kind::Null: return "null";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int: return js_number(v.num);
    case Kind::Float: return float_output(v.num);
    case Kind::String: return v.str;
    case Kind::Function: throw RuntimeFail("cannot print a function");
    default: return to_json(v, JsonOptions{}, false);
  }
}

std::string raw_js_string(const Value& v) {
  switch (v.kind) {
    case Kind::Int:
    case Kind::Float: return js_number(v.num);
    case Kind::Array:
    case Kind::Tuple: {
      std::string out;
      for (size_t i = 0; i < v.arr->size(); ++i) {
        if (i) out += ',';
        out += to_output((*v.arr)[i]);
      }
      return out;
    }
    case Kind::Object:
    case Kind::Kwargs:
    case Kind::Namespace: return "[object Map]";
    default: return to_output(v);
  }
}

std::string to_json(const Value& v, const JsonOptions& opt, bool undefined_as_null, int depth) {
  std::string item_sep = opt.custom_separators ? opt.item_sep : (opt.indent ? "," : ", ");
  std::string key_sep = opt.custom_separators ? opt.key_sep : ": ";
  switch (v.kind) {
    case Kind::Null: return "null";
    case Kind::Undefined: return undefined_as_null ? "null" : "undefined";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int:
    case Kind::Float: return std::isfinite(v.num) ? js_number(v.num) : "null";
    case Kind::String: {
      std::string out;
      json_string(out, v.str, opt.ensure_ascii);
      return out;
    }
    case Kind::Array:
    case Kind::Object:
    case Kind::Namespace: break;
    default: throw RuntimeFail(fmt::format("Cannot convert to JSON: {}", type_name(v)));
  }
  std::string indent_unit(static_cast<size_t>(std::max(opt.indent, 0)), ' ');
  std::string base_pad = "\n";
  for (int i = 0; i < depth; ++i) base_pad += indent_unit;
  std::string child_pad = base_pad + indent_unit;
  std::vector<std::string> core;
  if (v.kind == Kind::Array) {
    for (const auto& x : *v.arr) core.push_back(to_json(x, opt, undefined_as_null, depth + 1));
    std::string out = "[";
    if (opt.indent && !core.empty()) {
      out += child_pad;
      for (size_t i = 0; i < core.size(); ++i) out += (i ? item_sep + child_pad : "") + core[i];
      out += base_pad;
    } else {
      for (size_t i = 0; i < core.size(); ++i) out += (i ? item_sep : "") + core[i];
    }
    return out + "]";
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& kv : *v.obj) entries.push_back(&kv);
  if (opt.sort_keys)
    std::stable_sort(entries.begin(), entries.end(),
                     [](auto* a, auto* b) { return locale_less(a->first, b->first); });
  std::string out = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += item_sep;
    if (opt.indent) out += child_pad;
    std::string key;
    json_string(key, entries[i]->first, opt.ensure_ascii);
    out += key + key_sep + to_json(entries[i]->second, opt, undefined_as_null, depth + 1);
  }
  if (opt.indent && !entries.empty()) out += base_pad;
  return out + "}";
}

namespace {

const void* identity(const Value& v) {
  if (v.arr) return v.arr.get();
  if (v.obj) return v.obj.get();
  if (v.fn) return v.fn.get();
  return nullptr;
}

bool is_container(const Value& v) { return identity(v) != nullptr; }

// JS StringToNumber: trimmed decimal (or 0x/0o/0b) literal, empty → 0, otherwise NaN.
double js_string_to_number(std::string_view s) {
  s = js_trim(s);
  if (s.empty()) return 0;
  std::string t(s);
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' || t[1] == 'b' || t[1] == 'B')) {
    int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
    char* end = nullptr;
    double r = static_cast<double>(std::strtoull(t.c_str() + 2, &end, base));
    return *end ? NAN : r;
  }
  double r = js_parse_float(t);
  // parseFloat accepts a prefix; Number() needs the whole string to be the literal.
  size_t i = (t[0] == '+' || t[0] == '-') ? 1 : 0;
  bool seen_digit = false;
  if (t.compare(i, std::string::npos, "Infinity") == 0) return r;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
    } else if (c == '.' ) {
    } else if ((c == 'e' || c == 'E') && seen_digit) {
      ++i;
      if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
      if (i >= t.size()) return NAN;
      for (; i < t.size(); ++i)
        if (t[i] < '0' || t[i] > '9') return NAN;
      break;
    } else {
      return NAN;
    }
  }
  return seen_digit ? r : NAN;
}

}  // namespace

bool loose_equal(const Value& a, const Value& b) {
  bool an = a.is_null() || a.is_undefined(), bn = b.is_null() || b.is_undefined();
  if (an || bn) return an && bn;
  if (is_container(a) && is_container(b)) return identity(a) == identity(b);
  // A container against a primitive compares its string form (JS ToPrimitive).
  Value pa = is_container(a) ? Value::string(raw_js_string(a)) : a;
  Value pb = is_container(b) ? Value::string(raw_js_string(b)) : b;
  if (pa.is_string() && pb.is_string()) return pa.str == pb.str;
  auto to_num = [](const Value& v) {
    if (v.kind == Kind::Bool) return v.b ? 1.0 : 0.0;
    if (v.is_string()) return js_string_to_number(v.str);
    return v.num;
  };
  if (pa.kind == Kind::Bool && pb.kind == Kind::Bool) return pa.b == pb.b;
  return to_num(pa) == to_num(pb);
}

bool strict_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.num == b.num;
  if (a.kind != b.kind) {
    // Containers compare by identity whatever their JS subclass.
    return is_container(a) && is_container(b) && identity(a) == identity(b);
  }
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::Null: return true;
    case Kind::Bool: return a.b == b.b;
    case Kind::String: return a.str == b.str;
    default: return identity(a) == identity(b);
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::null();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(static_cast<double>(j.get<int64_t>()));
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(static_cast<double>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: {
      double d = j.get<double>();
      return std::isfinite(d) && std::trunc(d) == d ? Value::integer(d) : Value::floating(d);
    }
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      // JS objects list array-index keys first in ascending order, then the rest as inserted.
      std::vector<std::pair<uint64_t, std::string>> index_keys;
      for (const auto& [k, v] : j.items())
        if (is_array_index(k)) index_keys.emplace_back(std::stoull(k), k);
      std::sort(index_keys.begin(), index_keys.end());
      ObjectMap m;
      for (const auto& ik : index_keys) m.set(ik.second, from_json(j.at(ik.second)));
      for (const auto& [k, v] : j.items())
        if (!is_array_index(k)) m.set(k, from_json(v));
      return Value::object(std::move(m));
    }
    default: throw RuntimeFail("unsupported JSON value in template context");
  }
}

double js_parse_int(std::string_view s) {
  s = js_trim_start(s);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  size_t start = i;
  double r = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') r = r * 10 + (s[i++] - '0');
  if (i == start) return NAN;
  return neg ? -r : r;
}

double js_parse_float(std::string_view s) {
  s = js_trim_start(s);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (s.substr(i, 8) == "Infinity") return s[0] == '-' ? -INFINITY : INFINITY;
  size_t int_start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  bool digits = i > int_start;
  if (i < s.size() && s[i] == '.') {
    size_t f = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    digits = digits || i > f;
    if (!digits) return NAN;
  }
  if (!digits) return NAN;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t e = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j > e) i = j;
  }
  return std::strtod(std::string(s.substr(0, i)).c_str(), nullptr);
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
  auto c = static_cast<unsigned char>(s[pos]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos + static_cast<size_t>(len) > s.size()) {
    ++pos;
    return 0xfffd;
  }
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + static_cast<size_t>(i)]) & 0x3f);
  pos += static_cast<size_t>(len);
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

namespace {

bool is_js_space(uint32_t cp) {
  if (cp <= 32) return cp == 32 || (cp >= 9 && cp <= 13);
  return cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

}  // namespace

size_t js_space_len(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t p = pos;
  uint32_t cp = decode_utf8(s, p);
  return is_js_space(cp) ? p - pos : 0;
}

size_t js_space_len_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
  size_t p = start;
  uint32_t cp = decode_utf8(s, p);
  return p == end && is_js_space(cp) ? end - start : 0;
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (size_t n = js_space_len(s, i)) i += n;
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  size_t e = s.size();
  while (size_t n = js_space_len_before(s, e)) e -= n;
  return s.substr(0, e);
}

std::string_view js_trim(std::string_view s) { return js_trim_end(js_trim_start(s)); }

std::u16string to_utf16(std::string_view s) {
  std::u16string out;
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = decode_utf8(s, pos);
    if (cp > 0xffff) {
      cp -= 0x10000;
      out += static_cast<char16_t>(0xd800 + (cp >> 10));
      out += static_cast<char16_t>(0xdc00 + (cp & 0x3ff));
    } else {
      out += static_cast<char16_t>(cp);
    }
  }
  return out;
}

std::string from_utf16(std::u16string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    uint32_t c = s[i];
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.size() && s[i + 1] >= 0xdc00 && s[i + 1] < 0xe000) {
      c = 0x10000 + ((c - 0xd800) << 10) + (s[i + 1] - 0xdc00);
      ++i;
    }
    append_utf8(out, c);
  }
  return out;
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    decode_utf8(s, pos);
    out.emplace_back(s.substr(start, pos - start));
  }
  return out;
}

namespace {

uint32_t upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c == 0xb5) return 0x39c;
  if ((c >= 0x3b1 && c <= 0x3c1) || (c >= 0x3c3 && c <= 0x3c9)) return c - 32;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

uint32_t lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if ((c >= 0x391 && c <= 0x3a1) || (c >= 0x3a3 && c <= 0x3a9)) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

}  // namespace

std::string js_upper(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = decode_utf8(s, pos);
    if (cp == 0xdf) {
      out += "SS";
    } else {
      append_utf8(out, upper_cp(cp));
    }
  }
  return out;
}

std::string js_lower(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) append_utf8(out, lower_cp(decode_utf8(s, pos)));
  return out;
}

}  // namespace sluice::jinja
