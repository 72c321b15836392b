// Grammars for constrained chat replies (see sluice/chat_output.h): a JSON reply, and forced tool
// calls written in the syntax each family's template teaches — the markers are the ones
// ChatOutputParser (chat_output.cpp) reads back, so a constrained reply always parses.
#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "sluice/chat_output.h"

namespace sluice {

namespace {

using grammar::GbnfWriter;
using grammar::OrderedJson;

// What a reply must start with before its content: harmony's final channel header; the close of
// a <think> block the prompt opened.
std::string content_prefix(ChatSyntax syntax, bool starts_in_reasoning) {
  std::string p;
  if (starts_in_reasoning && syntax != ChatSyntax::kHarmony) p += "</think>";
  if (syntax == ChatSyntax::kHarmony) p += "<|channel|>final<|message|>";
  return p;
}

struct Tool {
  std::string name;
  OrderedJson parameters;
};

std::vector<Tool> read_tools(std::string_view tools_json, std::string_view only) {
  const OrderedJson tools = OrderedJson::parse(tools_json, nullptr, false);
  if (tools.is_discarded() || !tools.is_array()) fail("tools: expected an array of tools");
  std::vector<Tool> out;
  for (const auto& t : tools) {
    const OrderedJson& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      fail("tools: every tool needs a name");
    Tool tool{f["name"].get<std::string>(), f.contains("parameters") && !f["parameters"].is_null()
                                                ? f["parameters"]
                                                : OrderedJson{{"type", "object"}}};
    if (only.empty() || tool.name == only) out.push_back(std::move(tool));
  }
  if (out.empty()) {
    if (only.empty()) fail("tools: a tool call is required but no tools are given");
    fail("tools: no tool is named '{}'", only);
  }
  return out;
}

}  // namespace

std::string json_reply_grammar(ChatSyntax syntax, std::string_view schema_json,
                               bool starts_in_reasoning) {
  const OrderedJson schema = OrderedJson::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) fail("json schema: the schema is not valid JSON");
  GbnfWriter w;
  grammar::JsonSchemaConverter c(w, schema, "");
  const std::string value = c.convert(schema, "");
  const std::string prefix = content_prefix(syntax, starts_in_reasoning);
  return w.text(prefix.empty() ? value : GbnfWriter::literal(prefix) + " " + value);
}

std::string tool_call_grammar(ChatSyntax syntax, std::string_view tools_json, std::string_view name,
                              bool parallel, bool starts_in_reasoning) {
  const std::vector<Tool> tools = read_tools(tools_json, name);
  GbnfWriter w;
  std::vector<std::string> args;
  for (size_t i = 0; i < tools.size(); ++i) {
    grammar::JsonSchemaConverter c(w, tools[i].parameters, fmt::format("t{}-", i));
    try {
      args.push_back(c.convert(tools[i].parameters, ""));
    } catch (const Error& e) {
      fail("tool '{}' parameters: {}", tools[i].name, e.what());
    }
  }
  // One alternative per tool: its name and arguments in the family's call syntax.
  auto calls = [&](const std::function<std::string(const std::string& name,
                                                   const std::string& args)>& call) {
    std::string alts;
    for (size_t i = 0; i < tools.size(); ++i)
      alts += (i ? " | " : "") + call(tools[i].name, args[i]);
    return w.rule("call", alts);
  };
  std::string body;
  switch (syntax) {
    case ChatSyntax::kHermes: {
      const std::string one = calls([](const std::string& n, const std::string& args) {
        return fmt::format(
            "{} {} \"}}\"",
            GbnfWriter::literal("{\"name\": " + OrderedJson(n).dump() + ", \"arguments\": "), args);
      });
      const std::string block =
          w.rule("block", fmt::format("\"<tool_call>\\n\" {} \"\\n</tool_call>\"", one));
      body = parallel ? fmt::format("{0} ( \"\\n\" {0} )*", block) : block;
      break;
    }
    case ChatSyntax::kDeepSeek: {
      const std::string one = calls([](const std::string& n, const std::string& args) {
        return fmt::format("{} {} {}",
                           GbnfWriter::literal("<｜tool▁call▁begin｜>" + n + "<｜tool▁sep｜>"),
                           args, GbnfWriter::literal("<｜tool▁call▁end｜>"));
      });
      body = fmt::format("{} {}{} {}", GbnfWriter::literal("<｜tool▁calls▁begin｜>"), one,
                         parallel ? "+" : "", GbnfWriter::literal("<｜tool▁calls▁end｜>"));
      break;
    }
    case ChatSyntax::kKimi: {
      // Call ids count up from 0, as the template writes them.
      std::string seq;
      const int n = parallel ? 8 : 1;
      for (int k = n - 1; k >= 0; --k) {
        const std::string one = calls([k](const std::string& name, const std::string& args) {
          return fmt::format(
              "{} {} {}",
              GbnfWriter::literal(fmt::format(
                  "<|tool_call_begin|>functions.{}:{}<|tool_call_argument_begin|>", name, k)),
              args, GbnfWriter::literal("<|tool_call_end|>"));
        });
        seq = k == 0 ? one + " " + seq : w.rule("more", fmt::format("( {} {} )?", one, seq));
      }
      body = fmt::format("{} {} {}", GbnfWriter::literal("<|tool_calls_section_begin|>"), seq,
                         GbnfWriter::literal("<|tool_calls_section_end|>"));
      break;
    }
    case ChatSyntax::kHarmony:
      // The prompt ends with "<|start|>assistant"; a call is one message, ended by <|call|> (an
      // end-of-generation token).
      body = calls([](const std::string& n, const std::string& args) {
        return fmt::format(
            "{} {}",
            GbnfWriter::literal(" to=functions." + n + "<|channel|>commentary json<|message|>"),
            args);
      });
      break;
    default:
      fail(
          "forcing a tool call is not supported for the {} chat syntax (its calls have no JSON "
          "form to constrain)",
          chat_syntax_name(syntax));
  }
  if (starts_in_reasoning && syntax != ChatSyntax::kHarmony) body = "\"</think>\" " + body;
  return w.text(body);
}

}  // namespace sluice
