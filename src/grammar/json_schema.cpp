// JSON Schema to GBNF (see json_schema.h): keyword checks, references, combinators, objects and
// arrays. Strings and numbers are in json_schema_scalars.cpp, patterns in json_schema_regex.cpp.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace sluice::grammar {

namespace {

// Keywords that describe a schema without constraining values.
const std::set<std::string> kAnnotations = {
    "title",           "description",     "$schema",  "$id",       "$comment", "examples",
    "default",         "deprecated",      "readOnly", "writeOnly", "$defs",    "definitions",
    "contentEncoding", "contentMediaType"};
// Keywords the converter honours.
const std::set<std::string> kKeywords = {"type",
                                         "nullable",
                                         "enum",
                                         "const",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "additionalItems",
                                         "minItems",
                                         "maxItems",
                                         "uniqueItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref"};
const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeys = {"items", "prefixItems", "additionalItems", "minItems",
                                          "maxItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum"};
const std::vector<std::string> kAllTypes = {"object", "array",   "string",
                                            "number", "boolean", "null"};

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

// The JSON types a schema object allows by its `type` (nullable included), or inferred from the
// keywords present; empty: any type.
std::vector<std::string> types_of(const OrderedJson& s) {
  std::vector<std::string> types;
  if (const auto it = s.find("type"); it != s.end()) {
    if (it->is_string())
      types.push_back(it->get<std::string>());
    else if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) types.push_back(t.get<std::string>());
  } else {
    auto any_of = [&](const std::set<std::string>& keys) {
      return std::any_of(keys.begin(), keys.end(),
                         [&](const std::string& k) { return s.contains(k); });
    };
    if (any_of(kObjectKeys)) types.push_back("object");
    if (any_of(kArrayKeys)) types.push_back("array");
    if (any_of(kStringKeys)) types.push_back("string");
    if (any_of(kNumberKeys)) types.push_back("number");
  }
  if (!types.empty() && s.contains("nullable") && s["nullable"] == true &&
      std::find(types.begin(), types.end(), "null") == types.end())
    types.push_back("null");
  return types;
}

std::string kind_of(const OrderedJson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

std::string alternation(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

}  // namespace

JsonSchemaConverter::JsonSchemaConverter(GbnfWriter& out, const OrderedJson& document,
                                         std::string prefix)
    : w_(out), doc_(document), prefix_(std::move(prefix)) {}

void JsonSchemaConverter::error(const std::string& path, const std::string& what) const {
  fail("json schema: at {}: {}", path.empty() ? "the root" : path, what);
}

std::string JsonSchemaConverter::ws() {
  // Bounded, so a model cannot pad forever: a space, or a newline and indentation.
  if (ws_.empty()) ws_ = w_.rule(name("ws"), "( \" \" | \"\\n\" [ \\t]{0,20} )?");
  return ws_;
}

std::string JsonSchemaConverter::any_value() {
  if (!any_.empty()) return any_;
  any_ = w_.reserve(name("value"));
  const std::string w = ws();
  const std::string str = string(OrderedJson::object(), "");
  const std::string num = number(OrderedJson::object(), "", false);
  const std::string obj = w_.reserve(name("object"));
  const std::string arr = w_.reserve(name("array"));
  w_.define(obj, fmt::format("\"{{\" {0} ( {1} {0} \":\" {0} {2} {0} ( \",\" {0} {1} {0} \":\" {0} "
                             "{2} {0} )* )? \"}}\"",
                             w, str, any_));
  w_.define(arr, fmt::format("\"[\" {0} ( {1} {0} ( \",\" {0} {1} {0} )* )? \"]\"", w, any_));
  w_.define(any_,
            fmt::format("{} | {} | {} | {} | \"true\" | \"false\" | \"null\"", obj, arr, str, num));
  return any_;
}

const OrderedJson& JsonSchemaConverter::resolve(const OrderedJson& s, const std::string& path,
                                                int depth) {
  if (!s.is_object() || !s.contains("$ref")) return s;
  if (depth > 64) error(path, "'$ref' references loop without reaching a schema");
  const OrderedJson& r = s["$ref"];
  if (!r.is_string()) error(path, "'$ref' must be a string");
  const std::string pointer = r.get<std::string>();
  if (pointer != "#" && !pointer.starts_with("#/"))
    error(path, fmt::format("'$ref' {}: only local references (#/...) are supported", pointer));
  const OrderedJson* at = &doc_;
  std::string rest = pointer.substr(1);
  while (!rest.empty()) {
    rest.erase(0, 1);
    const size_t slash = rest.find('/');
    std::string key = rest.substr(0, slash);
    rest = slash == std::string::npos ? "" : rest.substr(slash);
    for (size_t p; (p = key.find("~1")) != std::string::npos;) key.replace(p, 2, "/");
    for (size_t p; (p = key.find("~0")) != std::string::npos;) key.replace(p, 2, "~");
    if (at->is_object() && at->contains(key))
      at = &(*at)[key];
    else if (at->is_array() && !key.empty() &&
             key.find_first_not_of("0123456789") == std::string::npos &&
             std::stoul(key) < at->size())
      at = &(*at)[std::stoul(key)];
    else
      error(path, fmt::format("'$ref' {} points at nothing", pointer));
  }
  return resolve(*at, pointer, depth + 1);
}

std::string JsonSchemaConverter::ref(const std::string& pointer, const std::string& path) {
  if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
  const OrderedJson& target = resolve(OrderedJson{{"$ref", pointer}}, path);
  const size_t slash = pointer.rfind('/');
  const std::string rule =
      w_.reserve(name("ref-" + (slash == std::string::npos ? "root" : pointer.substr(slash + 1))));
  refs_[pointer] = rule;
  w_.define(rule, value(target, pointer));
  return rule;
}

std::string JsonSchemaConverter::value(const OrderedJson& s, const std::string& path) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) error(path, "the schema false accepts no value");
    return any_value();
  }
  if (!s.is_object()) error(path, "a schema must be an object or a boolean");
  for (const auto& [key, v] : s.items())
    if (!kAnnotations.contains(key) && !kKeywords.contains(key))
      error(path, fmt::format("keyword '{}' is not supported", key));
  if (s.contains("$ref")) {
    for (const auto& [key, v] : s.items())
      if (key != "$ref" && !kAnnotations.contains(key))
        error(path,
              fmt::format("'$ref' beside other keywords ('{}') is not supported; use allOf", key));
    if (!s["$ref"].is_string()) error(path, "'$ref' must be a string");
    return ref(s["$ref"].get<std::string>(), path);
  }
  if (s.contains("allOf")) return value(merge_all(s, path), path);
  if (s.contains("anyOf") && s.contains("oneOf"))
    error(path, "anyOf and oneOf together are not supported");
  if (s.contains("anyOf")) return alternatives(s, "anyOf", path);
  if (s.contains("oneOf")) return alternatives(s, "oneOf", path);
  if (s.contains("const")) return GbnfWriter::literal(s["const"].dump());
  if (s.contains("enum")) {
    const OrderedJson& e = s["enum"];
    if (!e.is_array() || e.empty()) error(path + "/enum", "'enum' must be a non-empty array");
    std::vector<std::string> alts;
    for (const auto& v : e) alts.push_back(GbnfWriter::literal(v.dump()));
    return w_.rule(name("enum"), alternation(alts));
  }
  if (s.contains("uniqueItems") && !s["uniqueItems"].is_boolean())
    error(path, "'uniqueItems' must be a boolean");
  std::vector<std::string> types = types_of(s);
  if (const auto it = s.find("type"); it != s.end() && !it->is_string() && !it->is_array())
    error(path + "/type", "'type' must be a string or an array of strings");
  if (types.empty()) {
    if (s.contains("type")) error(path + "/type", "'type' lists no type");
    return any_value();
  }
  std::vector<std::string> alts;
  for (const std::string& t : types) alts.push_back(typed(s, t, path));
  return alts.size() == 1 ? alts[0] : w_.rule(name("union"), alternation(alts));
}

std::string JsonSchemaConverter::typed(const OrderedJson& s, const std::string& type,
                                       const std::string& path) {
  if (type == "null") return "\"null\"";
  if (type == "boolean") return "( \"true\" | \"false\" )";
  if (type == "object") return object(s, path);
  if (type == "array") return array(s, path);
  if (type == "string") return string(s, path);
  if (type == "number" || type == "integer") {
    if (s.contains("format")) error(path + "/format", "'format' on numbers is not supported");
    return number(s, path, type == "integer");
  }
  error(path + "/type", fmt::format("unknown type '{}'", type));
}

std::string JsonSchemaConverter::alternatives(const OrderedJson& s, const char* key,
                                              const std::string& path) {
  const OrderedJson& branches = s[key];
  const std::string at = path + "/" + key;
  if (!branches.is_array() || branches.empty())
    error(at, fmt::format("'{}' must be a non-empty array", key));
  // Keywords beside the combinator apply to every alternative.
  OrderedJson siblings = OrderedJson::object();
  for (const auto& [k, v] : s.items())
    if (k != key && !kAnnotations.contains(k)) siblings[k] = v;
  std::vector<OrderedJson> parts;
  for (const auto& b : branches)
    parts.push_back(siblings.empty() ? b
                                     : OrderedJson{{"allOf", OrderedJson::array({siblings, b})}});
  if (std::string(key) == "oneOf") {
    // Valid under oneOf means valid under exactly one alternative: only alternatives that cannot
    // both accept a value are safe to offer side by side.
    struct Shape {
      std::set<std::string> kinds;      // JSON types; empty: any
      std::vector<OrderedJson> values;  // const / enum values, when the branch is one
      std::map<std::string, std::vector<OrderedJson>> tags;  // required property → its constants
    };
    std::vector<Shape> shapes;
    for (size_t i = 0; i < parts.size(); ++i) {
      const OrderedJson merged =
          merge_all(OrderedJson{{"allOf", OrderedJson::array({parts[i]})}}, at);
      Shape sh;
      if (merged.contains("const"))
        sh.values = {merged["const"]};
      else if (merged.contains("enum") && merged["enum"].is_array())
        for (const auto& v : merged["enum"]) sh.values.push_back(v);
      for (const auto& v : sh.values) sh.kinds.insert(kind_of(v));
      if (sh.values.empty())
        for (std::string t : types_of(merged)) sh.kinds.insert(t == "integer" ? "number" : t);
      if (merged.contains("properties") && merged.contains("required") &&
          merged["required"].is_array())
        for (const auto& r : merged["required"]) {
          if (!r.is_string() || !merged["properties"].contains(r.get<std::string>())) continue;
          const OrderedJson& p = resolve(merged["properties"][r.get<std::string>()], at);
          if (p.is_object() && p.contains("const"))
            sh.tags[r.get<std::string>()] = {p["const"]};
          else if (p.is_object() && p.contains("enum") && p["enum"].is_array())
            sh.tags[r.get<std::string>()] =
                std::vector<OrderedJson>(p["enum"].begin(), p["enum"].end());
        }
      shapes.push_back(std::move(sh));
    }
    auto disjoint_values = [](const std::vector<OrderedJson>& a,
                              const std::vector<OrderedJson>& b) {
      for (const auto& x : a)
        if (std::find(b.begin(), b.end(), x) != b.end()) return false;
      return true;
    };
    for (size_t i = 0; i < shapes.size(); ++i)
      for (size_t j = i + 1; j < shapes.size(); ++j) {
        const Shape &a = shapes[i], &b = shapes[j];
        bool apart = !a.kinds.empty() && !b.kinds.empty() &&
                     std::none_of(a.kinds.begin(), a.kinds.end(),
                                  [&](const std::string& k) { return b.kinds.contains(k); });
        apart = apart ||
                (!a.values.empty() && !b.values.empty() && disjoint_values(a.values, b.values));
        for (const auto& [prop, vals] : a.tags)
          if (const auto it = b.tags.find(prop);
              it != b.tags.end() && disjoint_values(vals, it->second))
            apart = true;
        if (!apart)
          error(at,
                fmt::format(
                    "oneOf: alternatives {} and {} could both accept a value, which oneOf forbids; "
                    "give them different types or a required property with different constants, "
                    "or use anyOf",
                    i, j));
      }
  }
  std::vector<std::string> alts;
  for (size_t i = 0; i < parts.size(); ++i)
    alts.push_back(value(parts[i], fmt::format("{}/{}", at, i)));
  return w_.rule(name(key), alternation(alts));
}

OrderedJson JsonSchemaConverter::merge_all(const OrderedJson& s, const std::string& path) {
  const std::string at = path + "/allOf";
  OrderedJson out = OrderedJson::object();
  for (const auto& [k, v] : s.items())
    if (k != "allOf") out[k] = v;
  if (!s["allOf"].is_array() || s["allOf"].empty()) error(at, "'allOf' must be a non-empty array");
  auto intersect = [&](const std::vector<OrderedJson>& a, const std::vector<OrderedJson>& b) {
    OrderedJson r = OrderedJson::array();
    for (const auto& x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) r.push_back(x);
    return r;
  };
  for (size_t i = 0; i < s["allOf"].size(); ++i) {
    const std::string part_at = fmt::format("{}/{}", at, i);
    OrderedJson part = resolve(s["allOf"][i], part_at);
    if (part.is_boolean()) {
      if (!part.get<bool>()) error(part_at, "the schema false accepts no value");
      continue;
    }
    if (!part.is_object()) error(part_at, "a schema must be an object or a boolean");
    if (part.contains("allOf")) part = merge_all(part, part_at);
    if (part.contains("$ref")) part = resolve(part, part_at);
    // additionalProperties: false on either side admits only that side's properties.
    const bool closed_out =
        out.contains("additionalProperties") && out["additionalProperties"] == false;
    const bool closed_part =
        part.contains("additionalProperties") && part["additionalProperties"] == false;
    const OrderedJson before = out.value("properties", OrderedJson::object());
    for (const auto& [k, v] : part.items()) {
      if (kAnnotations.contains(k)) continue;
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      OrderedJson& o = out[k];
      if (o == v) continue;
      if (k == "type") {
        std::vector<OrderedJson> a = o.is_array() ? std::vector<OrderedJson>(o.begin(), o.end())
                                                  : std::vector<OrderedJson>{o};
        std::vector<OrderedJson> b = v.is_array() ? std::vector<OrderedJson>(v.begin(), v.end())
                                                  : std::vector<OrderedJson>{v};
        // integer is a number
        auto widen = [](std::vector<OrderedJson>& x, const std::vector<OrderedJson>& y) {
          if (std::find(x.begin(), x.end(), "number") != x.end() &&
              std::find(y.begin(), y.end(), "integer") != y.end())
            x.push_back("integer");
        };
        widen(a, b);
        widen(b, a);
        o = intersect(a, b);
        if (o.empty()) error(part_at, "allOf: no type satisfies every part");
      } else if (k == "properties") {
        if (!o.is_object() || !v.is_object()) error(part_at, "'properties' must be an object");
        for (const auto& [p, ps] : v.items())
          o[p] = o.contains(p) ? OrderedJson{{"allOf", OrderedJson::array({o[p], ps})}} : ps;
      } else if (k == "required") {
        for (const auto& r : v)
          if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
      } else if (k == "minLength" || k == "minItems" || k == "minimum" || k == "maxLength" ||
                 k == "maxItems" || k == "maximum") {
        if (!o.is_number() || !v.is_number())
          error(part_at, fmt::format("'{}' must be a number", k));
        // The stricter bound; integer keywords stay integers.
        const bool lower = k.starts_with("min");
        if (lower ? v > o : v < o) o = v;
      } else if (k == "enum") {
        o = intersect(std::vector<OrderedJson>(o.begin(), o.end()),
                      std::vector<OrderedJson>(v.begin(), v.end()));
        if (o.empty()) error(part_at, "allOf: the enums share no value");
      } else if (k == "additionalProperties" || k == "items") {
        if (o == false || v == false)
          o = false;
        else if (o == true)
          o = v;
        else if (v != true)
          o = OrderedJson{{"allOf", OrderedJson::array({o, v})}};
      } else {
        error(part_at, fmt::format("allOf: cannot merge different values of '{}'", k));
      }
    }
    if (closed_out || closed_part) {
      if (!out.contains("properties")) out["properties"] = OrderedJson::object();
      auto allowed = [&](const std::string& p) {
        const bool in_out = !closed_out || before.contains(p);
        const bool in_part =
            !closed_part || (part.contains("properties") && part["properties"].contains(p));
        return in_out && in_part;
      };
      OrderedJson kept = OrderedJson::object();
      for (const auto& [p, ps] : out["properties"].items())
        if (allowed(p)) kept[p] = ps;
      if (out.contains("required"))
        for (const auto& r : out["required"])
          if (r.is_string() && !kept.contains(r.get<std::string>()))
            error(part_at,
                  fmt::format(
                      "allOf: property '{}' is required by one part and excluded by another's "
                      "additionalProperties: false",
                      r.get<std::string>()));
      out["properties"] = kept;
    }
  }
  return out;
}

std::string JsonSchemaConverter::object(const OrderedJson& s, const std::string& path) {
  const OrderedJson empty = OrderedJson::object();
  const OrderedJson& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) error(path + "/properties", "'properties' must be an object");
  std::vector<std::string> names;
  std::vector<const OrderedJson*> schemas;
  for (const auto& [k, v] : props.items()) {
    names.push_back(k);
    schemas.push_back(&v);
  }
  std::set<std::string> required;
  static const OrderedJson kAny = true;
  if (s.contains("required")) {
    if (!s["required"].is_array())
      error(path + "/required", "'required' must be an array of strings");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) error(path + "/required", "'required' must be an array of strings");
      const std::string n = r.get<std::string>();
      required.insert(n);
      if (!props.contains(n)) {
        names.push_back(n);
        schemas.push_back(&kAny);
      }
    }
  }
  // Extra properties: what additionalProperties allows; without it, only an object that declares
  // nothing takes any (a declared object keeps to its declared properties).
  const OrderedJson* extra = nullptr;
  if (s.contains("additionalProperties")) {
    const OrderedJson& ap = s["additionalProperties"];
    if (!ap.is_boolean() && !ap.is_object())
      error(path + "/additionalProperties", "'additionalProperties' must be a boolean or a schema");
    if (ap != false) extra = &ap;
  } else if (names.empty()) {
    extra = &kAny;
  }
  const std::string w = ws();
  std::string first, rest;
  if (extra) {
    // Keys that are none of the declared names: those would have to match their own schema.
    const std::string key = "\"\\\"\" " + key_outside(w_, prefix_, names) + " \"\\\"\"";
    const std::string kv =
        w_.rule(name("extra-kv"), fmt::format("{} {} \":\" {} {} {}", key, w, w,
                                              value(*extra, path + "/additionalProperties"), w));
    first = fmt::format("( {0} ( \",\" {1} {0} )* )?", kv, w);
    rest = fmt::format("( \",\" {} {} )*", w, kv);
  }
  for (size_t i = names.size(); i-- > 0;) {
    const std::string at = path + "/properties/" + pointer_escape(names[i]);
    const std::string kv = w_.rule(
        name("kv-" + names[i]),
        fmt::format("{} {} \":\" {} {} {}", GbnfWriter::literal(OrderedJson(names[i]).dump()), w, w,
                    value(*schemas[i], at), w));
    std::string f, r;
    if (required.contains(names[i])) {
      f = kv + " " + rest;
      r = fmt::format("\",\" {} {} {}", w, kv, rest);
    } else {
      f = fmt::format("( {} {} | {} )", kv, rest, first);
      r = fmt::format("( \",\" {} {} )? {}", w, kv, rest);
    }
    first = w_.rule(name("obj"), f);
    rest = w_.rule(name("obj-rest"), r);
  }
  return w_.rule(name("object"), fmt::format("\"{{\" {} {} \"}}\"", w, first));
}

std::string JsonSchemaConverter::array(const OrderedJson& s, const std::string& path) {
  std::vector<const OrderedJson*> prefix;
  const OrderedJson* rest = nullptr;
  static const OrderedJson kAny = true;
  auto schema_at = [&](const char* key) -> const OrderedJson* {
    if (!s.contains(key)) return nullptr;
    const OrderedJson& v = s[key];
    if (!v.is_boolean() && !v.is_object())
      error(path + "/" + key, fmt::format("'{}' must be a schema", key));
    return &v;
  };
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array())
      error(path + "/prefixItems", "'prefixItems' must be an array of schemas");
    for (const auto& p : s["prefixItems"]) prefix.push_back(&p);
    rest = schema_at("items");
  } else if (s.contains("items") && s["items"].is_array()) {  // draft-07 tuples
    for (const auto& p : s["items"]) prefix.push_back(&p);
    rest = schema_at("additionalItems");
  } else {
    rest = schema_at("items");
  }
  if (!rest) rest = &kAny;
  auto count = [&](const char* key, int64_t def) {
    if (!s.contains(key)) return def;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0)
      error(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
    return s[key].get<int64_t>();
  };
  const int64_t min = count("minItems", 0);
  int64_t max = count("maxItems", -1);
  if (*rest == false && (max < 0 || max > static_cast<int64_t>(prefix.size())))
    max = static_cast<int64_t>(prefix.size());
  if (max >= 0 && min > max) error(path, "minItems is larger than maxItems");
  if (s.value("uniqueItems", false) && (max < 0 || max > 1))
    error(path + "/uniqueItems", "'uniqueItems': true is not supported");
  if (min > kMaxRepetition)
    error(path + "/minItems", fmt::format("minItems above {} is not supported", kMaxRepetition));
  if (max > kMaxRepetition) max = kMaxRepetition;  // fewer items stay valid
  const std::string w = ws();
  const int64_t k = static_cast<int64_t>(prefix.size());
  std::string tail;
  if (max < 0 || max > k) {
    // Items past the prefix, all of the `items` schema.
    const std::string item = value(*rest, path + "/items");
    const int64_t lo = std::max<int64_t>(0, min - k);
    const std::string hi = max < 0 ? "" : std::to_string(max - k);
    if (k == 0) {
      const std::string more =
          fmt::format("( \",\" {0} {1} {0} ){{{2},{3}}}", w, item, std::max<int64_t>(0, lo - 1),
                      max < 0 ? "" : std::to_string(max - 1));
      tail = fmt::format("{} {} {}", item, w, more);
      if (lo == 0) tail = "( " + tail + " )?";
    } else {
      tail = fmt::format("( \",\" {0} {1} {0} ){{{2},{3}}}", w, item, lo, hi);
    }
  }
  for (int64_t i = std::min<int64_t>(k, max < 0 ? k : max); i-- > 0;) {
    const std::string item = value(*prefix[i], fmt::format("{}/prefixItems/{}", path, i));
    std::string x = fmt::format("{}{} {} {}", i == 0 ? "" : "\",\" " + w + " ", item, w, tail);
    tail = w_.rule(name("tuple"), i < min ? x : "( " + x + " )?");
  }
  return w_.rule(name("array"), fmt::format("\"[\" {} {} \"]\"", w, tail));
}

std::string json_schema_to_gbnf(std::string_view schema_json) {
  const OrderedJson schema = OrderedJson::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) fail("json schema: the schema is not valid JSON");
  GbnfWriter w;
  JsonSchemaConverter c(w, schema, "");
  return w.text(c.convert(schema, ""));
}

std::string JsonSchemaConverter::convert(const OrderedJson& schema, const std::string& path) {
  try {
    return value(schema, path);
  } catch (const nlohmann::json::exception& e) {
    // A keyword of the wrong JSON type that no check above caught.
    fail("json schema: malformed schema: {}", e.what());
  }
}

}  // namespace sluice::grammar
