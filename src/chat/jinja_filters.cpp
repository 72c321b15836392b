// Builtin filters and tests of the Jinja interpreter. The dispatch order and type rules copy
// @huggingface/jinja's (a filter is looked up by operand type, and a name the reference does not
// know for that type is an error), so that templates render and fail alike. Jinja2 features the
// reference lacks are reached only at the points where it would raise, and only when extensions
// are enabled (RenderOptions::strict off). Also holds the small text/value helpers that the
// methods in jinja_methods.cpp share.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "chat/jinja_error.h"
#include "chat/jinja_interp.h"

namespace sluice::jinja {

namespace {

bool is_word_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t nl = s.find('\n', start);
    out.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) return out;
    start = nl + 1;
  }
}

std::string indent_lines(const std::string& s, const std::string& pad, bool first, bool blank) {
  auto lines = split_lines(s);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    bool skip = (!first && i == 0) || (!blank && lines[i].empty());
    out += skip ? lines[i] : pad + lines[i];
  }
  return out;
}

bool same_value_zero(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number() && std::isnan(a.num) && std::isnan(b.num)) return true;
  return strict_equal(a, b);
}

Value parse_json_value(const std::string& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(s, nullptr, false);
  if (j.is_discarded()) throw RuntimeFail("from_json: invalid JSON");
  return from_json(j);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::optional<Value> identifier_extension(const Value& operand, const std::string& name) {
  if (name == "default" || name == "d") return operand.is_undefined() ? Value::string("") : operand;
  if ((name == "escape" || name == "e") && operand.is_string()) return Value::string(html_escape(operand.str));
  if (name == "from_json" && operand.is_string()) return parse_json_value(operand.str);
  if (name == "round" && operand.is_number()) return Value::floating(std::round(operand.num));
  if (name == "list" && operand.is_string()) {
    Array chars;
    for (auto& cp : code_points(operand.str)) chars.push_back(Value::string(cp));
    return Value::array(std::move(chars));
  }
  if (name == "list" && operand.is_attr_container()) {
    Array keys;
    for (const auto& kv : *operand.obj) keys.push_back(Value::string(kv.first));
    return Value::array(std::move(keys));
  }
  if (name == "count" && operand.is_array()) return Value::integer(static_cast<double>(operand.arr->size()));
  if (name == "count" && operand.is_string()) return Value::integer(static_cast<double>(utf16_length(operand.str)));
  if (name == "string" && operand.is_attr_container()) return Value::string(to_output(operand));
  if (name == "items" && operand.kind == Kind::Namespace) return pairs_of(*operand.obj);
  return std::nullopt;
}

std::optional<Value> call_extension(Interpreter& interp, const Value& operand, const std::string& name,
                                    const std::vector<Value>& args, const ObjectMap& kw) {
  if ((name == "select" || name == "reject") && operand.is_array()) {
    bool keep_if = name == "select";
    Array out;
    for (const auto& item : *operand.arr) {
      bool r;
      if (args.empty()) {
        r = truthy(item);
      } else {
        if (!args[0].is_string()) throw RuntimeFail(fmt::format("{}: test name must be a string", name));
        r = run_test(args[0].str, item, std::vector<Value>(args.begin() + 1, args.end()), interp.extensions);
      }
      if (r == keep_if) out.push_back(item);
    }
    return Value::array(std::move(out));
  }
  if (name == "round" && operand.is_number()) {
    double precision = arg_or(args, 0, kw, "precision", Value::integer(0)).num;
    Value method = arg_or(args, 1, kw, "method", Value::string("common"));
    double scale = std::pow(10.0, precision), x = operand.num * scale;
    double r = method.str == "floor" ? std::floor(x) : method.str == "ceil" ? std::ceil(x) : std::round(x);
    return Value::floating(r / scale);
  }
  if (name == "default" || name == "d") {
    Value fallback = arg_or(args, 0, kw, "default_value", Value::string(""));
    bool boolean = truthy(arg_or(args, 1, kw, "boolean", Value::boolean(false)));
    return operand.is_undefined() || (boolean && !truthy(operand)) ? fallback : operand;
  }
  return std::nullopt;
}

[[noreturn]] void unknown_filter(const Value& operand, const std::string& name) {
  switch (operand.kind) {
    case Kind::Array:
    case Kind::Tuple: throw RuntimeFail(fmt::format("Unknown ArrayValue filter: {}", name));
    case Kind::String: throw RuntimeFail(fmt::format("Unknown StringValue filter: {}", name));
    case Kind::Int:
    case Kind::Float: throw RuntimeFail(fmt::format("Unknown NumericValue filter: {}", name));
    case Kind::Object:
    case Kind::Kwargs: throw RuntimeFail(fmt::format("Unknown ObjectValue filter: {}", name));
    case Kind::Bool: throw RuntimeFail(fmt::format("Unknown BooleanValue filter: {}", name));
    default: throw RuntimeFail(fmt::format("Cannot apply filter \"{}\" to type: {}", name, type_name(operand)));
  }
}

Value identifier_filter(Interpreter& interp, const Value& operand, const std::string& name) {
  if (name == "safe") return operand;
  if (name == "tojson") return Value::string(to_json(operand, JsonOptions{}));
  if (operand.is_array()) {
    const Array& a = *operand.arr;
    if (name == "list") return operand;
    if (name == "first") return a.empty() ? Value::undefined() : a.front();
    if (name == "last") return a.empty() ? Value::undefined() : a.back();
    if (name == "length") return Value::integer(static_cast<double>(a.size()));
    if (name == "reverse") return Value::array(Array(a.rbegin(), a.rend()));
    if (name == "sort") return Value::array(sorted(a, false, false, [](const Value& v) { return v; }));
    if (name == "join") {
      std::string out;
      for (const auto& x : a)
        if (!x.is_null() && !x.is_undefined()) out += raw_js_string(x);
      return Value::string(std::move(out));
    }
    if (name == "string") return Value::string(to_json(operand, JsonOptions{}, false));
    if (name == "unique") {
      Array out;
      for (const auto& x : a)
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return same_value_zero(x, y); })) out.push_back(x);
      return Value::array(std::move(out));
    }
  } else if (operand.is_string()) {
    const std::string& s = operand.str;
    if (name == "length") return Value::integer(static_cast<double>(utf16_length(s)));
    if (name == "upper") return Value::string(js_upper(s));
    if (name == "lower") return Value::string(js_lower(s));
    if (name == "title") return Value::string(title_case(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "trim") return Value::string(std::string(js_trim(s)));
    if (name == "indent") return Value::string(indent_lines(s, "    ", false, false));
    if (name == "join" || name == "string") return operand;
    if (name == "int") {
      double v = js_parse_int(s);
      return Value::integer(std::isnan(v) ? 0 : v);
    }
    if (name == "float") {
      double v = js_parse_float(s);
      return Value::floating(std::isnan(v) ? 0 : v);
    }
  } else if (operand.is_number()) {
    if (name == "abs") return operand.kind == Kind::Int ? Value::integer(std::fabs(operand.num)) : Value::floating(std::fabs(operand.num));
    if (name == "int") return Value::integer(std::trunc(operand.num) + 0.0);
    if (name == "float") return Value::floating(operand.num);
    if (name == "string") return Value::string(to_output(operand));
  } else if (operand.is_object()) {
    if (name == "items") return pairs_of(*operand.obj);
    if (name == "length") return Value::integer(static_cast<double>(operand.obj->size()));
    Value m = builtin_member(operand, name, interp.extensions);
    if (m.kind == Kind::Function) {
      std::vector<Value> none;
      Env scratch;
      return (*m.fn)(none, scratch);
    }
    if (!m.is_undefined()) return m;
  } else if (operand.kind == Kind::Bool) {
    if (name == "bool") return operand;
    if (name == "int") return Value::integer(operand.b ? 1 : 0);
    if (name == "float") return Value::floating(operand.b ? 1 : 0);
    if (name == "string") return Value::string(operand.b ? "true" : "false");
  }
  if (interp.extensions)
    if (auto v = identifier_extension(operand, name)) return *v;
  unknown_filter(operand, name);
}

Value tojson_filter(const Value& operand, const ObjectMap& kw) {
  JsonOptions opt;
  if (const Value* v = kwarg(kw, "indent")) {
    if (v->kind != Kind::Int && !v->is_null()) throw RuntimeFail("If set, indent must be a number");
    if (v->kind == Kind::Int) opt.indent = static_cast<int>(v->num);
  }
  if (const Value* v = kwarg(kw, "ensure_ascii")) {
    if (v->kind != Kind::Bool) throw RuntimeFail("If set, ensure_ascii must be a boolean");
    opt.ensure_ascii = v->b;
  }
  if (const Value* v = kwarg(kw, "sort_keys")) {
    if (v->kind != Kind::Bool) throw RuntimeFail("If set, sort_keys must be a boolean");
    opt.sort_keys = v->b;
  }
  if (const Value* v = kwarg(kw, "separators")) {
    if (v->is_array()) {
      if (v->arr->size() != 2 || !(*v->arr)[0].is_string() || !(*v->arr)[1].is_string())
        throw RuntimeFail("separators must be a tuple of two strings");
      opt.custom_separators = true;
      opt.item_sep = (*v->arr)[0].str;
      opt.key_sep = (*v->arr)[1].str;
    } else if (!v->is_null()) {
      throw RuntimeFail("If set, separators must be a tuple of two strings");
    }
  }
  return Value::string(to_json(operand, opt));
}

Value call_filter(Interpreter& interp, const Value& operand, const Node& call, const EnvPtr& env) {
  const std::string& name = call.a->str;
  if (name == "tojson") return tojson_filter(operand, interp.split_arguments(call.list, env).second);
  if (name == "join") {
    std::vector<std::string> parts;
    if (operand.is_string()) {
      parts = code_points(operand.str);
    } else if (operand.is_array()) {
      for (const auto& x : *operand.arr) parts.push_back(x.is_null() || x.is_undefined() ? "" : raw_js_string(x));
    } else {
      throw RuntimeFail(fmt::format("Cannot apply filter \"join\" to type: {}", type_name(operand)));
    }
    auto [args, kw] = interp.split_arguments(call.list, env);
    Value sep = arg_or(args, 0, kw, "separator", Value::string(""));
    if (!sep.is_string()) throw RuntimeFail("separator must be a string");
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep.str : "") + parts[i];
    return Value::string(std::move(out));
  }
  if (name == "int" || name == "float") {
    bool is_int = name == "int";
    auto [args, kw] = interp.split_arguments(call.list, env);
    Value fallback = arg_or(args, 0, kw, "default", is_int ? Value::integer(0) : Value::floating(0));
    if (operand.is_string()) {
      double v = is_int ? js_parse_int(operand.str) : js_parse_float(operand.str);
      return std::isnan(v) ? fallback : is_int ? Value::integer(v) : Value::floating(v);
    }
    if (operand.is_number()) return is_int ? Value::integer(std::trunc(operand.num) + 0.0) : Value::floating(operand.num);
    if (operand.kind == Kind::Bool) return is_int ? Value::integer(operand.b) : Value::floating(operand.b);
    throw RuntimeFail(fmt::format("Cannot apply filter \"{}\" to type: {}", name, type_name(operand)));
  }
  if (name == "default") {
    auto [args, kw] = interp.split_arguments(call.list, env);
    Value fallback = args.size() > 0 ? args[0] : Value::string("");
    Value boolean = arg_or(args, 1, kw, "boolean", Value::boolean(false));
    if (boolean.kind != Kind::Bool) throw RuntimeFail("`default` filter flag must be a boolean");
    return operand.is_undefined() || (boolean.b && !truthy(operand)) ? fallback : operand;
  }
  if (operand.is_array()) {
    if (name == "sort") {
      auto [args, kw] = interp.split_arguments(call.list, env);
      Value reverse = arg_or(args, 0, kw, "reverse", Value::boolean(false));
      Value case_sensitive = arg_or(args, 1, kw, "case_sensitive", Value::boolean(false));
      Value attribute = arg_or(args, 2, kw, "attribute", Value::null());
      if (reverse.kind != Kind::Bool) throw RuntimeFail("reverse must be a boolean");
      if (case_sensitive.kind != Kind::Bool) throw RuntimeFail("case_sensitive must be a boolean");
      if (!attribute.is_string() && attribute.kind != Kind::Int && !attribute.is_null())
        throw RuntimeFail("attribute must be a string, integer, or null");
      std::string path = attribute.is_string() ? attribute.str : js_number(attribute.num);
      return Value::array(sorted(*operand.arr, reverse.b, case_sensitive.b, [&](const Value& v) {
        return attribute.is_null() ? v : attribute_path(v, path);
      }));
    }
    if (name == "selectattr" || name == "rejectattr") {
      bool select = name == "selectattr";
      for (const auto& item : *operand.arr)
        if (!item.is_attr_container()) throw RuntimeFail(fmt::format("`{}` can only be applied to array of objects", name));
      for (const auto& a : call.list)
        if (a->type != NodeType::StringLiteral) throw RuntimeFail(fmt::format("arguments of `{}` must be strings", name));
      std::vector<Value> args;
      for (const auto& a : call.list) args.push_back(interp.evaluate(a.get(), env));
      if (args.empty()) throw RuntimeFail(fmt::format("`{}` needs an attribute name", name));
      Array out;
      for (const auto& item : *operand.arr) {
        const Value* attr = item.obj->find(args[0].str);
        bool r = false;
        if (attr) {
          if (args.size() > 1) {
            std::vector<Value> test_args(args.begin() + 2, args.end());
            r = run_test(args[1].str, *attr, test_args, interp.extensions);
          } else {
            r = truthy(*attr);
          }
        }
        if (r == select) out.push_back(item);
      }
      return Value::array(std::move(out));
    }
    if (name == "map") {
      auto [args, kw] = interp.split_arguments(call.list, env);
      if (const Value* attr = kwarg(kw, "attribute")) {
        if (!attr->is_string()) throw RuntimeFail("attribute must be a string");
        const Value* fallback = kwarg(kw, "default");
        Array out;
        for (const auto& item : *operand.arr) {
          if (!item.is_attr_container()) throw RuntimeFail("items in map must be an object");
          Value v = attribute_path(item, attr->str);
          out.push_back(v.is_undefined() && fallback ? *fallback : v);
        }
        return Value::array(std::move(out));
      }
      if (interp.extensions && !args.empty() && args[0].is_string()) {
        Array out;
        for (const auto& item : *operand.arr) out.push_back(identifier_filter(interp, item, args[0].str));
        return Value::array(std::move(out));
      }
      throw RuntimeFail("`map` expressions without `attribute` set are not currently supported.");
    }
  } else if (operand.is_string()) {
    if (name == "indent") {
      auto [args, kw] = interp.split_arguments(call.list, env);
      Value width = arg_or(args, 0, kw, "width", Value::integer(4));
      if (width.kind != Kind::Int && !width.is_string()) throw RuntimeFail("width must be an integer or a string");
      bool first = truthy(arg_or(args, 1, kw, "first", Value::boolean(false)));
      bool blank = truthy(arg_or(args, 2, kw, "blank", Value::boolean(false)));
      std::string pad = width.is_string() ? width.str : std::string(static_cast<size_t>(std::max(0.0, width.num)), ' ');
      return Value::string(indent_lines(operand.str, pad, first, blank));
    }
    if (name == "replace") {
      auto [args, kw] = interp.split_arguments(call.list, env);
      args.push_back(Value::object(std::move(kw), Kind::Kwargs));
      Value fn = builtin_member(operand, "replace", interp.extensions);
      Env scratch;
      return (*fn.fn)(args, scratch);
    }
  } else if (operand.is_object()) {
    Value m = builtin_member(operand, name, interp.extensions);
    if (m.kind == Kind::Function) {
      auto args = interp.call_arguments(call.list, env);
      return (*m.fn)(args, *env);
    }
    if (interp.extensions) {
      auto [args, kw] = interp.split_arguments(call.list, env);
      if (auto v = call_extension(interp, operand, name, args, kw)) return *v;
    }
    throw RuntimeFail(fmt::format("Unknown ObjectValue filter: {}", name));
  }
  if (interp.extensions) {
    auto [args, kw] = interp.split_arguments(call.list, env);
    if (auto v = call_extension(interp, operand, name, args, kw)) return *v;
    if (args.empty() && kw.size() == 0)
      if (auto v = identifier_extension(operand, name)) return *v;
  }
  unknown_filter(operand, name);
}

}  // namespace

size_t utf16_length(std::string_view s) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) n += decode_utf8(s, pos) > 0xffff ? 2 : 1;
  return n;
}

// The reference's title(): upper-case each ASCII word character that starts a word, leaving
// the rest unchanged (unlike Python, which also lower-cases).
std::string title_case(std::string s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (is_word_byte(s[i]) && (i == 0 || !is_word_byte(s[i - 1])) && s[i] >= 'a' && s[i] <= 'z') s[i] -= 32;
  return s;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t pos = 0;
  uint32_t cp = decode_utf8(s, pos);
  if (cp > 0xffff) return s;
  return js_upper(std::string_view(s).substr(0, pos)) + s.substr(pos);
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_null() && b.is_null()) return 0;
  if (a.is_null() || b.is_null()) throw RuntimeFail(fmt::format("Cannot compare {} with {}", type_name(a), type_name(b)));
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_undefined() || b.is_undefined())
    throw RuntimeFail(fmt::format("Cannot compare {} with {}", type_name(a), type_name(b)));
  auto numeric = [](const Value& v) { return v.is_number() || v.kind == Kind::Bool; };
  if (numeric(a) && numeric(b)) {
    double x = a.kind == Kind::Bool ? a.b : a.num, y = b.kind == Kind::Bool ? b.b : b.num;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind != b.kind)
    throw RuntimeFail(fmt::format("Cannot compare different types: {} and {}", type_name(a), type_name(b)));
  if (a.kind != Kind::String) throw RuntimeFail(fmt::format("Cannot compare type: {}", type_name(a)));
  std::string x = case_sensitive ? a.str : js_lower(a.str), y = case_sensitive ? b.str : js_lower(b.str);
  return x < y ? -1 : x > y ? 1 : 0;
}

Array sorted(const Array& items, bool reverse, bool case_sensitive, const std::function<Value(const Value&)>& key) {
  Array out = items;
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    int r = compare_values(key(a), key(b), case_sensitive);
    return (reverse ? -r : r) < 0;
  });
  return out;
}

Value pairs_of(const ObjectMap& m) {
  Array out;
  for (const auto& [k, v] : m) out.push_back(Value::array({Value::string(k), v}));
  return Value::array(std::move(out));
}

const Value* kwarg(const ObjectMap& kw, const char* name) { return kw.find(name); }

// The first positional argument, else the keyword argument, else a default.
Value arg_or(const std::vector<Value>& args, size_t i, const ObjectMap& kw, const char* name, Value fallback) {
  if (i < args.size()) return args[i];
  if (const Value* v = kwarg(kw, name)) return *v;
  return fallback;
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_attr_container()) {
      const Value* x = v.obj->find(part);
      v = x ? *x : Value::undefined();
    } else if (v.is_array()) {
      double i = js_parse_int(part);
      if (std::isnan(i) || i < 0 || i >= static_cast<double>(v.arr->size())) return Value::undefined();
      v = (*v.arr)[static_cast<size_t>(i)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value apply_filter(Interpreter& interp, const Value& operand, const Node& filter, const EnvPtr& env) {
  if (filter.type == NodeType::Identifier) return identifier_filter(interp, operand, filter.str);
  return call_filter(interp, operand, filter, env);
}

bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args, bool extensions) {
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "callable") return v.kind == Kind::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::Int) throw RuntimeFail(fmt::format("cannot {} on {}", name, type_name(v)));
    bool odd = std::fmod(v.num, 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "none") return v.is_null();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "iterable") return v.kind == Kind::Array || v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) throw RuntimeFail(fmt::format("test '{}' needs a string, got {}", name, type_name(v)));
    return v.str == (name == "lower" ? js_lower(v.str) : js_upper(v.str));
  }
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "equalto" || name == "eq") {
    if (args.empty()) throw RuntimeFail(fmt::format("test '{}' needs a value to compare with", name));
    return strict_equal(v, args[0]);
  }
  if (extensions) {
    if (name == "ne" && !args.empty()) return !strict_equal(v, args[0]);
    if (name == "float") return v.kind == Kind::Float;
    if (name == "sameas" && !args.empty()) return strict_equal(v, args[0]);
    if (name == "divisibleby" && !args.empty() && v.is_number() && args[0].is_number())
      return args[0].num != 0 && std::fmod(v.num, args[0].num) == 0;
    if (name == "in" && !args.empty()) {
      const Value& c = args[0];
      if (c.is_array()) return std::any_of(c.arr->begin(), c.arr->end(), [&](const Value& x) { return strict_equal(x, v); });
      if (c.is_string() && v.is_string()) return c.str.find(v.str) != std::string::npos;
      if (c.is_attr_container() && v.is_string()) return c.obj->find(v.str) != nullptr;
      return false;
    }
  }
  throw RuntimeFail(fmt::format("Unknown test: {}", name));
}

}  // namespace sluice::jinja
