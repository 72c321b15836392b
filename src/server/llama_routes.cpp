// llama-server's own endpoints, so its clients and scripts work against sluice unchanged:
//  - GET /props: the defaults a request gets, the slot count, the chat template and its tokens;
//  - GET /slots: every KV slot's context, what it holds and how much of its last prompt came
//    from the prefix cache;
//  - POST /tokenize, /detokenize (with_pieces too), /apply-template (the chat template's prompt);
//  - POST /completion: the native completion (prompt as text or token ids, n_predict, llama-server
//    sampler fields through fields.h), whole or streamed as SSE `data:` events ending with one that
//    has "stop": true and the timings (no [DONE], as llama-server);
//  - POST /infill: a fill-in-the-middle prompt built from the vocabulary's FIM tokens (Qwen,
//    StarCoder and DeepSeek spellings), else a 400 saying the model has none.
// Errors are OpenAI-shaped, which is what llama-server sends too.
#include <fmt/format.h>

#include <ctime>
#include <limits>

#include "routes.h"
#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

// The completion body llama-server returns (whole, or the last event of a stream).
class LlamaReply : public Reply {
 public:
  LlamaReply(const Engine& engine, std::string model, std::string prompt, int n_prompt, bool probs)
      : engine_(engine), model_(std::move(model)), prompt_(std::move(prompt)), n_prompt_(n_prompt),
        probs_(probs) {}

  json full(const GenerateResult& r) override {
    const bool eos = r.finish == FinishReason::kEog || r.finish == FinishReason::kGrammar;
    json j = {{"index", 0},
              {"content", r.text},
              {"tokens", r.tokens},
              {"id_slot", -1},
              {"stop", true},
              {"model", model_},
              {"tokens_predicted", r.tokens.size()},
              {"tokens_evaluated", n_prompt_},
              {"tokens_cached", r.n_reused},
              {"prompt", prompt_},
              {"has_new_line", r.text.find('\n') != std::string::npos},
              {"truncated", false},
              {"stop_type", eos ? "eos" : r.finish == FinishReason::kStop ? "word" : r.finish == FinishReason::kLength ? "limit" : "none"},
              {"stopping_word", ""},
              {"timings", timings(r)}};
    if (probs_) j["completion_probabilities"] = probabilities(r.logprobs);
    return j;
  }
  std::string stream_begin() override { return {}; }
  std::string stream_text(const std::string& text, const std::vector<TokenLogprob>& lps) override {
    if (text.empty() && lps.empty()) return {};
    json j = {{"index", 0}, {"content", text}, {"stop", false}, {"id_slot", -1},
              {"tokens_evaluated", n_prompt_}};
    if (probs_) j["completion_probabilities"] = probabilities(lps);
    return "data: " + to_text(j) + "\n\n";
  }
  std::string stream_end(const GenerateResult& r, bool) override {
    json j = full(r);
    j["content"] = "";  // the text went out in the events before
    j.erase("completion_probabilities");
    return "data: " + to_text(j) + "\n\n";
  }
  std::string stream_error(const ApiError& e) const override {
    return "data: " + to_text(error_body(Api::kCompletion, e)) + "\n\n";
  }

 private:
  json timings(const GenerateResult& r) const {
    const int pn = r.n_prompt, gn = static_cast<int>(r.tokens.size());
    const double pms = r.prefill_seconds * 1000, gms = r.decode_seconds * 1000;
    return {{"prompt_n", pn},
            {"prompt_ms", pms},
            {"prompt_per_token_ms", pn ? pms / pn : 0.0},
            {"prompt_per_second", pms > 0 ? pn * 1000.0 / pms : 0.0},
            {"predicted_n", gn},
            {"predicted_ms", gms},
            {"predicted_per_token_ms", gn ? gms / gn : 0.0},
            {"predicted_per_second", gms > 0 ? gn * 1000.0 / gms : 0.0},
            {"cache_n", r.n_reused}};
  }
  json probabilities(const std::vector<TokenLogprob>& lps) const {
    auto text = [&](int32_t t) { return engine_.detokenize(std::span<const int32_t>(&t, 1)); };
    json out = json::array();
    for (const TokenLogprob& lp : lps) {
      json top = json::array();
      for (const auto& [t, l] : lp.top) top.push_back({{"id", t}, {"token", text(t)}, {"logprob", l}});
      out.push_back({{"id", lp.token}, {"token", text(lp.token)}, {"logprob", lp.logprob}, {"top_logprobs", top}});
    }
    return out;
  }

  const Engine& engine_;
  std::string model_, prompt_;
  int n_prompt_;
  bool probs_;
};

json body_of(const httplib::Request& req) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) bad("", "the request body is not valid JSON", "invalid_json");
  if (!body.is_object()) bad("", "the request body must be a JSON object", "invalid_type");
  return body;
}

// The generation defaults every request starts from (the engine's), in llama-server's names.
json default_params(const Engine& engine) {
  const SamplingOptions s;
  return {{"n_predict", -1},        {"temperature", s.temperature}, {"top_k", s.top_k},
          {"top_p", s.top_p},       {"min_p", s.min_p},             {"repeat_penalty", s.repeat_penalty},
          {"repeat_last_n", s.penalty_last_n}, {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty}, {"stop", json::array()},
          {"samplers", {"penalties", "top_k", "temperature", "top_p", "min_p"}},
          {"n_vocab", engine.info().n_vocab}};
}

// The vocabulary's fill-in-the-middle tokens (prefix, suffix, middle), or empty when it has none:
// a spelling counts when the tokenizer reads it as one special token.
std::vector<int32_t> fim_tokens(const Engine& engine) {
  static const char* kSpellings[][3] = {{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
                                        {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
                                        {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}};
  for (const auto& names : kSpellings) {
    std::vector<int32_t> ids;
    for (const char* name : names) {
      const std::vector<int32_t> t = engine.tokenize(name, false, true);
      if (t.size() != 1) break;
      ids.push_back(t[0]);
    }
    if (ids.size() == 3) return ids;
  }
  return {};
}

std::string text_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return {};
  if (!v->is_string()) bad(name, fmt::format("'{}' must be a string", name), "invalid_type");
  return v->get<std::string>();
}

class Llama {
 public:
  explicit Llama(Routes& routes) : routes_(routes), engine_(routes.engine()) {}

  void props(httplib::Response& res) {
    const ModelInfo& info = engine_.info();
    const json settings = {{"n_ctx", routes_.scheduler().n_ctx()}, {"params", default_params(engine_)}};
    res.set_content(to_text(json{{"default_generation_settings", settings},
                                 {"total_slots", routes_.options().scheduler.n_parallel},
                                 {"model_alias", routes_.options().model_name},
                                 {"model_path", routes_.options().model_name},
                                 {"chat_template", info.chat_template},
                                 {"bos_token", info.bos_token},
                                 {"eos_token", info.eos_token},
                                 {"build_info", "sluice"},
                                 {"modalities", {{"vision", false}, {"audio", false}}}}),
                    "application/json");
  }

  void slots(httplib::Response& res) {
    json out = json::array();
    for (const SlotStats& s : routes_.scheduler().stats().slots)
      out.push_back({{"id", s.id},
                     {"id_task", -1},
                     {"n_ctx", s.n_ctx},
                     {"is_processing", s.busy},
                     {"n_cached", s.n_cached},
                     {"n_prompt_tokens", s.n_prompt},
                     {"n_prompt_tokens_cached", s.n_reused},
                     {"params", default_params(engine_)}});
    res.set_content(to_text(out), "application/json");
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      const json body = body_of(req);
      const std::string content = text_field(body, "content");
      const bool add_special = field(body, "add_special") && body["add_special"] == true;
      const bool parse_special = !field(body, "parse_special") || body["parse_special"] == true;
      const std::vector<int32_t> ids = engine_.tokenize(content, add_special, parse_special);
      if (!(field(body, "with_pieces") && body["with_pieces"] == true)) return json{{"tokens", ids}};
      json tokens = json::array();
      for (int32_t t : ids) tokens.push_back({{"id", t}, {"piece", engine_.detokenize(std::span<const int32_t>(&t, 1))}});
      return json{{"tokens", tokens}};
    });
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      const json body = body_of(req);
      std::vector<int32_t> ids;
      if (const json* t = field(body, "tokens")) {
        if (!t->is_array()) bad("tokens", "'tokens' must be an array of token ids", "invalid_type");
        for (const json& id : *t) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= engine_.info().n_vocab)
            bad("tokens", fmt::format("'tokens' entry {} is not a token id of this vocabulary", id.dump()));
          ids.push_back(id.get<int32_t>());
        }
      }
      return json{{"content", engine_.detokenize(ids)}};
    });
  }

  void apply_template(const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      const json body = body_of(req);
      return json{{"prompt", parse_request(Api::kChat, to_text(body), engine_).rendered}};
    });
  }

  void completion(const httplib::Request& req, httplib::Response& res) { run(req, res, false); }
  void infill(const httplib::Request& req, httplib::Response& res) { run(req, res, true); }

 private:
  // Answers with what `fn` returns, or with the error it throws.
  template <typename Fn>
  void answer(httplib::Response& res, Fn fn) {
    try {
      res.set_content(to_text(fn()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, Api::kCompletion, e);
    } catch (const std::exception& e) {
      send_error(res, Api::kCompletion, ApiError(400, e.what(), "invalid_request_error"));
    }
  }

  void run(const httplib::Request& req, httplib::Response& res, bool infill) {
    ParsedRequest pr;
    std::string prompt_text;
    try {
      json body = body_of(req);
      if (infill) body = infill_body(std::move(body));
      // llama-server generates until the end (or the context) unless n_predict says otherwise.
      if (const json* np = field(body, "n_predict"); (!np && !field(body, "max_tokens")) || (np && *np == -1)) {
        body.erase("n_predict");
        body["max_tokens"] = std::numeric_limits<int32_t>::max();
      }
      if (const json* p = field(body, "prompt"); p && p->is_string()) prompt_text = p->get<std::string>();
      pr = parse_request(Api::kCompletion, to_text(body), engine_);
    } catch (const ApiError& e) {
      return send_error(res, Api::kCompletion, e);
    } catch (const std::exception& e) {
      return send_error(res, Api::kCompletion, ApiError(400, e.what(), "invalid_request_error"));
    }
    if (pr.n != 1) return send_error(res, Api::kCompletion, ApiError(400, "'n' must be 1 here", "invalid_request_error", "n"));
    std::vector<std::unique_ptr<Reply>> replies;
    replies.push_back(std::make_unique<LlamaReply>(engine_, routes_.options().model_name, prompt_text,
                                                   static_cast<int>(pr.request.prompt.size()),
                                                   pr.request.options.logprobs >= 0));
    routes_.run(std::move(pr), std::move(replies), error_writer(Api::kCompletion), res);
  }

  // /infill's fields (input_prefix, input_suffix, prompt: text after the prefix) as a completion
  // whose prompt is token ids: <prefix>input_prefix<suffix>input_suffix<middle>prompt.
  json infill_body(json body) {
    const std::vector<int32_t> fim = fim_tokens(engine_);
    if (fim.empty())
      bad("", "this model's vocabulary has no fill-in-the-middle tokens, so /infill cannot build a prompt",
          "unsupported_model");
    const std::string prefix = text_field(body, "input_prefix"), suffix = text_field(body, "input_suffix");
    const std::string tail = text_field(body, "prompt");
    if (field(body, "input_extra")) bad("input_extra", "'input_extra' (extra context files) is not supported", "unsupported_parameter");
    std::vector<int32_t> ids = engine_.tokenize("", true);  // BOS when the vocabulary adds one
    auto append = [&](int32_t marker, const std::string& text) {
      ids.push_back(marker);
      const std::vector<int32_t> t = engine_.tokenize(text, false);
      ids.insert(ids.end(), t.begin(), t.end());
    };
    append(fim[0], prefix);
    append(fim[1], suffix);
    append(fim[2], tail);
    body.erase("input_prefix");
    body.erase("input_suffix");
    body["prompt"] = ids;
    return body;
  }

  Routes& routes_;
  Engine& engine_;
};

}  // namespace

void add_llama_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods) {
  auto llama = std::make_shared<Llama>(routes);
  svr.Get("/props", routed([llama](const httplib::Request&, httplib::Response& res) { llama->props(res); }));
  svr.Get("/slots", routed([llama](const httplib::Request&, httplib::Response& res) { llama->slots(res); }));
  svr.Post("/tokenize", routed([llama](const httplib::Request& req, httplib::Response& res) { llama->tokenize(req, res); }));
  svr.Post("/detokenize", routed([llama](const httplib::Request& req, httplib::Response& res) { llama->detokenize(req, res); }));
  svr.Post("/apply-template", routed([llama](const httplib::Request& req, httplib::Response& res) { llama->apply_template(req, res); }));
  svr.Post("/completion", routed([llama](const httplib::Request& req, httplib::Response& res) { llama->completion(req, res); }));
  svr.Post("/infill", routed([llama](const httplib::Request& req, httplib::Response& res) { llama->infill(req, res); }));
  for (const char* get : {"/props", "/slots"}) methods[get] = "GET";
  for (const char* post : {"/tokenize", "/detokenize", "/apply-template", "/completion", "/infill"}) methods[post] = "POST";
}

}  // namespace sluice::server
