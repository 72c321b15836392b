// sluice public API: grammars for constrained generation (GenerateOptions::grammar).
//
// Grammars are GBNF, llama.cpp's syntax: rules `name ::= alternatives`, literals "...",
// character classes [a-z] [^"\\], `.`, groups, `?` `*` `+` `{m}` `{m,}` `{m,n}`, `#` comments;
// generation starts at the rule `root`. The text is matched over its UTF-8 bytes, so a token may
// end inside a character. A JSON Schema becomes a grammar with json_schema_grammar().
//
//   GenerateOptions o;
//   o.grammar =
//   sluice::json_schema_grammar(R"({"type":"object","properties":{"n":{"type":"integer"}}})");
//   session->generate(prompt, o, on_token);  // the text parses as JSON valid under the schema
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// The GBNF grammar of JSON text valid under `schema_json` (a JSON Schema as JSON text). Supported
// keywords: type, enum, const, properties, required, additionalProperties, items, prefixItems,
// minItems, maxItems, minLength, maxLength, pattern, format (date, time, date-time, uuid),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum, anyOf, oneOf, allOf, $ref / $defs; any
// other keyword throws sluice::Error naming it and where it is (nothing is silently dropped).
std::string json_schema_grammar(std::string_view schema_json);

// Parses and compiles a GBNF grammar, without a model; throws sluice::Error with the line, the
// column and the reason when it is not a grammar (Engine::check_grammar also checks that the
// model's vocabulary can begin it).
void check_grammar(std::string_view gbnf);

}  // namespace sluice
