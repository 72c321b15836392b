// Structured output in requests: what constrains a reply (OpenAI's response_format, llama-server's
// grammar and json_schema fields) and how tools may be used (tool_choice in OpenAI's and
// Anthropic's shapes). Parsing validates and throws ApiError naming the field; the grammar for
// the reply is built once the prompt (and so the chat syntax) is known.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "api.h"

namespace sluice::server {

[[noreturn]] inline void bad(const std::string& param, const std::string& message,
                             const char* code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", param, code);
}

// A field that is present and not null, else nullptr.
inline const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed } mode = Mode::kAuto;
  std::string name;  // kNamed: the function to call
  bool parallel =
      true;  // more than one call allowed (parallel_tool_calls, disable_parallel_tool_use)
  bool forced() const { return mode == Mode::kRequired || mode == Mode::kNamed; }
};
ToolChoice parse_tool_choice(const nlohmann::json& body, Api api);

struct OutputConstraint {
  std::string field;   // the request field that asked for it
  std::string schema;  // a JSON Schema (response_format json_object / json_schema, json_schema), or
  std::string grammar;  // a GBNF grammar (grammar)
  bool any() const { return !field.empty(); }
};
OutputConstraint parse_output_constraint(const nlohmann::json& body);

// The grammar of the reply (empty: unconstrained), checked against the engine's vocabulary.
// `tools_json`: the offered tools in OpenAI's shape.
std::string reply_grammar(Engine& engine, const ToolChoice& choice,
                          const OutputConstraint& constraint, ChatSyntax syntax,
                          const std::string& tools_json, bool starts_in_reasoning, Api api);

}  // namespace sluice::server
