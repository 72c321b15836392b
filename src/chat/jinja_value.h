// Runtime values of the Jinja interpreter. Chat templates must render byte-identically to
// @huggingface/jinja, a JavaScript implementation, so values follow its model rather than
// Python's: numbers are doubles tagged integer or float, strings behave as UTF-16 where the JS
// code indexes them (length, slicing, escapes), equality is JavaScript's, and output formatting
// uses JavaScript's number printing. Strings are stored as UTF-8 and converted only where needed.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::jinja {

// Kinds mirror the JS runtime classes. Tuple and Kwargs are array/object subtypes there, and the
// reference sometimes tests the exact type name, so they stay distinct here.
enum class Kind : uint8_t { Undefined, Null, Bool, Int, Float, String, Array, Tuple, Object, Kwargs, Namespace, Function };

struct Value;
class Env;
class ObjectMap;
using Array = std::vector<Value>;
// Called with the evaluated positional arguments (a trailing Kwargs value carries keyword
// arguments) and the caller's environment.
using Function = std::function<Value(std::vector<Value>& args, Env& call_site)>;

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  double num = 0;
  std::string str;
  // Containers are shared: the reference passes JS objects by reference, so mutation through a
  // namespace and identity comparison (==) both depend on sharing.
  std::shared_ptr<Array> arr;
  std::shared_ptr<ObjectMap> obj;
  std::shared_ptr<Function> fn;

  static Value undefined() { return {}; }
  static Value null() { Value v; v.kind = Kind::Null; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(double x) { Value v; v.kind = Kind::Int; v.num = x; return v; }
  static Value floating(double x) { Value v; v.kind = Kind::Float; v.num = x; return v; }
  static Value string(std::string s) { Value v; v.kind = Kind::String; v.str = std::move(s); return v; }
  static Value array(Array items = {}, Kind kind = Kind::Array);
  static Value object(ObjectMap m, Kind kind = Kind::Object);
  static Value function(Function f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  bool is_string() const { return kind == Kind::String; }
  bool is_array() const { return kind == Kind::Array || kind == Kind::Tuple; }  // JS instanceof ArrayValue
  bool is_object() const { return kind == Kind::Object || kind == Kind::Kwargs; }  // instanceof ObjectValue
  bool is_attr_container() const { return is_object() || kind == Kind::Namespace; }
};

// An insertion-ordered string map, like the JS Map the reference uses for objects.
class ObjectMap {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
  bool erase(const std::string& key);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

// The JS type name of a value ("StringValue", ...), used in error messages like the reference's.
const char* type_name(const Value& v);

// Python-style truthiness as the reference defines it (empty arrays/objects are false,
// namespaces always true).
bool truthy(const Value& v);

// What `{{ v }}` prints: JSON for containers, "1.0" for integral floats, "true"/"false".
std::string to_output(const Value& v);

// What JavaScript's `String(v.value)` gives: used by `~`, string `+` and `join`, where the
// reference converts the raw JS value (so floats print as "1", arrays as "[object Object]").
std::string raw_js_string(const Value& v);

struct JsonOptions {
  int indent = 0;
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_sep, key_sep;
};
// JSON as the reference's toJSON writes it; `undefined_as_null` false prints "undefined".
std::string to_json(const Value& v, const JsonOptions& opt, bool undefined_as_null = true, int depth = 0);

// `==` (JavaScript loose equality of the raw values) and `===` (used by `in` and equalto).
bool loose_equal(const Value& a, const Value& b);
bool strict_equal(const Value& a, const Value& b);

// Converts input JSON the way the reference converts JS objects: integral numbers become
// integers, object keys follow JS property order (array-index keys first, ascending).
Value from_json(const nlohmann::ordered_json& j);

// JavaScript Number.prototype.toString (shortest round trip, JS exponent rules).
std::string js_number(double d);
// JS parseInt(s, 10) / parseFloat(s); NaN when nothing parses.
double js_parse_int(std::string_view s);
double js_parse_float(std::string_view s);

// UTF-8 helpers with JavaScript semantics.
size_t js_space_len(std::string_view s, size_t pos);         // bytes of a JS \s char at pos, else 0
size_t js_space_len_before(std::string_view s, size_t end);  // same, for the char ending at end
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);
std::string_view js_trim(std::string_view s);
std::u16string to_utf16(std::string_view s);
std::string from_utf16(std::u16string_view s);
std::vector<std::string> code_points(std::string_view s);  // Array.from(str)
// toUpperCase/toLowerCase for ASCII, Latin-1, basic Greek and Cyrillic (the reference uses full
// Unicode case mapping; other scripts pass through unchanged here).
std::string js_upper(std::string_view s);
std::string js_lower(std::string_view s);
uint32_t decode_utf8(std::string_view s, size_t& pos);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace sluice::jinja
