// Builtin methods and globals of the Jinja interpreter: string methods (`s.split()`), object
// methods (`d.items()`), list methods (extensions only) and the global functions (namespace,
// range, raise_exception, strftime_now), with @huggingface/jinja's argument rules.
#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <optional>

#include "chat/jinja_error.h"
#include "chat/jinja_interp.h"

namespace sluice::jinja {

namespace {

// Python str.replace semantics with JS string handling (empty `old` inserts at every code point
// boundary).
std::string replace_str(const std::string& s, const std::string& from, const std::string& to, double count) {
  if (count == 0) return s;
  double remaining = std::isnan(count) || count < 0 ? INFINITY : count;
  std::string out;
  if (from.empty()) {
    auto cps = code_points(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (remaining > 0) {
        out += to;
        --remaining;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t pos = 0;
  while (remaining > 0) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --remaining;
  }
  out.append(s, pos);
  return out;
}

Value fn(Function f) { return Value::function(std::move(f)); }

Value string_method(const Value& self, const std::string& name, bool extensions) {
  const std::string s = self.str;
  if (name == "length") return Value::integer(static_cast<double>(utf16_length(s)));
  if (name == "upper") return fn([s](std::vector<Value>&, Env&) { return Value::string(js_upper(s)); });
  if (name == "lower") return fn([s](std::vector<Value>&, Env&) { return Value::string(js_lower(s)); });
  // The reference ignores strip()'s argument and always strips whitespace.
  if (name == "strip") return fn([s](std::vector<Value>&, Env&) { return Value::string(std::string(js_trim(s))); });
  if (name == "lstrip") return fn([s](std::vector<Value>&, Env&) { return Value::string(std::string(js_trim_start(s))); });
  if (name == "rstrip") return fn([s](std::vector<Value>&, Env&) { return Value::string(std::string(js_trim_end(s))); });
  if (name == "title") return fn([s](std::vector<Value>&, Env&) { return Value::string(title_case(s)); });
  if (name == "capitalize") return fn([s](std::vector<Value>&, Env&) { return Value::string(capitalize(s)); });
  if (name == "startswith" || name == "endswith") {
    bool starts = name == "startswith";
    return fn([s, starts, name](std::vector<Value>& args, Env&) {
      if (args.empty()) throw RuntimeFail(fmt::format("{}() requires at least one argument", name));
      auto test = [&](const std::string& p) {
        return p.size() <= s.size() && (starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
      };
      if (args[0].is_string()) return Value::boolean(test(args[0].str));
      if (args[0].is_array()) {
        for (const auto& p : *args[0].arr) {
          if (!p.is_string()) throw RuntimeFail(fmt::format("{}() tuple elements must be strings", name));
          if (test(p.str)) return Value::boolean(true);
        }
        return Value::boolean(false);
      }
      throw RuntimeFail(fmt::format("{}() argument must be a string or tuple of strings", name));
    });
  }
  if (name == "split") {
    return fn([s](std::vector<Value>& args, Env&) {
      Value sep = args.size() > 0 ? args[0] : Value::null();
      if (!sep.is_string() && !sep.is_null()) throw RuntimeFail("sep argument must be a string or null");
      Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
      if (maxsplit.kind != Kind::Int) throw RuntimeFail("maxsplit argument must be a number");
      double max = maxsplit.num;
      Array out;
      if (sep.is_null()) {
        std::string_view text = js_trim_start(s);
        size_t pos = 0;
        while (pos < text.size()) {
          while (size_t n = js_space_len(text, pos)) pos += n;
          if (pos >= text.size()) break;
          size_t end = pos;
          while (end < text.size() && !js_space_len(text, end)) {
            size_t p = end;
            decode_utf8(text, p);
            end = p;
          }
          if (max >= 0 && static_cast<double>(out.size()) >= max) {
            out.push_back(Value::string(std::string(text.substr(pos))));
            break;
          }
          out.push_back(Value::string(std::string(text.substr(pos, end - pos))));
          pos = end;
        }
      } else {
        if (sep.str.empty()) throw RuntimeFail("empty separator");
        std::vector<std::string> parts;
        size_t start = 0;
        while (true) {
          size_t hit = s.find(sep.str, start);
          if (hit == std::string::npos) break;
          parts.push_back(s.substr(start, hit - start));
          start = hit + sep.str.size();
        }
        parts.push_back(s.substr(start));
        if (max >= 0 && static_cast<double>(parts.size()) > max) {
          size_t keep = static_cast<size_t>(max);
          std::string rest;
          for (size_t i = keep; i < parts.size(); ++i) rest += (i > keep ? sep.str : "") + parts[i];
          parts.resize(keep);
          parts.push_back(rest);
        }
        for (auto& p : parts) out.push_back(Value::string(std::move(p)));
      }
      return Value::array(std::move(out));
    });
  }
  if (name == "replace") {
    return fn([s](std::vector<Value>& args, Env&) {
      if (args.size() < 2) throw RuntimeFail("replace() requires at least two arguments");
      if (!args[0].is_string() || !args[1].is_string()) throw RuntimeFail("replace() arguments must be strings");
      Value count = Value::null();
      if (args.size() > 2) {
        if (args[2].kind == Kind::Kwargs) {
          const Value* c = args[2].obj->find("count");
          count = c ? *c : Value::null();
        } else {
          count = args[2];
        }
      }
      if (count.kind != Kind::Int && !count.is_null()) throw RuntimeFail("replace() count argument must be a number or null");
      return Value::string(replace_str(s, args[0].str, args[1].str, count.is_null() ? NAN : count.num));
    });
  }
  if (extensions && name == "find") {
    return fn([s](std::vector<Value>& args, Env&) {
      if (args.empty() || !args[0].is_string()) throw RuntimeFail("find() needs a string argument");
      size_t hit = s.find(args[0].str);
      return Value::integer(hit == std::string::npos ? -1 : static_cast<double>(utf16_length(s.substr(0, hit))));
    });
  }
  return Value::undefined();
}

Value dictsort(const ObjectMap& m, std::vector<Value>& args) {
  ObjectMap kw;
  std::vector<Value> pos;
  for (auto& a : args) {
    if (a.kind == Kind::Kwargs) {
      kw = *a.obj;
    } else {
      pos.push_back(a);
    }
  }
  Value case_sensitive = arg_or(pos, 0, kw, "case_sensitive", Value::boolean(false));
  if (case_sensitive.kind != Kind::Bool) throw RuntimeFail("case_sensitive must be a boolean");
  Value by = arg_or(pos, 1, kw, "by", Value::string("key"));
  if (!by.is_string()) throw RuntimeFail("by must be a string");
  if (by.str != "key" && by.str != "value") throw RuntimeFail("by must be either 'key' or 'value'");
  Value reverse = arg_or(pos, 2, kw, "reverse", Value::boolean(false));
  if (reverse.kind != Kind::Bool) throw RuntimeFail("reverse must be a boolean");
  size_t index = by.str == "key" ? 0 : 1;
  return Value::array(sorted(*pairs_of(m).arr, reverse.b, case_sensitive.b,
                             [index](const Value& pair) { return (*pair.arr)[index]; }));
}

std::string strftime_js(const std::string& format, const RenderOptions& options) {
  std::time_t t = options.now ? *options.now : std::time(nullptr);
  std::tm tm{};
  if (options.now) {
    gmtime_r(&t, &tm);
  } else {
    localtime_r(&t, &tm);
  }
  static const char* const kMonths[] = {"January", "February", "March", "April", "May", "June", "July",
                                        "August", "September", "October", "November", "December"};
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    char c = format[i + 1];
    switch (c) {
      case 'Y': out += std::to_string(tm.tm_year + 1900); break;
      case 'm': out += fmt::format("{:02}", tm.tm_mon + 1); break;
      case 'd': out += fmt::format("{:02}", tm.tm_mday); break;
      case 'b': out += std::string(kMonths[tm.tm_mon]).substr(0, 3); break;
      case 'B': out += kMonths[tm.tm_mon]; break;
      case 'H': out += fmt::format("{:02}", tm.tm_hour); break;
      case 'M': out += fmt::format("{:02}", tm.tm_min); break;
      case '%': out += '%'; break;
      default: out += format.substr(i, 2);
    }
    ++i;
  }
  return out;
}

}  // namespace

Value builtin_member(const Value& object, const std::string& name, bool extensions) {
  if (object.is_string()) return string_method(object, name, extensions);
  if (object.is_array()) {
    if (name == "length") return Value::integer(static_cast<double>(object.arr->size()));
    if (!extensions) return Value::undefined();
    auto arr = object.arr;
    if (name == "append") {
      return fn([arr](std::vector<Value>& args, Env&) {
        if (args.size() != 1) throw RuntimeFail("append() takes exactly one argument");
        arr->push_back(args[0]);
        return Value::null();
      });
    }
    if (name == "pop") {
      return fn([arr](std::vector<Value>& args, Env&) {
        if (arr->empty()) throw RuntimeFail("pop from empty list");
        double i = args.empty() ? -1 : args[0].num;
        double n = static_cast<double>(arr->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw RuntimeFail("pop index out of range");
        Value v = (*arr)[static_cast<size_t>(i)];
        arr->erase(arr->begin() + static_cast<std::ptrdiff_t>(i));
        return v;
      });
    }
    return Value::undefined();
  }
  if (!object.is_object()) return Value::undefined();
  auto m = object.obj;
  if (name == "get") {
    return fn([m](std::vector<Value>& args, Env&) {
      if (args.empty() || !args[0].is_string())
        throw RuntimeFail(fmt::format("Object key must be a string: got {}", args.empty() ? "nothing" : type_name(args[0])));
      if (const Value* v = m->find(args[0].str)) return *v;
      return args.size() > 1 ? args[1] : Value::null();
    });
  }
  if (name == "items") return fn([m](std::vector<Value>&, Env&) { return pairs_of(*m); });
  if (name == "keys") {
    return fn([m](std::vector<Value>&, Env&) {
      Array keys;
      for (const auto& kv : *m) keys.push_back(Value::string(kv.first));
      return Value::array(std::move(keys));
    });
  }
  if (name == "values") {
    return fn([m](std::vector<Value>&, Env&) {
      Array values;
      for (const auto& kv : *m) values.push_back(kv.second);
      return Value::array(std::move(values));
    });
  }
  if (name == "dictsort") return fn([m](std::vector<Value>& args, Env&) { return dictsort(*m, args); });
  return Value::undefined();
}

void setup_globals(Env& env, const RenderOptions& options) {
  env.set("namespace", fn([](std::vector<Value>& args, Env&) {
    std::vector<Value> pos = args;
    std::optional<ObjectMap> kw;
    if (!pos.empty() && pos.back().kind == Kind::Kwargs) {
      kw = *pos.back().obj;
      pos.pop_back();
    }
    if (pos.size() > 1) throw RuntimeFail(fmt::format("namespace expected at most 1 argument, got {}", pos.size()));
    ObjectMap entries;
    if (pos.size() == 1) {
      const Value& src = pos[0];
      if (src.is_object()) {
        for (const auto& [k, v] : *src.obj) entries.set(k, v);
      } else if (src.is_array()) {
        for (const auto& pair : *src.arr) {
          std::vector<Value> kv;
          if (pair.is_array()) kv = *pair.arr;
          if (pair.is_string())
            for (auto& cp : code_points(pair.str)) kv.push_back(Value::string(cp));
          if (kv.size() != 2) throw RuntimeFail("namespace expected an object or an iterable of [key, value] pairs");
          if (!kv[0].is_string()) throw RuntimeFail("namespace keys must be strings");
          entries.set(kv[0].str, kv[1]);
        }
      } else {
        throw RuntimeFail(fmt::format("'{}' object is not iterable", type_name(src)));
      }
    }
    if (kw)
      for (const auto& [k, v] : *kw) entries.set(k, v);
    return Value::object(std::move(entries), Kind::Namespace);
  }));
  env.set("raise_exception", fn([](std::vector<Value>& args, Env&) -> Value {
    throw RaisedByTemplate(args.empty() || args[0].is_undefined() ? "" : raw_js_string(args[0]));
  }));
  env.set("range", fn([](std::vector<Value>& args, Env&) {
    for (const auto& a : args)
      if (!a.is_number()) throw RuntimeFail(fmt::format("range() arguments must be numbers, got {}", type_name(a)));
    if (args.empty()) throw RuntimeFail("range() needs at least one argument");
    double start = 0, stop = args[0].num, step = 1;
    if (args.size() > 1) {
      start = args[0].num;
      stop = args[1].num;
    }
    if (args.size() > 2) step = args[2].num;
    if (step == 0) throw RuntimeFail("range() step must not be zero");
    Array out;
    for (double i = start; step > 0 ? i < stop : i > stop; i += step)
      out.push_back(std::trunc(i) == i ? Value::integer(i) : Value::floating(i));
    return Value::array(std::move(out));
  }));
  env.set("strftime_now", fn([options](std::vector<Value>& args, Env&) {
    if (args.empty() || !args[0].is_string()) throw RuntimeFail("strftime_now() needs a format string");
    return Value::string(strftime_js(args[0].str, options));
  }));
  env.set("true", Value::boolean(true));
  env.set("false", Value::boolean(false));
  env.set("none", Value::null());
  env.set("True", Value::boolean(true));
  env.set("False", Value::boolean(false));
  env.set("None", Value::null());
}

}  // namespace sluice::jinja
