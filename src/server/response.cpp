// Response bodies and SSE events of the OpenAI and Anthropic routes (see api.h). Chat replies pass
// through the model family's ChatOutputParser: reasoning becomes reasoning_content (OpenAI) or a
// thinking block (Anthropic), tool calls become tool_calls (OpenAI: a name chunk, then an
// arguments chunk per call; finish_reason "tool_calls") or tool_use blocks (Anthropic: an
// input_json_delta per call; stop_reason "tool_use"). Anthropic content blocks open lazily, one per
// run of the same kind.
#include <fmt/format.h>

#include <utility>

#include "api.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

std::string sse(const json& j) {
  return "data: " + to_text(j) + "\n\n";
}
std::string sse_event(const char* event, const json& j) {
  return fmt::format("event: {}\ndata: {}\n\n", event, to_text(j));
}

std::string finish_reason(const GenerateResult& r, bool calls) {
  if (r.finish == FinishReason::kLength) return "length";
  return calls ? "tool_calls" : "stop";
}

std::string stop_reason(const GenerateResult& r, bool calls) {
  if (r.finish == FinishReason::kLength) return "max_tokens";
  if (calls) return "tool_use";
  return r.finish == FinishReason::kStop ? "stop_sequence" : "end_turn";
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

}  // namespace

std::vector<ChatDelta> ResponseFormat::read(const std::string& text, bool final) {
  if (!parser_) parser_ = std::make_shared<ChatOutputParser>(syntax, output);
  std::vector<ChatDelta> out = parser_->push(text);
  if (final)
    for (ChatDelta& d : parser_->finish()) out.push_back(std::move(d));
  // parallel_tool_calls: false keeps the first call.
  std::erase_if(out, [&](const ChatDelta& d) {
    return d.kind == ChatDelta::Kind::kToolCall && max_tool_calls >= 0 && d.index >= max_tool_calls;
  });
  for (const ChatDelta& d : out) n_calls_ += d.kind == ChatDelta::Kind::kToolCall;
  return out;
}

json ResponseFormat::logprobs_json(const std::vector<TokenLogprob>& lps) {
  if (!engine) return nullptr;
  auto text = [&](int32_t t) { return engine->detokenize(std::span<const int32_t>(&t, 1)); };
  if (api == Api::kChat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string s = text(lp.token);
      json top = json::array();
      for (const auto& [t, l] : lp.top) {
        const std::string ts = text(t);
        top.push_back({{"token", ts}, {"logprob", l}, {"bytes", bytes_of(ts)}});
      }
      content.push_back(
          {{"token", s}, {"logprob", lp.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string s = text(lp.token);
    tokens.push_back(s);
    logprobs.push_back(lp.logprob);
    json alt = json::object();
    for (const auto& [t, l] : lp.top) alt[text(t)] = l;
    top.push_back(alt);
    offsets.push_back(text_offset_);
    text_offset_ += s.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json ResponseFormat::full(const GenerateResult& r) {
  const int n_gen = static_cast<int>(r.tokens.size());
  ChatOutput parts;
  if (parsed()) parts.add(read(r.text, true));
  const bool calls = !parts.tool_calls.empty();
  if (api == Api::kMessages) {
    json content = json::array();
    if (!parts.reasoning.empty())
      content.push_back({{"type", "thinking"}, {"thinking", parts.reasoning}, {"signature", ""}});
    if (!parts.content.empty() || (!calls && parts.reasoning.empty()))
      content.push_back({{"type", "text"}, {"text", parts.content}});
    for (const ChatDelta& c : parts.tool_calls)
      content.push_back(
          {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::parse(c.text)}});
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", content},
            {"stop_reason", stop_reason(r, calls)},
            {"stop_sequence", nullptr},
            {"usage", {{"input_tokens", n_prompt_tokens}, {"output_tokens", n_gen}}}};
  }
  json usage = {{"prompt_tokens", n_prompt_tokens},
                {"completion_tokens", n_gen},
                {"total_tokens", n_prompt_tokens + n_gen}};
  json choice = {{"index", index}, {"finish_reason", finish_reason(r, calls)}, {"logprobs", nullptr}};
  if (engine) choice["logprobs"] = logprobs_json(r.logprobs);
  if (api == Api::kChat) {
    json message = {
        {"role", "assistant"},
        {"content", calls && parts.content.empty() ? json(nullptr) : json(parts.content)}};
    if (!parts.reasoning.empty()) message["reasoning_content"] = parts.reasoning;
    if (calls) {
      message["tool_calls"] = json::array();
      for (const ChatDelta& c : parts.tool_calls)
        message["tool_calls"].push_back({{"id", c.id},
                                         {"type", "function"},
                                         {"function", {{"name", c.name}, {"arguments", c.text}}}});
    }
    choice["message"] = message;
  } else {
    choice["text"] = r.text;
  }
  return {{"id", id},
          {"object", api == Api::kChat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage}};
}

std::string ResponseFormat::chat_chunk(json delta, json logprobs) const {
  json choice = {{"index", index}, {"finish_reason", nullptr}, {"logprobs", std::move(logprobs)}};
  if (api == Api::kChat)
    choice["delta"] = std::move(delta);
  else
    choice["text"] = std::move(delta);
  return sse({{"id", id},
              {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})}});
}

std::string ResponseFormat::stream_begin() {
  if (api == Api::kMessages) {
    json msg = {{"id", id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", n_prompt_tokens}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", msg}}) +
           sse_event("ping", {{"type", "ping"}});
  }
  if (api == Api::kCompletion) return {};
  return chat_chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
}

std::string ResponseFormat::anthropic_close() {
  if (block_ < 0) return {};
  const int index = block_;
  block_ = -1;
  return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
}

std::string ResponseFormat::anthropic_block(const ChatDelta& d) {
  std::string out;
  const bool tool = d.kind == ChatDelta::Kind::kToolCall;
  if (block_ < 0 || block_kind_ != d.kind || tool) {
    out += anthropic_close();
    json start =
        tool ? json{{"type", "tool_use"}, {"id", d.id}, {"name", d.name}, {"input", json::object()}}
        : d.kind == ChatDelta::Kind::kReasoning
            ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
            : json{{"type", "text"}, {"text", ""}};
    block_ = next_block_++;
    block_kind_ = d.kind;
    out +=
        sse_event("content_block_start",
                  {{"type", "content_block_start"}, {"index", block_}, {"content_block", start}});
  }
  json delta = tool ? json{{"type", "input_json_delta"}, {"partial_json", d.text}}
               : d.kind == ChatDelta::Kind::kReasoning
                   ? json{{"type", "thinking_delta"}, {"thinking", d.text}}
                   : json{{"type", "text_delta"}, {"text", d.text}};
  out += sse_event("content_block_delta",
                   {{"type", "content_block_delta"}, {"index", block_}, {"delta", delta}});
  if (tool) out += anthropic_close();
  return out;
}

std::string ResponseFormat::stream_deltas(const std::vector<ChatDelta>& deltas, json lp) {
  std::string out;
  for (const ChatDelta& d : deltas) {
    if (api == Api::kMessages) {
      out += anthropic_block(d);
    } else if (d.kind == ChatDelta::Kind::kToolCall) {
      out += chat_chunk(
          {{"tool_calls", json::array({{{"index", d.index},
                                        {"id", d.id},
                                        {"type", "function"},
                                        {"function", {{"name", d.name}, {"arguments", ""}}}}})}},
          std::exchange(lp, nullptr));
      out +=
          chat_chunk({{"tool_calls",
                       json::array({{{"index", d.index}, {"function", {{"arguments", d.text}}}}})}},
                     nullptr);
    } else {
      out += chat_chunk(
          {{d.kind == ChatDelta::Kind::kReasoning ? "reasoning_content" : "content", d.text}},
          std::exchange(lp, nullptr));
    }
  }
  // Logprobs of tokens whose text is still held back travel in an empty delta.
  if (!lp.is_null() && api == Api::kChat) out += chat_chunk(json::object(), lp);
  return out;
}

std::string ResponseFormat::stream_text(const std::string& text,
                                        const std::vector<TokenLogprob>& lps) {
  json lp = engine && !lps.empty() ? logprobs_json(lps) : json(nullptr);
  if (!parsed()) return text.empty() && lp.is_null() ? std::string() : chat_chunk(text, lp);
  return stream_deltas(read(text, false), lp);
}

std::string ResponseFormat::stream_end(const GenerateResult& r, bool include_usage) {
  const int n_gen = static_cast<int>(r.tokens.size());
  if (api != Api::kMessages) return stream_choice_end(r) + stream_close(include_usage, n_gen);
  std::string out = stream_deltas(read("", true), nullptr);
  const bool calls = n_calls_ > 0;
  {
    if (next_block_ == 0) out += anthropic_block({ChatDelta::Kind::kContent, "", "", "", 0});
    return out + anthropic_close() +
           sse_event(
               "message_delta",
               {{"type", "message_delta"},
                {"delta", {{"stop_reason", stop_reason(r, calls)}, {"stop_sequence", nullptr}}},
                {"usage", {{"output_tokens", n_gen}}}}) +
           sse_event("message_stop", {{"type", "message_stop"}});
  }
}

std::string ResponseFormat::stream_choice_end(const GenerateResult& r) {
  std::string out = parsed() ? stream_deltas(read("", true), nullptr) : std::string();
  json choice = {{"index", index}, {"finish_reason", finish_reason(r, n_calls_ > 0)}, {"logprobs", nullptr}};
  if (api == Api::kChat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  return out + sse({{"id", id},
                    {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", json::array({choice})}});
}

std::string ResponseFormat::stream_close(bool include_usage, int n_gen) {
  std::string out;
  if (include_usage)
    out += sse({{"id", id},
                {"object", api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage",
                 {{"prompt_tokens", n_prompt_tokens},
                  {"completion_tokens", n_gen},
                  {"total_tokens", n_prompt_tokens + n_gen}}}});
  return out + "data: [DONE]\n\n";
}

json ResponseFormat::merge(const std::vector<json>& bodies) {
  json out = bodies.at(0);
  int completion = out["usage"]["completion_tokens"];
  for (size_t i = 1; i < bodies.size(); ++i) {
    out["choices"].push_back(bodies[i]["choices"][0]);
    completion += bodies[i]["usage"]["completion_tokens"].get<int>();
  }
  out["usage"]["completion_tokens"] = completion;
  out["usage"]["total_tokens"] = out["usage"]["prompt_tokens"].get<int>() + completion;
  return out;
}

std::string ResponseFormat::stream_error(const ApiError& e) const {
  if (api == Api::kMessages) return sse_event("error", error_body(api, e));
  return sse(error_body(api, e)) + "data: [DONE]\n\n";
}

}  // namespace sluice::server
