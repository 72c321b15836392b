// Request parsing and response formatting for the OpenAI and Anthropic routes (see api.h).
// Sampling defaults are the engine's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05); a
// request without a seed gets a random one. max_tokens defaults: completions 16 (as OpenAI),
// chat up to the context; Anthropic requires it.
#include "api.h"

#include <fmt/format.h>

#include <limits>
#include <random>

namespace sluice::server {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message, const char* code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", param, code);
}

// A field that is present and not null, else nullptr.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double def, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name), "invalid_type");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

int64_t integer(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name), "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
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
  if (!v->is_array()) bad(name, fmt::format("'{}' must be a string or an array of strings", name), "invalid_type");
  if (v->size() > 16) bad(name, fmt::format("'{}' has {} entries; at most 16 are allowed", name, v->size()));
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string()) bad(name, fmt::format("'{}' must contain only strings", name), "invalid_type");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// Content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, fmt::format("'{}' must be a string or an array of content parts", param), "invalid_type");
  std::string out;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(param, fmt::format("'{}' parts must be objects with a string 'type'", param), "invalid_type");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad(param, fmt::format("'{}': content part type '{}' is not supported (only text)", param, type));
    if (!part.contains("text") || !part["text"].is_string())
      bad(param, fmt::format("'{}': a text part needs a string 'text'", param), "invalid_type");
    out += part["text"].get<std::string>();
  }
  return out;
}

// Validates messages and turns content arrays into strings (what chat templates expect).
json normalize_messages(const json& messages, const char* name, bool anthropic) {
  if (!messages.is_array()) bad(name, fmt::format("'{}' must be an array of messages", name), "invalid_type");
  if (messages.empty()) bad(name, fmt::format("'{}' must not be empty", name));
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string p = fmt::format("{}[{}]", name, i);
    if (!m.is_object()) bad(p, fmt::format("'{}' must be an object", p), "invalid_type");
    if (!m.contains("role") || !m["role"].is_string()) bad(p + ".role", fmt::format("'{}.role' must be a string", p), "invalid_type");
    const std::string role = m["role"].get<std::string>();
    if (anthropic ? role != "user" && role != "assistant"
                  : role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad(p + ".role", fmt::format("'{}.role' '{}' is not a known role", p, role));
    json n = m;
    if (m.contains("content")) n["content"] = content_text(m["content"], p + ".content");
    else if (anthropic || !m.contains("tool_calls")) bad(p + ".content", fmt::format("'{}.content' is missing", p));
    out.push_back(std::move(n));
  }
  return out;
}

// Completions "prompt": a string, a one-element array of strings, or an array of token ids.
std::vector<int32_t> completion_prompt(const json& body, Engine& engine) {
  const json* v = field(body, "prompt");
  if (!v) bad("prompt", "'prompt' is required", "missing_required_parameter");
  if (v->is_string()) return engine.tokenize(v->get<std::string>(), true);
  if (!v->is_array()) bad("prompt", "'prompt' must be a string, an array of strings or an array of token ids", "invalid_type");
  if (v->size() == 1 && (*v)[0].is_string()) return engine.tokenize((*v)[0].get<std::string>(), true);
  std::vector<int32_t> ids;
  for (const auto& t : *v) {
    if (t.is_string()) bad("prompt", "several prompts in one request are not supported; send one request per prompt");
    if (!t.is_number_integer()) bad("prompt", "'prompt' token ids must be integers", "invalid_type");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= engine.info().n_vocab)
      bad("prompt", fmt::format("token id {} is outside the vocabulary (0..{})", id, engine.info().n_vocab - 1));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string finish_reason(const GenerateResult& r) {
  return r.finish == FinishReason::kLength ? "length" : "stop";
}

std::string stop_reason(const GenerateResult& r) {
  if (r.finish == FinishReason::kLength) return "max_tokens";
  return r.finish == FinishReason::kStop ? "stop_sequence" : "end_turn";
}

std::string sse(const json& j) { return "data: " + to_text(j) + "\n\n"; }
std::string sse_event(const char* event, const json& j) { return fmt::format("event: {}\ndata: {}\n\n", event, to_text(j)); }

}  // namespace

ParsedRequest parse_request(Api api, const std::string& text, Engine& engine) {
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) bad("", "the request body is not valid JSON", "invalid_json");
  if (!body.is_object()) bad("", "the request body must be a JSON object", "invalid_type");
  ParsedRequest pr;
  pr.api = api;
  if (const json* m = field(body, "model"); m && !m->is_string()) bad("model", "'model' must be a string", "invalid_type");
  pr.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object", "invalid_type");
    pr.include_usage = boolean(*so, "include_usage", false);
  }
  if (integer(body, "n", 1, 1, std::numeric_limits<int32_t>::max()) != 1) bad("n", "only n = 1 is supported");

  GenerateOptions& o = pr.request.options;
  SamplingOptions& s = o.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", s.temperature, 0, 2));
  s.top_p = static_cast<float>(number(body, "top_p", s.top_p, 0, 1));
  s.top_k = static_cast<int>(integer(body, "top_k", s.top_k, 0, 1 << 24));
  s.min_p = static_cast<float>(number(body, "min_p", s.min_p, 0, 1));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0, -2, 2));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0, -2, 2));
  s.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 1, 0, 10));
  if (field(body, "seed")) s.seed = static_cast<uint64_t>(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  else s.seed = std::random_device{}();
  o.stop_at_eog = !boolean(body, "ignore_eos", false);  // llama.cpp extension
  const int kMaxInt = std::numeric_limits<int32_t>::max();

  if (api == Api::kCompletion) {
    o.stop = stops(body, "stop");
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", 16, 0, kMaxInt));
    pr.request.prompt = completion_prompt(body, engine);
    pr.prompt_field = "prompt";
    return pr;
  }
  json messages;
  std::string tools;
  if (api == Api::kChat) {
    o.stop = stops(body, "stop");
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required", "missing_required_parameter");
    messages = normalize_messages(*msgs, "messages", false);
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", kMaxInt, 0, kMaxInt));
    if (field(body, "max_completion_tokens"))
      o.max_tokens = static_cast<int>(integer(body, "max_completion_tokens", kMaxInt, 0, kMaxInt));
    if (const json* t = field(body, "tools")) {
      if (!t->is_array()) bad("tools", "'tools' must be an array", "invalid_type");
      tools = to_text(*t);
    }
  } else {
    o.stop = stops(body, "stop_sequences");
    if (!field(body, "max_tokens")) bad("max_tokens", "'max_tokens' is required", "missing_required_parameter");
    o.max_tokens = static_cast<int>(integer(body, "max_tokens", 0, 1, kMaxInt));
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required", "missing_required_parameter");
    messages = normalize_messages(*msgs, "messages", true);
    if (const json* sys = field(body, "system"))
      messages.insert(messages.begin(), json{{"role", "system"}, {"content", content_text(*sys, "system")}});
  }
  pr.prompt_field = "messages";
  // Without a chat template the prompt is plain "User:"/"Assistant:" text; stop before the model
  // writes the user's next turn itself.
  for (std::string& stop : chat_stop_strings(engine)) o.stop.push_back(std::move(stop));
  try {
    pr.request.prompt = chat_prompt_tokens(engine, to_text(messages), tools);
  } catch (const std::exception& e) {
    bad("messages", e.what());
  }
  return pr;
}

nlohmann::json error_body(Api api, const ApiError& e) {
  if (api == Api::kMessages)
    return {{"type", "error"}, {"error", {{"type", e.type}, {"message", e.what()}}}};
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

nlohmann::json ResponseFormat::full(const GenerateResult& r) const {
  const int n_gen = static_cast<int>(r.tokens.size());
  if (api == Api::kMessages)
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", json::array({{{"type", "text"}, {"text", r.text}}})},
            {"stop_reason", stop_reason(r)},
            {"stop_sequence", nullptr},
            {"usage", {{"input_tokens", n_prompt_tokens}, {"output_tokens", n_gen}}}};
  json usage = {{"prompt_tokens", n_prompt_tokens}, {"completion_tokens", n_gen}, {"total_tokens", n_prompt_tokens + n_gen}};
  json choice = {{"index", 0}, {"finish_reason", finish_reason(r)}, {"logprobs", nullptr}};
  if (api == Api::kChat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  else choice["text"] = r.text;
  return {{"id", id},
          {"object", api == Api::kChat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage}};
}

std::string ResponseFormat::stream_begin() const {
  if (api == Api::kMessages) {
    json msg = {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model},
                {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", n_prompt_tokens}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", msg}}) +
           sse_event("content_block_start",
                     {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}}) +
           sse_event("ping", {{"type", "ping"}});
  }
  if (api == Api::kCompletion) return {};
  return sse({{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
              {"choices", json::array({{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"finish_reason", nullptr}, {"logprobs", nullptr}}})}});
}

std::string ResponseFormat::stream_text(const std::string& text) const {
  if (api == Api::kMessages)
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
  json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
  if (api == Api::kChat) choice["delta"] = {{"content", text}};
  else choice["text"] = text;
  return sse({{"id", id}, {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created}, {"model", model}, {"choices", json::array({choice})}});
}

std::string ResponseFormat::stream_end(const GenerateResult& r, bool include_usage) const {
  const int n_gen = static_cast<int>(r.tokens.size());
  if (api == Api::kMessages)
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
           sse_event("message_delta", {{"type", "message_delta"},
                                       {"delta", {{"stop_reason", stop_reason(r)}, {"stop_sequence", nullptr}}},
                                       {"usage", {{"output_tokens", n_gen}}}}) +
           sse_event("message_stop", {{"type", "message_stop"}});
  const char* object = api == Api::kChat ? "chat.completion.chunk" : "text_completion";
  json choice = {{"index", 0}, {"finish_reason", finish_reason(r)}, {"logprobs", nullptr}};
  if (api == Api::kChat) choice["delta"] = json::object();
  else choice["text"] = "";
  std::string out = sse({{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", json::array({choice})}});
  if (include_usage)
    out += sse({{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", json::array()},
                {"usage", {{"prompt_tokens", n_prompt_tokens}, {"completion_tokens", n_gen},
                           {"total_tokens", n_prompt_tokens + n_gen}}}});
  return out + "data: [DONE]\n\n";
}

std::string ResponseFormat::stream_error(const ApiError& e) const {
  if (api == Api::kMessages) return sse_event("error", error_body(api, e));
  return sse(error_body(api, e)) + "data: [DONE]\n\n";
}

}  // namespace sluice::server
