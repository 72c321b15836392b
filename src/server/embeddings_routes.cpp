// OpenAI's embeddings (POST /v1/embeddings, also /embeddings as llama-server answers it): `input`
// as a string, an array of strings, an array of token ids or an array of such arrays; each item is
// embedded by Scheduler::embed (the final hidden states after the output norm, pooled as serve's
// --pooling says, unit L2 norm). `encoding_format` "float" (the default) or "base64" (little-endian
// float32, what the openai npm client asks for); `dimensions` only at the model's width.
#include <fmt/format.h>

#include <cstring>
#include <set>

#include "routes.h"
#include "structured.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;

std::string base64(const std::vector<float>& v) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian hosts only (x86-64)
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t j = 0; j < 3; ++j) w = w << 8 | (j < n ? static_cast<uint8_t>(bytes[i + j]) : 0);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kDigits[(w >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

// The items of `input`, each as tokens.
std::vector<std::vector<int32_t>> inputs(const Engine& engine, const json& input) {
  const int n_vocab = engine.info().n_vocab;
  auto ids = [&](const json& a, const std::string& where) {
    std::vector<int32_t> out;
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        bad("input", fmt::format("{}: token ids must be integers in [0, {})", where, n_vocab), "invalid_value");
      out.push_back(t.get<int32_t>());
    }
    return out;
  };
  std::vector<std::vector<int32_t>> out;
  if (input.is_string()) {
    out.push_back(engine.tokenize(input.get<std::string>(), true));
  } else if (input.is_array() && !input.empty() && input[0].is_number()) {
    out.push_back(ids(input, "'input'"));
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const json& item = input[i];
      if (item.is_string()) out.push_back(engine.tokenize(item.get<std::string>(), true));
      else if (item.is_array()) out.push_back(ids(item, fmt::format("'input[{}]'", i)));
      else bad("input", fmt::format("'input[{}]' must be a string or an array of token ids", i), "invalid_type");
    }
  } else {
    bad("input", "'input' must be a string, an array of strings, or token ids (an array, or an array of arrays); not empty",
        "invalid_type");
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) bad("input", fmt::format("'input[{}]' has no tokens", i), "invalid_value");
  return out;
}

void embeddings(Routes& routes, const httplib::Request& req, httplib::Response& res) {
  try {
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) bad("", "the request body must be a JSON object", "invalid_json");
    static const std::set<std::string> known = {"model", "input", "encoding_format", "dimensions", "user"};
    for (const auto& [key, value] : body.items())
      if (!value.is_null() && !known.contains(key))
        bad(key, fmt::format("'{}' is not a supported request field", key), "unsupported_parameter");
    const json* input = field(body, "input");
    if (!input) bad("input", "'input' is required", "missing_required_parameter");
    std::string format = "float";
    if (const json* f = field(body, "encoding_format")) {
      if (!f->is_string() || (*f != "float" && *f != "base64"))
        bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"", "invalid_value");
      format = f->get<std::string>();
    }
    const int n_embd = routes.engine().info().n_embd;
    if (const json* d = field(body, "dimensions"); d && !(d->is_number_integer() && d->get<int64_t>() == n_embd))
      bad("dimensions", fmt::format("'dimensions' can only be the model's width, {}", n_embd), "unsupported_parameter");
    const std::vector<std::vector<int32_t>> items = inputs(routes.engine(), *input);
    json data = json::array();
    int64_t n_tokens = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (static_cast<int>(items[i].size()) > routes.scheduler().n_ctx())
        bad("input", fmt::format("'input' item {} is {} tokens, more than the context of {}", i, items[i].size(),
                                 routes.scheduler().n_ctx()),
            "context_length_exceeded");
      const std::vector<float> v = routes.scheduler().embed(items[i], routes.options().pooling);
      n_tokens += static_cast<int64_t>(items[i].size());
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", format == "base64" ? json(base64(v)) : json(v)}});
    }
    res.set_content(to_text(json{{"object", "list"},
                                 {"data", data},
                                 {"model", routes.options().model_name},
                                 {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}}),
                    "application/json");
  } catch (const ApiError& e) {
    send_error(res, Api::kChat, e);
  } catch (const Error& e) {
    send_error(res, Api::kChat, ApiError(400, e.what(), "invalid_request_error", "input"));
  }
}

}  // namespace

void add_embeddings_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods) {
  for (const char* path : {"/v1/embeddings", "/embeddings"}) {
    svr.Post(path, routed([&routes](const httplib::Request& req, httplib::Response& res) { embeddings(routes, req, res); }));
    methods[path] = "POST";
  }
}

}  // namespace sluice::server
