// JSON Schema to GBNF: a grammar whose every text is JSON that validates under the schema.
//
// Supported: type (with unions and OpenAPI's nullable), properties / required /
// additionalProperties, enum, const, items / prefixItems (and draft-07's array items with
// additionalItems), minItems / maxItems, minLength / maxLength, nested objects and arrays,
// anyOf, oneOf (when its alternatives provably exclude each other: different JSON types, or a
// required property with different constants), allOf (merged where the parts agree), local $ref
// ($defs, definitions, the root — recursion included), number and integer with minimum /
// maximum / exclusiveMinimum / exclusiveMaximum, string formats date, time, date-time and uuid,
// and pattern (the regular expressions a grammar can express). Annotations (title, description,
// default, examples, …) are ignored. Any other keyword is an error naming it and where it is:
// nothing is silently dropped.
//
// The grammar may allow less than the schema (never more): objects hold their properties in the
// schema's order; without additionalProperties an object with properties holds only those;
// whitespace between tokens is bounded; numbers have at most 15 digits before the point, 15
// after it and a 2-digit exponent; strings at most 2000 characters.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf_writer.h"

namespace sluice::grammar {

using OrderedJson = nlohmann::ordered_json;

class JsonSchemaConverter {
 public:
  // `document`: the schema that local $refs resolve against (usually the one converted);
  // `prefix` starts every rule name, so several schemas can share one grammar.
  JsonSchemaConverter(GbnfWriter& out, const OrderedJson& document, std::string prefix);

  // A GBNF expression matching the JSON text of the values `schema` accepts. `path`: where the
  // schema is (a JSON pointer), for messages. Throws sluice::Error, also for a keyword value of
  // the wrong JSON type.
  std::string convert(const OrderedJson& schema, const std::string& path);

 private:
  std::string value(const OrderedJson& schema, const std::string& path);
  // Shared pieces, defined once per converter: optional whitespace, and any JSON value.
  std::string ws();
  std::string any_value();
  [[noreturn]] void error(const std::string& path, const std::string& what) const;
  std::string typed(const OrderedJson& s, const std::string& type, const std::string& path);
  std::string object(const OrderedJson& s, const std::string& path);
  std::string array(const OrderedJson& s, const std::string& path);
  std::string string(const OrderedJson& s, const std::string& path);
  std::string number(const OrderedJson& s, const std::string& path, bool integer);
  std::string ref(const std::string& pointer, const std::string& path);
  std::string alternatives(const OrderedJson& s, const char* key, const std::string& path);
  OrderedJson merge_all(const OrderedJson& s, const std::string& path);
  const OrderedJson& resolve(const OrderedJson& s, const std::string& path, int depth = 0);
  std::string name(const std::string& hint) const { return prefix_ + hint; }

  GbnfWriter& w_;
  const OrderedJson& doc_;
  std::string prefix_;
  std::map<std::string, std::string> refs_;  // pointer → rule
  std::string ws_, any_;
};

// JSON string characters for a set of code points: a character that JSON must escape (", \,
// controls) appears in its escaped form. Returns a GBNF expression matching one character.
std::string json_chars(const std::vector<CodeRange>& ranges);
// The GBNF expression for the JSON string content (between the quotes) of strings matching the
// ECMAScript regular expression `pattern` (JSON Schema's search semantics: unanchored ends match
// anything). Throws sluice::Error naming the construct a grammar cannot express.
std::string pattern_grammar(std::string_view pattern, const std::string& path);
// GBNF for decimal integers in [lo, hi] (no leading zeros, "-" for negatives).
std::string integer_range(int64_t lo, int64_t hi);
// The GBNF expression for the content of JSON strings, written without escapes, that are none of
// `names`.
std::string key_outside(GbnfWriter& w, const std::string& prefix,
                        const std::vector<std::string>& names);

// The whole grammar for one schema given as JSON text (its own document).
std::string json_schema_to_gbnf(std::string_view schema_json);

}  // namespace sluice::grammar
