// End-to-end tests of what other servers' clients send (issue 32): harmless fields accepted and
// ignored, llama-server synonyms, fields that would change the result still a 400 naming them,
// n > 1 choices sharing the prompt's KV, logit_bias; the paths without /v1, Anthropic's
// count_tokens, /v1/responses, llama-server's /props, /slots, /tokenize, /detokenize, /apply-template,
// /completion and /infill, and Ollama's /api routes; then the `ollama` and `@anthropic-ai/sdk` npm
// clients (tests/node/serve_clients.mjs).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "../unit/qwen3_model.h"
#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

class ServeCompat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server({"--parallel", "4", "--api-key", kKey}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(port(), 0) << "server did not start; log: " << server_->log(); }
  static int port() { return server_->port(); }
  static Http post(const std::string& path, const json& body) { return http(port(), "POST", path, body.dump()); }
  static Server* server_;
};
Server* ServeCompat::server_ = nullptr;

const json kUser = json::array({{{"role", "user"}, {"content", "Who made the heaven and the earth?"}}});

json chat_body(int max_tokens) {
  return {{"messages", kUser}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

// The JSON objects of an SSE body's data: lines ([DONE] left out).
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("data: {", 0) == 0) out.push_back(json::parse(line.substr(6)));
  return out;
}

std::vector<json> ndjson(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

TEST_F(ServeCompat, HarmlessFieldsAreAcceptedAndSynonymsMap) {
  const Http ref = post("/v1/chat/completions", chat_body(4));
  ASSERT_EQ(ref.status, 200) << ref.body;
  const std::string text = ref.j()["choices"][0]["message"]["content"];
  for (const std::string extra :
       {R"("metadata":{"a":"b"})", R"("service_tier":"auto")", R"("store":true)", R"("user":"u1")",
        R"("modalities":["text"])", R"("cache_prompt":true)", R"("id_slot":1)", R"("prompt_cache_key":"k")",
        R"("safety_identifier":"s")", R"("n_keep":4)", R"("typical_p":1)", R"("mirostat":0)",
        R"("samplers":["penalties","top_k","temperature","top_p","min_p"])"}) {
    json body = chat_body(4);
    body.update(json::parse("{" + extra + "}"));
    const Http h = post("/v1/chat/completions", body);
    ASSERT_EQ(h.status, 200) << extra << ": " << h.body;
    EXPECT_EQ(h.j()["choices"][0]["message"]["content"], text) << extra;  // nothing changed
  }
  // n_predict is max_tokens; repeat_last_n is penalty_last_n (a range check shows it is read).
  json np = chat_body(4);
  np.erase("max_tokens");
  np["n_predict"] = 3;
  EXPECT_EQ(post("/v1/chat/completions", np).j()["usage"]["completion_tokens"], 3);
  json rl = chat_body(2);
  rl["repeat_last_n"] = -5;
  expect_error(post("/v1/chat/completions", rl), 400, "penalty_last_n");
}

TEST_F(ServeCompat, FieldsThatWouldChangeTheResultAre400NamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("modalities":["text","audio"])", "modalities"}, {R"("mirostat":2)", "mirostat"},
      {R"("typical_p":0.5)", "typical_p"},                {R"("xtc_probability":0.1)", "xtc_probability"},
      {R"("samplers":["top_k","nonsense"])", "samplers"}, {R"("frobnicate":1)", "frobnicate"},
      {R"("logit_bias":{"99999999":1})", "logit_bias"},   {R"("logit_bias":{"5":500})", "logit_bias"},
      {R"("metadata":"x")", "metadata"},                  {R"("n":0)", "n"}};
  for (const auto& [extra, param] : cases) {
    json body = chat_body(2);
    body.update(json::parse("{" + extra + "}"));
    expect_error(post("/v1/chat/completions", body), 400, param);
  }
}

TEST_F(ServeCompat, LogitBiasForcesAndBansTokens) {
  const json base = {{"prompt", "And God said"}, {"n_predict", 4}, {"temperature", 0}};
  const Http h = post("/completion", base);
  ASSERT_EQ(h.status, 200) << h.body;
  const int first = h.j()["tokens"][0];
  json ban = base;
  ban["logit_bias"] = json::array({json::array({first, false})});
  const Http b = post("/completion", ban);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_NE(b.j()["tokens"][0], first);
  // A large positive bias makes a token the greedy choice (OpenAI's object shape).
  const int forced = http(port(), "POST", "/tokenize", R"({"content":" Moses"})").j()["tokens"][0];
  json force = {{"prompt", "And God said"}, {"max_tokens", 2}, {"temperature", 0}, {"logit_bias", {{std::to_string(forced), 100}}}};
  const Http f = post("/v1/completions", force);
  ASSERT_EQ(f.status, 200) << f.body;
  json again = {{"prompt", "And God said"}, {"n_predict", 2}, {"temperature", 0}, {"logit_bias", {{std::to_string(forced), 100}}}};
  EXPECT_EQ(post("/completion", again).j()["tokens"], json::array({forced, forced}));
}

TEST_F(ServeCompat, SeveralChoicesShareThePromptsKv) {
  const json before = metrics(port());
  json body = {{"prompt", "In the beginning God created the heaven and the earth. And the earth was"},
               {"n", 3}, {"max_tokens", 5}, {"temperature", 1.0}, {"seed", 3}, {"ignore_eos", true}};
  const Http h = post("/v1/completions", body);
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  ASSERT_EQ(j["choices"].size(), 3u) << h.body;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["usage"]["completion_tokens"], 15);
  const int prompt = j["usage"]["prompt_tokens"];
  // Each choice took the prompt (all but its last token) from the prefix cache.
  const json after = metrics(port());
  EXPECT_GE(after["sluice_prompt_tokens_reused_total"].get<double>() - before["sluice_prompt_tokens_reused_total"].get<double>(),
            3.0 * (prompt - 1));
  // Greedy choices are equal; sampled ones follow their own seeds (seed, seed+1, ...).
  body["temperature"] = 0;
  const json g = post("/v1/completions", body).j();
  EXPECT_EQ(g["choices"][0]["text"], g["choices"][2]["text"]);

  // Streamed chat: every choice's deltas and finish, one usage and one [DONE].
  json chat = chat_body(3);
  chat["n"] = 2;
  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  const Http s = post("/v1/chat/completions", chat);
  ASSERT_EQ(s.status, 200) << s.body;
  std::map<int, std::string> texts;
  int finishes = 0, usages = 0;
  for (const json& e : sse_events(s.body)) {
    if (e.contains("usage") && !e["usage"].is_null()) {
      ++usages;
      EXPECT_EQ(e["usage"]["completion_tokens"], 6);
    }
    for (const json& c : e["choices"]) {
      texts[c["index"]] += c["delta"].value("content", "");
      finishes += !c["finish_reason"].is_null();
    }
  }
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(usages, 1);
  EXPECT_EQ(texts.size(), 2u);
  EXPECT_EQ(texts[0], texts[1]);  // greedy
  const std::string first = post("/v1/chat/completions", chat_body(3)).j()["choices"][0]["message"]["content"];
  EXPECT_EQ(texts[0], first);
  size_t done = 0;
  for (size_t at = s.body.find("[DONE]"); at != std::string::npos; at = s.body.find("[DONE]", at + 1)) ++done;
  EXPECT_EQ(done, 1u);
}

TEST_F(ServeCompat, PathsWithoutV1AndCountTokens) {
  const Http a = post("/v1/chat/completions", chat_body(3));
  const Http b = post("/chat/completions", chat_body(3));
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.j()["choices"][0]["message"], b.j()["choices"][0]["message"]);
  const json completion = {{"prompt", "And God said"}, {"max_tokens", 3}, {"temperature", 0}};
  EXPECT_EQ(post("/completions", completion).j()["choices"][0]["text"],
            post("/v1/completions", completion).j()["choices"][0]["text"]);
  EXPECT_EQ(http(port(), "GET", "/completions").status, 405);

  const json msgs = {{"system", "Be brief."}, {"messages", kUser}};
  const Http count = post("/v1/messages/count_tokens", msgs);
  ASSERT_EQ(count.status, 200) << count.body;
  json msg = msgs;
  msg["max_tokens"] = 1;
  EXPECT_EQ(count.j()["input_tokens"], post("/v1/messages", msg).j()["usage"]["input_tokens"]);
  const Http bad = post("/v1/messages/count_tokens", json{{"messages", "hi"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.j()["type"], "error") << bad.body;  // Anthropic's shape
}

TEST_F(ServeCompat, LlamaServerPropsSlotsAndTokens) {
  const json props = http(port(), "GET", "/props").j();
  EXPECT_EQ(props["total_slots"], 4);
  EXPECT_GT(props["default_generation_settings"]["n_ctx"].get<int>(), 0);
  EXPECT_TRUE(props["chat_template"].is_string());

  const Http t = http(port(), "POST", "/tokenize", R"({"content":"And God said","with_pieces":true})");
  ASSERT_EQ(t.status, 200) << t.body;
  std::string joined;
  json ids = json::array();
  const json pieces = t.j()["tokens"];
  for (const json& p : pieces) {
    joined += p["piece"].get<std::string>();
    ids.push_back(p["id"]);
  }
  EXPECT_EQ(joined, "And God said");
  EXPECT_EQ(http(port(), "POST", "/detokenize", json{{"tokens", ids}}.dump()).j()["content"], "And God said");
  expect_error(http(port(), "POST", "/detokenize", R"({"tokens":[-1]})"), 400, "tokens");

  // The chat template's prompt is what a chat request evaluates.
  const Http at = post("/apply-template", json{{"messages", kUser}});
  ASSERT_EQ(at.status, 200) << at.body;
  const std::string prompt = at.j()["prompt"];
  EXPECT_NE(prompt.find("Who made the heaven and the earth?"), std::string::npos) << prompt;
  const json tok = http(port(), "POST", "/tokenize", json{{"content", prompt}, {"add_special", true}}.dump()).j();
  EXPECT_EQ(tok["tokens"].size(), post("/v1/chat/completions", chat_body(1)).j()["usage"]["prompt_tokens"]);

  // A slot keeps the prompt it evaluated; the same prompt again comes from the prefix cache.
  const json body = {{"prompt", "Blessed are the meek: for they shall"}, {"n_predict", 2}, {"temperature", 0}};
  post("/completion", body);
  const Http again = post("/completion", body);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_GT(again.j()["tokens_cached"].get<int>(), 0) << again.body;
  const json slots = http(port(), "GET", "/slots").j();
  ASSERT_EQ(slots.size(), 4u) << slots.dump();
  bool found = false;
  for (const json& s : slots) {
    EXPECT_FALSE(s["is_processing"].get<bool>());
    EXPECT_EQ(s["n_ctx"], props["default_generation_settings"]["n_ctx"]);
    // The slot that served the second request: its prompt, the part reused, what it holds now.
    if (s["n_prompt_tokens"] == again.j()["tokens_evaluated"] && s["n_prompt_tokens_cached"] == again.j()["tokens_cached"]) {
      found = true;
      EXPECT_GE(s["n_cached"].get<int>(), again.j()["tokens_evaluated"].get<int>()) << s.dump();
    }
  }
  EXPECT_TRUE(found) << slots.dump() << again.body;
}

TEST_F(ServeCompat, LlamaServerCompletionStreamedAndNot) {
  const json body = {{"prompt", "And God said"}, {"n_predict", 6}, {"temperature", 0}, {"ignore_eos", true}};
  const Http h = post("/completion", body);
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["tokens_predicted"], 6);
  EXPECT_EQ(j["stop"], true);
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_EQ(j["tokens"].size(), 6u);
  EXPECT_EQ(j["timings"]["predicted_n"], 6);
  EXPECT_EQ(j["content"], post("/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 6}, {"temperature", 0},
                                                       {"ignore_eos", true}})
                              .j()["choices"][0]["text"]);
  json streamed = body;
  streamed["stream"] = true;
  const Http s = post("/completion", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.body.find("[DONE]"), std::string::npos);  // llama-server's /completion sends none
  const std::vector<json> events = sse_events(s.body);
  ASSERT_FALSE(events.empty());
  std::string text;
  for (const json& e : events) text += e["content"].get<std::string>();
  EXPECT_EQ(text, j["content"]);
  EXPECT_EQ(events.back()["stop"], true);
  EXPECT_EQ(events.back()["tokens_predicted"], 6);
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(events[i]["stop"], false);
  // Without n_predict llama-server generates until the end; a 400 names a bad field.
  expect_error(post("/completion", json{{"prompt", "a"}, {"n_predict", "x"}}), 400, "max_tokens");
}

TEST_F(ServeCompat, InfillNeedsFimTokens) {
  const Http h = post("/infill", json{{"input_prefix", "def f():\n"}, {"input_suffix", "\n"}});
  EXPECT_EQ(h.status, 400) << h.body;
  EXPECT_NE(h.body.find("fill-in-the-middle"), std::string::npos) << h.body;
}

TEST(ServeInfill, QwenVocabularyBuildsTheFimPrompt) {
  const std::string model = sluice::test::qwen3_tiny_model();  // Qwen3's whole vocabulary
  if (model.empty()) GTEST_SKIP() << "tests/node/node_modules missing (scripts/install-deps): no Qwen3 vocabulary";
  Server server({"-c", "512"}, model);
  ASSERT_GT(server.port(), 0) << server.log();
  const Http h = http(server.port(), "POST", "/infill",
                      R"({"input_prefix":"def add(a, b):\n    return ","input_suffix":"\n","n_predict":2,"temperature":0})");
  ASSERT_EQ(h.status, 200) << h.body;
  // <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>: the three markers and the texts.
  const json tp = http(server.port(), "POST", "/tokenize", R"({"content":"def add(a, b):\n    return "})").j();
  const json ts = http(server.port(), "POST", "/tokenize", R"({"content":"\n"})").j();
  EXPECT_EQ(h.j()["tokens_evaluated"], tp["tokens"].size() + ts["tokens"].size() + 3);
  EXPECT_EQ(h.j()["tokens_predicted"], 2);
}

TEST_F(ServeCompat, OllamaModelRoutes) {
  EXPECT_TRUE(http(port(), "GET", "/api/version").j()["version"].is_string());
  const json tags = http(port(), "GET", "/api/tags").j();
  ASSERT_EQ(tags["models"].size(), 1u) << tags.dump();
  EXPECT_EQ(tags["models"][0]["name"], "sluice-tiny-moe");
  EXPECT_EQ(http(port(), "GET", "/api/ps").j()["models"][0]["name"], "sluice-tiny-moe");
  const Http show = post("/api/show", json{{"model", "sluice-tiny-moe"}});
  ASSERT_EQ(show.status, 200) << show.body;
  EXPECT_EQ(show.j()["model_info"]["general.architecture"], "qwen3moe");
  const Http missing = post("/api/show", json{{"model", "llama3"}});
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.j()["error"].is_string()) << missing.body;
}

TEST_F(ServeCompat, OllamaChatAndGenerate) {
  const json options = {{"temperature", 0}, {"num_predict", 5}, {"num_ctx", 2048}, {"num_thread", 2}};
  const std::string reference =
      post("/v1/chat/completions", json{{"messages", kUser}, {"max_tokens", 5}, {"temperature", 0}}).j()["choices"][0]["message"]["content"];
  const Http whole = post("/api/chat", json{{"model", "sluice-tiny-moe"}, {"messages", kUser}, {"stream", false}, {"options", options}});
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.j()["message"]["content"], reference);
  EXPECT_EQ(whole.j()["done"], true);
  // Streamed by default: NDJSON, the last object done with the counts.
  const Http s = post("/api/chat", json{{"model", "sluice-tiny-moe"}, {"messages", kUser}, {"options", options}});
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.headers.find("application/x-ndjson"), std::string::npos) << s.headers;
  const std::vector<json> lines = ndjson(s.body);
  ASSERT_GE(lines.size(), 2u) << s.body;
  std::string text;
  for (const json& l : lines) text += l["message"]["content"].get<std::string>();
  EXPECT_EQ(text, reference);
  EXPECT_EQ(lines.back()["done"], true);
  EXPECT_EQ(lines.back()["eval_count"], whole.j()["eval_count"]);

  const std::string completion =
      post("/v1/completions", json{{"prompt", "And God said"}, {"max_tokens", 5}, {"temperature", 0}}).j()["choices"][0]["text"];
  const Http g = post("/api/generate", json{{"model", "sluice-tiny-moe"}, {"prompt", "And God said"}, {"raw", true},
                                          {"stream", false}, {"options", options}});
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.j()["response"], completion);
  const json gs = ndjson(post("/api/generate", json{{"model", "sluice-tiny-moe"}, {"prompt", "And God said"},
                                                    {"raw", true}, {"options", options}}).body).back();
  EXPECT_EQ(gs["done"], true);
  EXPECT_EQ(gs["context"], g.j()["context"]);
  EXPECT_EQ(gs["context"].size(), gs["prompt_eval_count"].get<size_t>() + gs["eval_count"].get<size_t>()) << gs.dump();

  const Http bad = post("/api/chat", json{{"model", "sluice-tiny-moe"}, {"messages", kUser}, {"options", {{"mirostat", 1}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.j()["error"].get<std::string>().find("options.mirostat"), std::string::npos) << bad.body;
}

TEST_F(ServeCompat, ResponsesShapeContinuationAndErrors) {
  const Http h = post("/v1/responses", json{{"input", "Who made the heaven?"}, {"instructions", "Be brief."},
                                            {"max_output_tokens", 4}, {"temperature", 0}, {"store", true}});
  ASSERT_EQ(h.status, 200) << h.body;
  const json r = h.j();
  EXPECT_EQ(r["object"], "response");
  ASSERT_EQ(r["output"].size(), 1u) << h.body;
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"][0]["type"], "output_text");
  // The same conversation as a chat request gives the same text.
  const json chat = {{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                               {{"role", "user"}, {"content", "Who made the heaven?"}}})},
                     {"max_tokens", 4}, {"temperature", 0}};
  const json c = post("/v1/chat/completions", chat).j();
  EXPECT_EQ(r["output"][0]["content"][0]["text"], c["choices"][0]["message"]["content"]);
  EXPECT_EQ(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
  // A continuation's prompt starts with the earlier conversation, reply included.
  const json next = post("/v1/responses", json{{"input", "And the earth?"}, {"previous_response_id", r["id"]},
                                               {"max_output_tokens", 2}, {"temperature", 0}}).j();
  EXPECT_GE(next["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), r["usage"]["input_tokens"].get<int>()) << next.dump();
  expect_error(post("/v1/responses", json{{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}}), 400, "text");
  expect_error(post("/v1/responses", json{{"input", "x"}, {"frobnicate", 1}}), 400, "frobnicate");
  expect_error(post("/v1/responses", json{{"input", "x"}, {"previous_response_id", "resp_x"}}), 404, "previous_response_id");
}

TEST(ServeNodeClients, OllamaAndAnthropicClientsPass) {
  const std::filesystem::path node_dir = kSource + "/tests/node";
  if (!std::filesystem::exists(node_dir / "node_modules/ollama") ||
      !std::filesystem::exists(node_dir / "node_modules/@anthropic-ai/sdk") ||
      std::system("node --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "node or tests/node/node_modules missing (scripts/install-deps)";
  Server server({"--parallel", "2", "--api-key", kKey});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const std::string cmd = "cd '" + node_dir.string() + "' && node serve_clients.mjs http://127.0.0.1:" +
                          std::to_string(server.port()) + " " + kKey + " sluice-tiny-moe 2>&1";
  const auto r = sluice::test::sh(cmd);
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   anthropic: count_tokens"), std::string::npos) << r.out;
}

}  // namespace
