// OpenAI's Responses API (POST /v1/responses), which current OpenAI clients use: `input` (a string
// or message / function_call / function_call_output items) and `instructions` become a chat
// conversation and go through the chat request's parsing, so the chat template, tool calls and
// validation are the chat route's. The reply is a response object whose output holds a message
// item (output_text) and one function_call item per tool call, or, streamed, the typed events
// (response.created … response.output_text.delta … response.completed). `previous_response_id`
// continues a conversation this server answered: each response's conversation is kept in memory
// (the most recent 256), and since the continued prompt starts with the earlier one, its KV comes
// from the prefix cache.
#include <fmt/format.h>

#include <ctime>
#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>

#include "routes.h"
#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

// Conversations of earlier responses, by response id.
class Conversations {
 public:
  void put(const std::string& id, json messages) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (order_.size() >= kKeep) {
      by_id_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(id);
    by_id_[id] = std::move(messages);
  }
  std::optional<json> get(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    return it->second;
  }

 private:
  static constexpr size_t kKeep = 256;
  std::mutex mutex_;
  std::deque<std::string> order_;
  std::unordered_map<std::string, json> by_id_;
};

std::string sse_event(const std::string& type, json j, int& sequence) {
  j["type"] = type;
  j["sequence_number"] = sequence++;
  return fmt::format("event: {}\ndata: {}\n\n", type, to_text(j));
}

class ResponsesReply : public Reply {
 public:
  ResponsesReply(std::string id, std::string model, int n_prompt, ChatSyntax syntax, ChatOutputOptions output,
                 json messages, std::shared_ptr<Conversations> store)
      : id_(std::move(id)), model_(std::move(model)), n_prompt_(n_prompt), parser_(syntax, output),
        messages_(std::move(messages)), store_(std::move(store)), created_(std::time(nullptr)) {}

  json full(const GenerateResult& r) override {
    parts_.add(parser_.push(r.text));
    parts_.add(parser_.finish());
    return response(r, "completed");
  }
  std::string stream_begin() override {
    std::string out = sse_event("response.created", {{"response", response_head("in_progress")}}, seq_);
    return out + sse_event("response.in_progress", {{"response", response_head("in_progress")}}, seq_);
  }
  std::string stream_text(const std::string& text, const std::vector<TokenLogprob>&) override {
    return deltas(parser_.push(text));
  }
  std::string stream_end(const GenerateResult& r, bool) override {
    std::string out = deltas(parser_.finish());
    if (message_open_) {
      const json part = {{"type", "output_text"}, {"text", parts_.content}, {"annotations", json::array()}};
      out += sse_event("response.output_text.done",
                       {{"item_id", message_id()}, {"output_index", 0}, {"content_index", 0}, {"text", parts_.content}}, seq_);
      out += sse_event("response.content_part.done",
                       {{"item_id", message_id()}, {"output_index", 0}, {"content_index", 0}, {"part", part}}, seq_);
      out += sse_event("response.output_item.done", {{"output_index", 0}, {"item", message_item("completed")}}, seq_);
    }
    int index = message_open_ ? 1 : 0;
    for (const ChatDelta& c : parts_.tool_calls) {
      json item = call_item(c);
      json added = item;
      added["arguments"] = "";
      added["status"] = "in_progress";
      out += sse_event("response.output_item.added", {{"output_index", index}, {"item", added}}, seq_);
      out += sse_event("response.function_call_arguments.delta",
                       {{"item_id", item["id"]}, {"output_index", index}, {"delta", c.text}}, seq_);
      out += sse_event("response.function_call_arguments.done",
                       {{"item_id", item["id"]}, {"output_index", index}, {"arguments", c.text}}, seq_);
      out += sse_event("response.output_item.done", {{"output_index", index}, {"item", item}}, seq_);
      ++index;
    }
    return out + sse_event("response.completed", {{"response", response(r, "completed")}}, seq_);
  }
  std::string stream_error(const ApiError& e) const override {
    int seq = seq_;
    return sse_event("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)}, {"message", e.message}, {"param", nullptr}}, seq);
  }

 private:
  std::string message_id() const { return "msg_" + id_.substr(5); }
  json message_item(const char* status) const {
    json content = json::array();
    if (message_open_ || !parts_.content.empty())
      content.push_back({{"type", "output_text"}, {"text", parts_.content}, {"annotations", json::array()}});
    return {{"id", message_id()}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
  }
  json call_item(const ChatDelta& c) const {
    return {{"id", "fc_" + c.id}, {"type", "function_call"}, {"status", "completed"},
            {"call_id", c.id},    {"name", c.name},          {"arguments", c.text}};
  }
  json response_head(const char* status) const {
    return {{"id", id_},         {"object", "response"},   {"created_at", created_},
            {"status", status},  {"model", model_},        {"output", json::array()},
            {"error", nullptr},  {"incomplete_details", nullptr}, {"parallel_tool_calls", true},
            {"tool_choice", "auto"}, {"tools", json::array()}};
  }
  json response(const GenerateResult& r, const char* status) {
    json out = response_head(r.finish == FinishReason::kLength ? "incomplete" : status);
    if (r.finish == FinishReason::kLength) out["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (!parts_.content.empty() || parts_.tool_calls.empty()) {
      message_open_ = true;
      out["output"].push_back(message_item("completed"));
    }
    for (const ChatDelta& c : parts_.tool_calls) out["output"].push_back(call_item(c));
    const int n_gen = static_cast<int>(r.tokens.size());
    out["usage"] = {{"input_tokens", n_prompt_},
                    {"input_tokens_details", {{"cached_tokens", r.n_reused}}},
                    {"output_tokens", n_gen},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", n_prompt_ + n_gen}};
    remember();
    return out;
  }
  // The conversation with this reply, for a later previous_response_id.
  void remember() {
    if (remembered_) return;
    remembered_ = true;
    json a = {{"role", "assistant"}, {"content", parts_.content}};
    if (!parts_.tool_calls.empty()) {
      a["tool_calls"] = json::array();
      for (const ChatDelta& c : parts_.tool_calls)
        a["tool_calls"].push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.text}}}});
    }
    json m = messages_;
    m.push_back(std::move(a));
    store_->put(id_, std::move(m));
  }
  std::string deltas(const std::vector<ChatDelta>& ds) {
    std::string out;
    for (const ChatDelta& d : ds) {
      if (d.kind == ChatDelta::Kind::kToolCall) {
        parts_.add({d});
        continue;
      }
      if (d.kind == ChatDelta::Kind::kReasoning) continue;  // not returned (no reasoning items)
      if (!message_open_) {
        json item = message_item("in_progress");  // its content comes with content_part.added
        item["content"] = json::array();
        message_open_ = true;
        out += sse_event("response.output_item.added", {{"output_index", 0}, {"item", item}}, seq_);
        out += sse_event("response.content_part.added",
                         {{"item_id", message_id()}, {"output_index", 0}, {"content_index", 0},
                          {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}},
                         seq_);
      }
      parts_.content += d.text;
      out += sse_event("response.output_text.delta",
                       {{"item_id", message_id()}, {"output_index", 0}, {"content_index", 0}, {"delta", d.text}}, seq_);
    }
    return out;
  }

  std::string id_, model_;
  int n_prompt_;
  ChatOutputParser parser_;
  ChatOutput parts_;
  json messages_;
  std::shared_ptr<Conversations> store_;
  int64_t created_;
  int seq_ = 0;
  bool message_open_ = false, remembered_ = false;
};

// Content of an input message: a string or input_text / output_text parts.
json input_content(const json& c, const std::string& param) {
  if (c.is_string()) return c;
  if (!c.is_array()) bad(param, fmt::format("'{}' must be a string or an array of content parts", param), "invalid_type");
  std::string text;
  for (const json& p : c) {
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if ((type != "input_text" && type != "output_text") || !p.contains("text") || !p["text"].is_string())
      bad(param, fmt::format("'{}': only input_text and output_text parts are supported", param), "unsupported_parameter");
    text += p["text"].get<std::string>();
  }
  return text;
}

// Responses input items as chat messages.
json input_messages(const json& input) {
  json out = json::array();
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return out;
  }
  if (!input.is_array()) bad("input", "'input' must be a string or an array of items", "invalid_type");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string p = fmt::format("input[{}]", i);
    if (!it.is_object()) bad(p, fmt::format("'{}' must be an object", p), "invalid_type");
    const std::string type = it.value("type", it.contains("role") ? "message" : "");
    if (type == "message") {
      out.push_back({{"role", it.value("role", "user")}, {"content", input_content(it.value("content", json("")), p + ".content")}});
    } else if (type == "function_call") {
      out.push_back({{"role", "assistant"},
                     {"content", ""},
                     {"tool_calls", json::array({{{"id", it.value("call_id", "")},
                                                  {"type", "function"},
                                                  {"function", {{"name", it.value("name", "")}, {"arguments", it.value("arguments", "{}")}}}}})}});
    } else if (type == "function_call_output") {
      const json output = it.value("output", json(""));
      out.push_back({{"role", "tool"}, {"tool_call_id", it.value("call_id", "")},
                     {"content", output.is_string() ? output : json(output.dump())}});
    } else {
      bad(p + ".type", fmt::format("'{}.type' '{}' is not supported", p, type), "unsupported_parameter");
    }
  }
  return out;
}

// Responses tools ({"type":"function","name",...}) in the chat shape.
json chat_tools(const json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array", "invalid_type");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("name"))
      bad(fmt::format("tools[{}]", i), "only function tools ({\"type\":\"function\",\"name\":…}) are supported",
          "unsupported_parameter");
    json f = {{"name", t["name"]}, {"parameters", t.value("parameters", json::object())}};
    if (t.contains("description")) f["description"] = t["description"];
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

class Responses {
 public:
  explicit Responses(Routes& routes) : routes_(routes), store_(std::make_shared<Conversations>()) {}

  void create(const httplib::Request& req, httplib::Response& res) {
    ParsedRequest pr;
    json messages;
    try {
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) bad("", "the request body must be a JSON object", "invalid_json");
      static const std::set<std::string> known = {
          "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
          "tool_choice", "parallel_tool_calls", "previous_response_id", "store", "metadata", "user", "text",
          "reasoning", "truncation", "service_tier", "seed", "top_k", "min_p", "prompt_cache_key",
          "safety_identifier", "include"};
      for (const auto& [key, value] : body.items())
        if (!value.is_null() && !known.contains(key))
          bad(key, fmt::format("'{}' is not a supported request field", key), "unsupported_parameter");
      if (const json* t = field(body, "text"); t && !(t->is_object() && t->value("format", json{{"type", "text"}}) == json{{"type", "text"}}))
        bad("text", "only text output ('text': {\"format\": {\"type\": \"text\"}}) is supported", "unsupported_parameter");
      if (const json* tr = field(body, "truncation"); tr && *tr != "disabled")
        bad("truncation", "only 'truncation': \"disabled\" is supported", "unsupported_parameter");
      if (const json* inc = field(body, "include"); inc && !(inc->is_array() && inc->empty()))
        bad("include", "'include' is not supported", "unsupported_parameter");
      if (const json* prev = field(body, "previous_response_id")) {
        if (!prev->is_string()) bad("previous_response_id", "'previous_response_id' must be a string", "invalid_type");
        const std::optional<json> earlier = store_->get(prev->get<std::string>());
        if (!earlier)
          throw ApiError(404, fmt::format("no response '{}' on this server (it keeps the last 256)", prev->get<std::string>()),
                         "invalid_request_error", "previous_response_id", "not_found");
        messages = *earlier;
      } else {
        messages = json::array();
      }
      if (const json* ins = field(body, "instructions")) {
        if (!ins->is_string()) bad("instructions", "'instructions' must be a string", "invalid_type");
        // Instructions are not carried over to a continued response (OpenAI's rule): they lead.
        if (!messages.empty() && messages[0]["role"] == "system") messages.erase(0);
        messages.insert(messages.begin(), json{{"role", "system"}, {"content", *ins}});
      }
      if (!field(body, "input")) bad("input", "'input' is required", "missing_required_parameter");
      for (json& m : input_messages(body["input"])) messages.push_back(std::move(m));
      json chat = {{"messages", messages}, {"stream", body.value("stream", false)}};
      for (const char* same : {"temperature", "top_p", "top_k", "min_p", "seed", "parallel_tool_calls", "tool_choice"})
        if (const json* v = field(body, same)) chat[same] = *v;
      if (const json* m = field(body, "max_output_tokens")) chat["max_tokens"] = *m;
      if (const json* t = field(body, "tools")) chat["tools"] = chat_tools(*t);
      if (const json* tc = field(body, "tool_choice"); tc && tc->is_object() && tc->value("type", "") == "function")
        chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc->value("name", "")}}}};
      if (const json* r = field(body, "reasoning"); r && r->is_object() && r->contains("effort"))
        chat["reasoning_effort"] = (*r)["effort"];
      pr = parse_request(Api::kChat, to_text(chat), routes_.engine());
    } catch (const ApiError& e) {
      return send_error(res, Api::kChat, e);
    } catch (const std::exception& e) {
      return send_error(res, Api::kChat, ApiError(400, e.what(), "invalid_request_error"));
    }
    std::vector<std::unique_ptr<Reply>> replies;
    replies.push_back(std::make_unique<ResponsesReply>(routes_.new_id("resp_"), routes_.options().model_name,
                                                       static_cast<int>(pr.request.prompt.size()), pr.syntax, pr.output,
                                                       messages, store_));
    routes_.run(std::move(pr), std::move(replies), error_writer(Api::kChat), res);
  }

 private:
  Routes& routes_;
  std::shared_ptr<Conversations> store_;
};

}  // namespace

void add_responses_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods) {
  auto responses = std::make_shared<Responses>(routes);
  svr.Post("/v1/responses", routed([responses](const httplib::Request& req, httplib::Response& res) { responses->create(req, res); }));
  methods["/v1/responses"] = "POST";
}

}  // namespace sluice::server
