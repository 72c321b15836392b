// Ollama's API, so Ollama clients (Open WebUI, editor plugins, the ollama npm package) can use a
// sluice server: GET /api/version, /api/tags, /api/ps; POST /api/show, /api/chat, /api/generate.
// A chat or generate request is rewritten into the OpenAI request it means (messages, tools,
// format → response_format, think → enable_thinking, options → sampling fields) and goes through
// the same parsing and validation, so an Ollama option sluice cannot honour is a 400 naming it
// ("options.mirostat") rather than ignored. Ollama streams by default: newline-delimited JSON
// objects, the last with "done": true, the done_reason and the token counts and durations
// (nanoseconds) Ollama reports. Errors are Ollama's {"error": "message"}.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>

#include "routes.h"
#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

// The Ollama API version these routes follow (clients gate features on it).
constexpr const char* kOllamaVersion = "0.9.0";

void ollama_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_text(json{{"error", e.message}}), "application/json");
}

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t ns(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

// One NDJSON reply: /api/chat (message objects, reasoning as "thinking", tool calls with arguments
// as objects) or /api/generate ("response" text, and the context tokens at the end).
class OllamaReply : public Reply {
 public:
  OllamaReply(bool chat, std::string model, ChatSyntax syntax, ChatOutputOptions output,
              std::vector<int32_t> prompt)
      : chat_(chat), model_(std::move(model)), prompt_(std::move(prompt)) {
    if (chat_) parser_ = std::make_unique<ChatOutputParser>(syntax, output);
  }

  const char* stream_type() const override { return "application/x-ndjson"; }

  json full(const GenerateResult& r) override {
    json j = head();
    if (chat_) {
      ChatOutput parts;
      parts.add(parser_->push(r.text));
      parts.add(parser_->finish());
      json message = {{"role", "assistant"}, {"content", parts.content}};
      if (!parts.reasoning.empty()) message["thinking"] = parts.reasoning;
      if (!parts.tool_calls.empty()) message["tool_calls"] = calls(parts.tool_calls);
      j["message"] = message;
    } else {
      j["response"] = r.text;
    }
    return finish(j, r);
  }
  std::string stream_begin() override { return {}; }
  std::string stream_text(const std::string& text, const std::vector<TokenLogprob>&) override {
    if (!chat_) return text.empty() ? std::string() : line(with(head(), "response", text));
    return deltas(parser_->push(text));
  }
  std::string stream_end(const GenerateResult& r, bool) override {
    std::string out = chat_ ? deltas(parser_->finish()) : std::string();
    json j = head();
    if (chat_)
      j["message"] = {{"role", "assistant"}, {"content", ""}};
    else
      j["response"] = "";
    return out + line(finish(j, r));
  }
  std::string stream_error(const ApiError& e) const override { return line(json{{"error", e.message}}); }

 private:
  static std::string line(const json& j) { return to_text(j) + "\n"; }
  static json with(json j, const char* key, const std::string& text) {
    j[key] = text;
    j["done"] = false;
    return j;
  }
  json head() const { return {{"model", model_}, {"created_at", iso_now()}}; }
  static json calls(const std::vector<ChatDelta>& deltas) {
    json out = json::array();
    for (const ChatDelta& c : deltas)
      out.push_back({{"function", {{"name", c.name}, {"arguments", json::parse(c.text, nullptr, false)}}}});
    return out;
  }
  std::string deltas(const std::vector<ChatDelta>& ds) {
    std::string out;
    for (const ChatDelta& d : ds) {
      json message = {{"role", "assistant"}, {"content", ""}};
      if (d.kind == ChatDelta::Kind::kToolCall)
        message["tool_calls"] = calls({d});
      else if (d.kind == ChatDelta::Kind::kReasoning)
        message["thinking"] = d.text;
      else
        message["content"] = d.text;
      json j = head();
      j["message"] = message;
      j["done"] = false;
      out += line(j);
    }
    return out;
  }
  json finish(json j, const GenerateResult& r) const {
    j["done"] = true;
    j["done_reason"] = r.finish == FinishReason::kLength ? "length" : "stop";
    j["total_duration"] = ns(r.prefill_seconds + r.decode_seconds);
    j["load_duration"] = 0;
    j["prompt_eval_count"] = prompt_.size();  // the whole prompt, a cached prefix included
    j["prompt_eval_duration"] = ns(r.prefill_seconds);
    j["eval_count"] = r.tokens.size();
    j["eval_duration"] = ns(r.decode_seconds);
    if (!chat_) {
      std::vector<int32_t> context = prompt_;
      context.insert(context.end(), r.tokens.begin(), r.tokens.end());
      j["context"] = context;
    }
    return j;
  }

  bool chat_;
  std::string model_;
  std::vector<int32_t> prompt_;
  std::unique_ptr<ChatOutputParser> parser_;
};

// Ollama's options as OpenAI / llama-server fields. Runtime options (threads, GPU layers, memory
// mapping, batch size, context size) change how a model runs, not what it writes: ignored.
json map_options(const json& options) {
  if (!options.is_object()) bad("options", "'options' must be an object", "invalid_type");
  static const std::map<std::string, std::string> renamed = {
      {"temperature", "temperature"},   {"top_k", "top_k"},
      {"top_p", "top_p"},               {"min_p", "min_p"},
      {"seed", "seed"},                 {"num_predict", "max_tokens"},
      {"stop", "stop"},                 {"repeat_penalty", "repeat_penalty"},
      {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"},
      {"repeat_last_n", "penalty_last_n"}};
  // Samplers sluice does not have, accepted at the value that switches them off.
  static const std::map<std::string, double> neutral = {{"typical_p", 1}, {"tfs_z", 1}, {"mirostat", 0}};
  static const std::set<std::string> runtime = {"num_ctx",   "num_batch", "num_gpu",  "main_gpu",
                                                "low_vram",  "use_mmap",  "use_mlock", "num_thread",
                                                "numa",      "num_keep",  "vocab_only"};
  json out = json::object();
  for (const auto& [key, value] : options.items()) {
    if (value.is_null() || runtime.contains(key)) continue;
    if (const auto n = neutral.find(key); n != neutral.end()) {
      if (!value.is_number() || value.get<double>() != n->second)
        bad("options." + key, fmt::format("'options.{}' is not implemented; only {} (off) is accepted", key, n->second),
            "unsupported_parameter");
      continue;
    }
    const auto it = renamed.find(key);
    if (it == renamed.end())
      bad("options." + key, fmt::format("'options.{}' is not supported", key), "unsupported_parameter");
    out[it->second] = value;
  }
  // num_predict −1 (and −2, "until the context is full") mean no limit.
  if (out.contains("max_tokens") && out["max_tokens"].is_number_integer() && out["max_tokens"].get<int64_t>() < 0)
    out.erase("max_tokens");
  return out;
}

class Ollama {
 public:
  explicit Ollama(Routes& routes) : routes_(routes), engine_(routes.engine()) {}

  json details() const {
    const ModelInfo& info = engine_.info();
    return {{"parent_model", ""},
            {"format", "gguf"},
            {"family", info.architecture},
            {"families", {info.architecture}},
            {"parameter_size", ""},
            {"quantization_level", ""}};
  }
  json model_entry() const {
    const std::string& name = routes_.options().model_name;
    return {{"name", name},  {"model", name}, {"modified_at", iso_now()},
            {"size", engine_.info().file_bytes}, {"digest", ""}, {"details", details()}};
  }

  void version(httplib::Response& res) {
    res.set_content(to_text(json{{"version", kOllamaVersion}}), "application/json");
  }
  void tags(httplib::Response& res) {
    res.set_content(to_text(json{{"models", json::array({model_entry()})}}), "application/json");
  }
  void ps(httplib::Response& res) {
    json m = model_entry();
    m.erase("modified_at");
    m["expires_at"] = "9999-12-31T23:59:59Z";  // the model stays loaded while the server runs
    m["size_vram"] = 0;
    res.set_content(to_text(json{{"models", json::array({m})}}), "application/json");
  }

  void show(const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = parse(req);
      check_model(body);
      const ModelInfo& info = engine_.info();
      json caps = json::array({"completion"});
      if (chat_syntax(info.chat_template) != ChatSyntax::kPlain) caps.push_back("tools");
      if (info.chat_template.find("think") != std::string::npos) caps.push_back("thinking");
      const std::string arch = info.architecture;
      res.set_content(to_text(json{{"modelfile", ""},
                                   {"parameters", ""},
                                   {"template", info.chat_template},
                                   {"details", details()},
                                   {"model_info",
                                    {{"general.architecture", arch},
                                     {arch + ".context_length", info.n_ctx_train},
                                     {arch + ".block_count", info.n_layer},
                                     {arch + ".embedding_length", info.n_embd},
                                     {arch + ".expert_count", info.n_expert},
                                     {arch + ".expert_used_count", info.n_expert_used},
                                     {"tokenizer.ggml.vocab_size", info.n_vocab}}},
                                   {"capabilities", caps},
                                   {"modified_at", iso_now()}}),
                      "application/json");
    } catch (const ApiError& e) {
      ollama_error(res, e);
    }
  }

  void chat(const httplib::Request& req, httplib::Response& res) { run(req, res, true); }
  void generate(const httplib::Request& req, httplib::Response& res) { run(req, res, false); }

 private:
  static json parse(const httplib::Request& req) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON", "invalid_request_error");
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_request_error");
    return body;
  }
  // Ollama names models "name" or "name:tag"; this server has one.
  void check_model(const json& body) const {
    const json* m = field(body, "model");
    if (!m) m = field(body, "name");
    const std::string& mine = routes_.options().model_name;
    if (m && m->is_string() && *m != mine && *m != mine + ":latest")
      throw ApiError(404, fmt::format("model '{}' not found (this server serves '{}')", m->get<std::string>(), mine),
                     "not_found_error");
  }

  // The fields both routes share, as OpenAI ones.
  json common(const json& body) {
    json out = json::object();
    if (const json* o = field(body, "options")) out = map_options(*o);
    out["stream"] = body.contains("stream") ? body["stream"] : json(true);
    if (const json* f = field(body, "format")) {
      if (*f == "json")
        out["response_format"] = {{"type", "json_object"}};
      else if (f->is_object())
        out["json_schema"] = *f;
      else
        bad("format", "'format' must be \"json\" or a JSON Schema object");
    }
    if (const json* t = field(body, "think")) {
      if (!t->is_boolean()) bad("think", "'think' must be a boolean", "invalid_type");
      out["chat_template_kwargs"] = {{"enable_thinking", *t}};
    }
    for (const char* unsupported : {"images", "template", "suffix"})
      if (const json* v = field(body, unsupported); v && !(v->is_string() && v->get<std::string>().empty()) &&
                                                      !(v->is_array() && v->empty()))
        bad(unsupported, fmt::format("'{}' is not supported", unsupported), "unsupported_parameter");
    static const std::set<std::string> known = {"model", "messages", "prompt", "system", "raw", "stream",
                                                "format", "options", "think", "keep_alive", "tools",
                                                "images", "template", "suffix", "context"};
    for (const auto& [key, value] : body.items())
      if (!known.contains(key) && !value.is_null())
        bad(key, fmt::format("'{}' is not a supported request field", key), "unsupported_parameter");
    return out;
  }

  // Ollama messages (arguments as objects, images refused) as OpenAI ones.
  static json messages(const json& in) {
    if (!in.is_array()) bad("messages", "'messages' must be an array", "invalid_type");
    json out = in;
    for (size_t i = 0; i < out.size(); ++i) {
      json& m = out[i];
      if (!m.is_object()) continue;  // parse_request names it
      if (const json* img = field(m, "images"); img && !(img->is_array() && img->empty()))
        bad(fmt::format("messages[{}].images", i), "images are not supported", "unsupported_parameter");
      m.erase("images");
      if (m.contains("thinking")) {
        m["reasoning_content"] = m["thinking"];
        m.erase("thinking");
      }
      if (m.contains("tool_name")) m.erase("tool_name");
      if (const json* calls = field(m, "tool_calls"); calls && calls->is_array())
        for (size_t j = 0; j < calls->size(); ++j) {
          json& c = m["tool_calls"][j];
          if (!c.contains("type")) c["type"] = "function";
          if (!c.contains("id")) c["id"] = fmt::format("call_{}_{}", i, j);
        }
    }
    return out;
  }

  void run(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    ParsedRequest pr;
    try {
      const json body = parse(req);
      check_model(body);
      json openai = common(body);
      if (is_chat) {
        if (!field(body, "messages")) bad("messages", "'messages' is required", "missing_required_parameter");
        openai["messages"] = messages(body["messages"]);
        if (const json* t = field(body, "tools")) openai["tools"] = *t;
        pr = parse_request(Api::kChat, to_text(openai), engine_);
      } else {
        const json* prompt = field(body, "prompt");
        if (prompt && !prompt->is_string()) bad("prompt", "'prompt' must be a string", "invalid_type");
        if (!prompt || prompt->get<std::string>().empty()) {
          // An empty prompt loads the model (here: it is loaded) and generates nothing.
          res.set_content(to_text(json{{"model", routes_.options().model_name}, {"created_at", iso_now()},
                                       {"response", ""}, {"done", true}, {"done_reason", "load"}}) + "\n",
                          "application/json");
          return;
        }
        pr = generate_request(body, openai);
      }
    } catch (const ApiError& e) {
      return ollama_error(res, e);
    } catch (const std::exception& e) {
      return ollama_error(res, ApiError(400, e.what(), "invalid_request_error"));
    }
    std::vector<std::unique_ptr<Reply>> replies;
    replies.push_back(std::make_unique<OllamaReply>(is_chat, routes_.options().model_name, pr.syntax,
                                                    pr.output, pr.request.prompt));
    routes_.run(std::move(pr), std::move(replies), ollama_error, res);
  }

  // /api/generate: raw prompts are completions; others go through the chat template as a user
  // turn (after `system`); `context` (the tokens a previous reply returned) comes first.
  ParsedRequest generate_request(const json& body, json openai) {
    const std::string prompt = body["prompt"].get<std::string>();
    const json* raw = field(body, "raw");
    if (raw && !raw->is_boolean()) bad("raw", "'raw' must be a boolean", "invalid_type");
    ParsedRequest pr;
    if (raw && raw->get<bool>()) {
      openai["prompt"] = prompt;
      pr = parse_request(Api::kCompletion, to_text(openai), engine_);
    } else {
      json msgs = json::array();
      if (const json* sys = field(body, "system")) msgs.push_back({{"role", "system"}, {"content", *sys}});
      msgs.push_back({{"role", "user"}, {"content", prompt}});
      openai["messages"] = msgs;
      pr = parse_request(Api::kChat, to_text(openai), engine_);
    }
    if (const json* ctx = field(body, "context")) {
      if (!ctx->is_array()) bad("context", "'context' must be an array of token ids", "invalid_type");
      std::vector<int32_t> ids;
      for (const json& t : *ctx) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine_.info().n_vocab)
          bad("context", "'context' must hold token ids of this model's vocabulary");
        ids.push_back(t.get<int32_t>());
      }
      // The text continues the context: no second BOS between them.
      const std::vector<int32_t> bos = engine_.tokenize("", true);
      std::vector<int32_t>& p = pr.request.prompt;
      if (!ids.empty() && !bos.empty() && p.size() > bos.size() && std::equal(bos.begin(), bos.end(), p.begin()))
        p.erase(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(bos.size()));
      p.insert(p.begin(), ids.begin(), ids.end());
    }
    return pr;
  }

  Routes& routes_;
  Engine& engine_;
};

}  // namespace

void add_ollama_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods) {
  auto ollama = std::make_shared<Ollama>(routes);
  svr.Get("/api/version", routed([ollama](const httplib::Request&, httplib::Response& res) { ollama->version(res); }));
  svr.Get("/api/tags", routed([ollama](const httplib::Request&, httplib::Response& res) { ollama->tags(res); }));
  svr.Get("/api/ps", routed([ollama](const httplib::Request&, httplib::Response& res) { ollama->ps(res); }));
  svr.Post("/api/show", routed([ollama](const httplib::Request& req, httplib::Response& res) { ollama->show(req, res); }));
  svr.Post("/api/chat", routed([ollama](const httplib::Request& req, httplib::Response& res) { ollama->chat(req, res); }));
  svr.Post("/api/generate", routed([ollama](const httplib::Request& req, httplib::Response& res) { ollama->generate(req, res); }));
  for (const char* get : {"/api/version", "/api/tags", "/api/ps"}) methods[get] = "GET";
  for (const char* post : {"/api/show", "/api/chat", "/api/generate"}) methods[post] = "POST";
}

}  // namespace sluice::server
