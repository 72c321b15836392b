// Structured output fields (see structured.h).
#include "structured.h"

#include <fmt/format.h>

namespace sluice::server {

using json = nlohmann::json;

ToolChoice parse_tool_choice(const json& body, Api api) {
  ToolChoice c;
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean())
      bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean", "invalid_type");
    c.parallel = p->get<bool>();
  }
  const json* tc = field(body, "tool_choice");
  if (!tc) return c;
  if (api == Api::kMessages) {
    // Anthropic: {"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}
    if (!tc->is_object() || !tc->contains("type") || !(*tc)["type"].is_string())
      bad("tool_choice", "'tool_choice' must be an object with a string 'type'", "invalid_type");
    const std::string type = (*tc)["type"].get<std::string>();
    if (const auto it = tc->find("disable_parallel_tool_use"); it != tc->end()) {
      if (!it->is_boolean())
        bad("tool_choice.disable_parallel_tool_use",
            "'disable_parallel_tool_use' must be a boolean", "invalid_type");
      c.parallel = !it->get<bool>();
    }
    if (type == "auto")
      c.mode = ToolChoice::Mode::kAuto;
    else if (type == "none")
      c.mode = ToolChoice::Mode::kNone;
    else if (type == "any")
      c.mode = ToolChoice::Mode::kRequired;
    else if (type == "tool") {
      if (!tc->contains("name") || !(*tc)["name"].is_string())
        bad("tool_choice.name", "'tool_choice' of type \"tool\" needs a string 'name'",
            "invalid_type");
      c.mode = ToolChoice::Mode::kNamed;
      c.name = (*tc)["name"].get<std::string>();
    } else {
      bad("tool_choice.type",
          fmt::format("'tool_choice.type' '{}' is not one of auto, any, tool, none", type));
    }
    return c;
  }
  // OpenAI: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
  if (tc->is_string()) {
    const std::string v = tc->get<std::string>();
    if (v == "auto")
      c.mode = ToolChoice::Mode::kAuto;
    else if (v == "none")
      c.mode = ToolChoice::Mode::kNone;
    else if (v == "required")
      c.mode = ToolChoice::Mode::kRequired;
    else
      bad("tool_choice", fmt::format("'tool_choice' \"{}\" is not one of auto, none, required", v));
    return c;
  }
  if (!tc->is_object() || tc->value("type", "") != "function" || !tc->contains("function") ||
      !(*tc)["function"].is_object() || !(*tc)["function"].contains("name") ||
      !(*tc)["function"]["name"].is_string())
    bad("tool_choice",
        "'tool_choice' must be \"auto\", \"none\", \"required\" or "
        "{\"type\":\"function\",\"function\":{\"name\":…}}",
        "invalid_type");
  c.mode = ToolChoice::Mode::kNamed;
  c.name = (*tc)["function"]["name"].get<std::string>();
  return c;
}

OutputConstraint parse_output_constraint(const json& body) {
  OutputConstraint out;
  auto take = [&](const char* name) {
    if (out.any())
      bad(name, fmt::format("'{}' and '{}' both constrain the reply; send one", out.field, name));
    out.field = name;
  };
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad("response_format", "'response_format' must be an object with a string 'type'",
          "invalid_type");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      take("response_format");
      out.schema = R"({"type":"object"})";
    } else if (type == "json_schema") {
      take("response_format");
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        bad("response_format.json_schema", "'response_format.json_schema' must be an object",
            "invalid_type");
      if (const json* st = field(*js, "strict"); st && !st->is_boolean())
        bad("response_format.json_schema.strict", "'strict' must be a boolean", "invalid_type");
      // Without a schema any JSON value will do. strict or not, the schema is always enforced.
      const json* schema = field(*js, "schema");
      if (schema && !schema->is_object() && !schema->is_boolean())
        bad("response_format.json_schema.schema", "'schema' must be a JSON Schema object",
            "invalid_type");
      out.schema = schema ? schema->dump() : "true";
      out.field = "response_format.json_schema.schema";
    } else if (type != "text") {
      bad("response_format.type",
          fmt::format("'response_format.type' '{}' is not one of text, json_object, json_schema",
                      type));
    }
  }
  if (const json* g = field(body, "grammar")) {
    if (!g->is_string()) bad("grammar", "'grammar' must be a string (GBNF)", "invalid_type");
    take("grammar");
    out.grammar = g->get<std::string>();
  }
  if (const json* js = field(body, "json_schema")) {
    if (!js->is_object() && !js->is_boolean())
      bad("json_schema", "'json_schema' must be a JSON Schema object", "invalid_type");
    take("json_schema");
    out.schema = js->dump();
  }
  return out;
}

std::string reply_grammar(Engine& engine, const ToolChoice& choice,
                          const OutputConstraint& constraint, ChatSyntax syntax,
                          const std::string& tools_json, bool starts_in_reasoning, Api api) {
  std::string param, gbnf;
  try {
    if (choice.forced()) {
      param = "tool_choice";
      if (constraint.any())
        bad(constraint.field,
            fmt::format("'{}' cannot be combined with a tool_choice that forces a call",
                        constraint.field));
      if (tools_json.empty())
        bad("tool_choice", "'tool_choice' forces a tool call, but no 'tools' are given");
      gbnf =
          tool_call_grammar(syntax, tools_json, choice.name, choice.parallel, starts_in_reasoning);
    } else if (!constraint.schema.empty()) {
      param = constraint.field;
      gbnf = api == Api::kCompletion
                 ? json_schema_grammar(constraint.schema)
                 : json_reply_grammar(syntax, constraint.schema, starts_in_reasoning);
    } else if (!constraint.grammar.empty()) {
      param = constraint.field;
      gbnf = constraint.grammar;
    } else {
      return "";
    }
    engine.check_grammar(gbnf);
  } catch (const sluice::Error& e) {
    bad(param, e.what());
  }
  return gbnf;
}

}  // namespace sluice::server
