// Request parsing and response formatting for the OpenAI and Anthropic routes (see api.h).
// Sampling defaults are the engine's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05); a
// request without a seed gets a random one. max_tokens defaults: completions 16 (as OpenAI),
// chat up to the context; Anthropic requires it.
#include "api.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <random>
#include <string_view>

#include "fields.h"
#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

// OpenAI allows 20 alternatives per token (chat) and 5 (completions); both get 20 here.
constexpr int kMaxLogprobs = 20;
// OpenAI's limit on choices per request; each one holds a slot while it runs.
constexpr int kMaxChoices = 128;

double number(const json& body, const char* name, double def, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name), "invalid_type");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

int64_t integer(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number_integer())
    bad(name, fmt::format("'{}' must be an integer", name), "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

bool boolean(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name), "invalid_type");
  return v->get<bool>();
}

// "stop" / "stop_sequences": a string or an array of up to 16 non-empty strings.
std::vector<std::string> stops(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array())
    bad(name, fmt::format("'{}' must be a string or an array of strings", name), "invalid_type");
  if (v->size() > 16)
    bad(name, fmt::format("'{}' has {} entries; at most 16 are allowed", name, v->size()));
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string())
      bad(name, fmt::format("'{}' must contain only strings", name), "invalid_type");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// Content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(param, fmt::format("'{}' must be a string or an array of content parts", param),
        "invalid_type");
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(param, fmt::format("'{}' parts must be objects with a string 'type'", param),
          "invalid_type");
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      bad(param,
          fmt::format("'{}': content part type '{}' is not supported (only text)", param, type));
    if (!part.contains("text") || !part["text"].is_string())
      bad(param, fmt::format("'{}': a text part needs a string 'text'", param), "invalid_type");
    out += part["text"].get<std::string>();
  }
  return out;
}

// A tool call's arguments as an object (chat templates iterate them or dump them with tojson);
// clients send the JSON text OpenAI returned.
json call_arguments(const json& args, const std::string& param) {
  json a = args.is_string() ? json::parse(args.get<std::string>(), nullptr, false) : args;
  if (!a.is_object())
    bad(param, fmt::format("'{}' must be a JSON object or a string holding one", param),
        "invalid_type");
  return a;
}

// The checks OpenAI and Anthropic messages share: `messages` is a non-empty array of objects,
// each with a string role among `roles`. Calls each(message, its path "messages[i]", role).
template <class Each>
void for_each_message(const json& messages, std::initializer_list<std::string_view> roles, Each each) {
  if (!messages.is_array())
    bad("messages", "'messages' must be an array of messages", "invalid_type");
  if (messages.empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(p, fmt::format("'{}' must be an object", p), "invalid_type");
    if (!m.contains("role") || !m["role"].is_string())
      bad(p + ".role", fmt::format("'{}.role' must be a string", p), "invalid_type");
    const std::string role = m["role"].get<std::string>();
    if (std::find(roles.begin(), roles.end(), role) == roles.end())
      bad(p + ".role", fmt::format("'{}.role' '{}' is not a known role", p, role));
    each(m, p, role);
  }
}

// Validates OpenAI messages, turns content arrays into strings and tool-call arguments into
// objects (what chat templates expect).
json openai_messages(const json& messages) {
  json out = json::array();
  for_each_message(messages, {"system", "user", "assistant", "tool", "developer"},
                   [&](const json& m, const std::string& p, const std::string& role) {
    json n = m;
    if (m.contains("content"))
      n["content"] = content_text(m["content"], p + ".content");
    else if (!m.contains("tool_calls"))
      bad(p + ".content", fmt::format("'{}.content' is missing", p));
    if (const json* calls = field(m, "tool_calls")) {
      if (role != "assistant" || !calls->is_array())
        bad(p + ".tool_calls",
            fmt::format("'{}.tool_calls' must be an array on an assistant message", p),
            "invalid_type");
      for (size_t j = 0; j < calls->size(); ++j) {
        const std::string q = fmt::format("{}.tool_calls[{}]", p, j);
        const json& c = (*calls)[j];
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
          bad(q,
              fmt::format("'{}' must be "
                          "{{\"type\":\"function\",\"function\":{{\"name\":…,\"arguments\":…}}}}",
                          q),
              "invalid_type");
        n["tool_calls"][j]["function"]["arguments"] =
            call_arguments(c["function"].value("arguments", json("{}")), q + ".function.arguments");
      }
    }
    // gpt-oss's template reads an assistant's reasoning as `thinking`.
    if (m.contains("reasoning_content") && !m.contains("thinking"))
      n["thinking"] = m["reasoning_content"];
    out.push_back(std::move(n));
  });
  return out;
}

// Anthropic messages as OpenAI ones: text blocks joined, thinking as reasoning_content, tool_use
// blocks as tool_calls, and tool_result blocks as "tool" messages before the user's text.
json anthropic_messages(const json& messages) {
  json out = json::array();
  for_each_message(messages, {"user", "assistant"}, [&](const json& m, const std::string& p, const std::string& role) {
    if (!m.contains("content")) bad(p + ".content", fmt::format("'{}.content' is missing", p));
    const json& content = m["content"];
    if (!content.is_array()) {
      out.push_back({{"role", role}, {"content", content_text(content, p + ".content")}});
      return;
    }
    std::string text, thinking;
    json calls = json::array();
    for (size_t j = 0; j < content.size(); ++j) {
      const json& b = content[j];
      const std::string q = fmt::format("{}.content[{}]", p, j);
      if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
        bad(q, fmt::format("'{}' must be an object with a string 'type'", q), "invalid_type");
      const std::string type = b["type"].get<std::string>();
      if (type == "text") {
        text += content_text(json::array({b}), q);
      } else if (type == "thinking" && role == "assistant" && b.contains("thinking") &&
                 b["thinking"].is_string()) {
        thinking += b["thinking"].get<std::string>();
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
            !b["name"].is_string())
          bad(q, fmt::format("'{}' (tool_use) needs a string 'id' and 'name'", q), "invalid_type");
        calls.push_back(
            {{"id", b["id"]},
             {"type", "function"},
             {"function",
              {{"name", b["name"]},
               {"arguments", call_arguments(b.value("input", json::object()), q + ".input")}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
          bad(q, fmt::format("'{}' (tool_result) needs a string 'tool_use_id'", q), "invalid_type");
        std::string result =
            b.contains("content") ? content_text(b["content"], q + ".content") : "";
        if (b.value("is_error", false)) result = "Error: " + result;
        out.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
      } else {
        bad(q, fmt::format("'{}': content block type '{}' is not supported on a {} message", q,
                           type, role));
      }
    }
    if (role == "user") {
      if (!text.empty() || out.empty() || out.back()["role"] != "tool")
        out.push_back({{"role", "user"}, {"content", text}});
      return;
    }
    json a = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) a["tool_calls"] = calls;
    if (!thinking.empty()) a["reasoning_content"] = a["thinking"] = thinking;
    out.push_back(std::move(a));
  });
  return out;
}

// `tools` in OpenAI's shape ([{"type":"function","function":{"name",…}}]); Anthropic's
// [{"name","description","input_schema"}] is converted to it.
json tool_list(const json& tools, bool anthropic) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array", "invalid_type");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string p = fmt::format("tools[{}]", i);
    if (anthropic) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        bad(p, fmt::format("'{}' must be an object with a string 'name'", p), "invalid_type");
      json f = {{"name", t["name"]}, {"parameters", t.value("input_schema", json::object())}};
      if (t.contains("description")) f["description"] = t["description"];
      out.push_back({{"type", "function"}, {"function", f}});
      continue;
    }
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      bad(p, fmt::format("'{}' must be {{\"type\":\"function\",\"function\":{{\"name\":…}}}}", p),
          "invalid_type");
    out.push_back(t);
  }
  return out;
}

// Completions "prompt": a string, a one-element array of strings, or an array of token ids.
std::vector<int32_t> completion_prompt(const json& body, Engine& engine) {
  const json* v = field(body, "prompt");
  if (!v) bad("prompt", "'prompt' is required", "missing_required_parameter");
  if (v->is_string()) return engine.tokenize(v->get<std::string>(), true);
  if (!v->is_array())
    bad("prompt", "'prompt' must be a string, an array of strings or an array of token ids",
        "invalid_type");
  if (v->size() == 1 && (*v)[0].is_string())
    return engine.tokenize((*v)[0].get<std::string>(), true);
  std::vector<int32_t> ids;
  for (const auto& t : *v) {
    if (t.is_string())
      bad("prompt",
          "several prompts in one request are not supported; send one request per prompt");
    if (!t.is_number_integer())
      bad("prompt", "'prompt' token ids must be integers", "invalid_type");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= engine.info().n_vocab)
      bad("prompt", fmt::format("token id {} is outside the vocabulary (0..{})", id,
                                engine.info().n_vocab - 1));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// Values of implemented fields that sluice does not honour: 400 naming them.
void refuse_unimplemented(const json& body) {
  if (boolean(body, "echo", false))
    bad("echo", "'echo': true is not supported", "unsupported_parameter");
  if (const json* s = field(body, "suffix");
      s && !(s->is_string() && s->get<std::string>().empty()))
    bad("suffix", "'suffix' is not supported (insertion needs a fill-in-the-middle prompt)",
        "unsupported_parameter");
  if (integer(body, "best_of", 1, 1, std::numeric_limits<int32_t>::max()) != 1)
    bad("best_of", "only best_of = 1 is supported");
}

// logit_bias: {"token id": bias} (OpenAI) or [[id, bias], ...] (llama-server); a bias of false
// (llama-server) bans the token. Biases lie in [-100, 100]; -100 bans in practice.
std::vector<std::pair<int32_t, float>> logit_bias(const json& body, const Engine& engine) {
  std::vector<std::pair<int32_t, float>> out;
  const json* lb = field(body, "logit_bias");
  if (!lb) return out;
  auto add = [&](const std::string& key, const json& v) {
    const std::string p = "logit_bias";
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size())
      bad(p, fmt::format("'logit_bias' key '{}' is not a token id", key), "invalid_type");
    if (id < 0 || id >= engine.info().n_vocab)
      bad(p, fmt::format("'logit_bias' token id {} is outside the vocabulary (0..{})", id,
                         engine.info().n_vocab - 1));
    float bias = 0;
    if (v.is_boolean() && !v.get<bool>())
      bias = -std::numeric_limits<float>::infinity();
    else if (v.is_number() && v.get<double>() >= -100 && v.get<double>() <= 100)
      bias = v.get<float>();
    else
      bad(p, fmt::format("'logit_bias' of token {} must be a number between -100 and 100", id),
          "invalid_value");
    out.emplace_back(static_cast<int32_t>(id), bias);
  };
  if (lb->is_object()) {
    for (const auto& [key, v] : lb->items()) add(key, v);
  } else if (lb->is_array()) {
    for (const json& pair : *lb) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
        bad("logit_bias", "'logit_bias' as an array holds [token id, bias] pairs", "invalid_type");
      add(std::to_string(pair[0].get<int64_t>()), pair[1]);
    }
  } else {
    bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases",
        "invalid_type");
  }
  return out;
}

}  // namespace

ParsedRequest parse_request(Api api, const std::string& text, Engine& engine) {
  json raw = json::parse(text, nullptr, false);
  if (raw.is_discarded()) bad("", "the request body is not valid JSON", "invalid_json");
  if (!raw.is_object()) bad("", "the request body must be a JSON object", "invalid_type");
  const json body = normalize_fields(raw, api);
  refuse_unimplemented(body);
  ParsedRequest pr;
  pr.api = api;
  if (const json* m = field(body, "model"); m && !m->is_string())
    bad("model", "'model' must be a string", "invalid_type");
  pr.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object())
      bad("stream_options", "'stream_options' must be an object", "invalid_type");
    for (const auto& [key, value] : so->items())
      if (key != "include_usage")
        bad("stream_options." + key, fmt::format("'stream_options.{}' is not supported", key),
            "unsupported_parameter");
    pr.include_usage = boolean(*so, "include_usage", false);
  }
  pr.n = static_cast<int>(integer(body, "n", 1, 1, kMaxChoices));

  GenerateOptions& o = pr.request.options;
  SamplingOptions& s = o.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", s.temperature, 0, 2));
  s.top_p = static_cast<float>(number(body, "top_p", s.top_p, 0, 1));
  s.top_k = static_cast<int>(integer(body, "top_k", s.top_k, 0, 1 << 24));
  s.min_p = static_cast<float>(number(body, "min_p", s.min_p, 0, 1));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0, -2, 2));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0, -2, 2));
  s.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 1, 0, 10));
  // −1 (llama-server): the whole context.
  s.penalty_last_n = static_cast<int>(integer(body, "penalty_last_n", s.penalty_last_n, -1, 1 << 24));
  if (s.penalty_last_n < 0) s.penalty_last_n = 1 << 24;
  s.logit_bias = logit_bias(body, engine);
  if (field(body, "seed"))
    s.seed = static_cast<uint64_t>(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()));
  else
    s.seed = std::random_device{}();
  o.stop_at_eog = !boolean(body, "ignore_eos", false);  // llama.cpp extension
  const int kMaxInt = std::numeric_limits<int32_t>::max();

  const OutputConstraint constraint = parse_output_constraint(body);
  if (api == Api::kCompletion) {
    o.stop = stops(body, "stop");
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", 16, 0, kMaxInt));
    o.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, kMaxLogprobs));
    pr.request.prompt = completion_prompt(body, engine);
    pr.prompt_field = "prompt";
    o.grammar = reply_grammar(engine, ToolChoice{}, constraint, ChatSyntax::kPlain, "", false, api);
    return pr;
  }
  json messages;
  json tools;
  ChatPromptOptions prompt_options;
  const ToolChoice choice = parse_tool_choice(body, api);
  pr.max_tool_calls = choice.parallel ? -1 : 1;
  if (api == Api::kChat) {
    o.stop = stops(body, "stop");
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required", "missing_required_parameter");
    messages = openai_messages(*msgs);
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", kMaxInt, 0, kMaxInt));
    if (field(body, "max_completion_tokens"))
      o.max_tokens = static_cast<int>(integer(body, "max_completion_tokens", kMaxInt, 0, kMaxInt));
    if (const json* t = field(body, "tools")) tools = tool_list(*t, false);
    if (boolean(body, "logprobs", false))
      o.logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, kMaxLogprobs));
    else if (field(body, "top_logprobs"))
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (const json* re = field(body, "reasoning_effort")) {
      if (!re->is_string() || (*re != "low" && *re != "medium" && *re != "high"))
        bad("reasoning_effort", "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
      prompt_options.reasoning_effort = re->get<std::string>();
    }
    if (const json* kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object())
        bad("chat_template_kwargs", "'chat_template_kwargs' must be an object", "invalid_type");
      for (const auto& [key, value] : kw->items())
        if (key != "enable_thinking")
          bad("chat_template_kwargs." + key,
              fmt::format("'chat_template_kwargs.{}' is not supported (only enable_thinking)", key),
              "unsupported_parameter");
      if (kw->contains("enable_thinking"))
        prompt_options.enable_thinking = boolean(*kw, "enable_thinking", true);
    }
  } else {
    o.stop = stops(body, "stop_sequences");
    if (!field(body, "max_tokens"))
      bad("max_tokens", "'max_tokens' is required", "missing_required_parameter");
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", 0, 1, kMaxInt));
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required", "missing_required_parameter");
    messages = anthropic_messages(*msgs);
    if (const json* sys = field(body, "system"))
      messages.insert(messages.begin(),
                      json{{"role", "system"}, {"content", content_text(*sys, "system")}});
    if (const json* t = field(body, "tools")) tools = tool_list(*t, true);
    // Extended thinking: the template's thinking switch; the reasoning counts against max_tokens,
    // and budget_tokens must stay below it (Anthropic's rule), so max_tokens bounds both.
    if (const json* th = field(body, "thinking")) {
      const std::string type = th->is_object() ? th->value("type", "") : "";
      if (type != "enabled" && type != "disabled")
        bad("thinking", "'thinking.type' must be \"enabled\" or \"disabled\"");
      prompt_options.enable_thinking = type == "enabled";
      if (type == "enabled" && integer(*th, "budget_tokens", 1024, 1, kMaxInt) >= o.max_tokens)
        bad("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
    }
  }
  pr.prompt_field = "messages";
  if (choice.forced() || constraint.any()) {
    // The grammar covers the whole reply, so there is no room for a reasoning block: templates
    // with a thinking switch get it off unless the client turned it on, which is refused.
    if (prompt_options.enable_thinking.value_or(false))
      bad(api == Api::kMessages ? "thinking" : "chat_template_kwargs.enable_thinking",
          fmt::format("thinking cannot be combined with '{}': the constraint covers the whole reply",
                      choice.forced() ? "tool_choice" : constraint.field));
    prompt_options.enable_thinking = false;
  }
  if (choice.mode == ToolChoice::Mode::kNone) tools = json();
  // Without a chat template the prompt is plain "User:"/"Assistant:" text; stop before the model
  // writes the user's next turn itself.
  for (std::string& stop : chat_stop_strings(engine)) o.stop.push_back(std::move(stop));
  std::string& rendered = pr.rendered;
  try {
    pr.request.prompt =
        chat_prompt_tokens(engine, to_text(messages), tools.is_null() ? "" : to_text(tools),
                           &rendered, prompt_options);
  } catch (const std::exception& e) {
    bad("messages", e.what());
  }
  pr.syntax = chat_syntax(engine.info().chat_template);
  pr.output.tools = !tools.is_null() && !tools.empty();
  // A prompt that ends with an open <think> (DeepSeek V4 in thinking mode) starts the reply inside
  // it.
  const size_t end = rendered.find_last_not_of(" \n");
  pr.output.starts_in_reasoning =
      end != std::string::npos &&
      std::string_view(rendered).substr(0, end + 1).ends_with("<think>");
  o.grammar = reply_grammar(engine, choice, constraint, pr.syntax, tools.is_null() ? "" : to_text(tools),
                            pr.output.starts_in_reasoning, api);
  return pr;
}

nlohmann::json error_body(Api api, const ApiError& e) {
  if (api == Api::kMessages)
    return {{"type", "error"}, {"error", {{"type", e.type}, {"message", e.message}}}};
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

}  // namespace sluice::server
