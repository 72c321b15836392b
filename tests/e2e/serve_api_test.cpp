// End-to-end tests of the request surface (issue 15, items 6-8): every request field is either
// implemented, ignored because it changes nothing (fields.h), or refused with a 400 naming it; logprobs come from the model's distribution and
// agree with greedy choice; tool calls and tool results in a conversation render through the
// model's chat template the same way from the OpenAI and the Anthropic shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "serve_client.h"
#include "sluice/sluice.h"

using namespace sluice::test::serve;

namespace {

class ServeApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server({}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static Server* server_;
};
Server* ServeApi::server_ = nullptr;

TEST_F(ServeApi, UnimplementedFieldsAre400NamingThem) {
  ASSERT_GT(port(), 0);
  const std::string chat = R"("messages":[{"role":"user","content":"hi"}],"max_tokens":2)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("response_format":{"type":"xml"})", "response_format.type"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"not":{}}}})",
       "response_format.json_schema.schema"},
      {R"("grammar":"root ::= x")", "grammar"},
      {R"("logit_bias":{"5":1000})", "logit_bias"},
      {R"("tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}])",
       "tool_choice"},
      {R"("store":"yes")", "store"},
      {R"("frobnicate":1)", "frobnicate"},
      {R"("top_logprobs":3)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("stream_options":{"include_obfuscation":true})", "stream_options.include_obfuscation"},
      {R"("chat_template_kwargs":{"foo":1})", "chat_template_kwargs.foo"},
      {R"("tools":[{"type":"function"}])", "tools[0]"},
      {R"("messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{oops"}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
  };
  for (const auto& [extra, param] : cases) {
    // A later "messages" key replaces the default one (nlohmann keeps the last).
    expect_error(http(port(), "POST", "/v1/chat/completions", "{" + chat + "," + extra + "}"), 400,
                 param);
  }
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","echo":true})"), 400,
               "echo");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","suffix":"b"})"), 400,
               "suffix");
  const Http m = http(
      port(), "POST", "/v1/messages",
      R"({"max_tokens":2,"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"any"}})");
  EXPECT_EQ(m.status, 400) << m.body;
  EXPECT_NE(m.body.find("tool_choice"), std::string::npos) << m.body;
  // The defaults of those fields are accepted, and so are constraints this model's vocabulary
  // can write (the forced tool call above has no syntax without a chat template).
  for (const std::string extra :
       {R"("response_format":{"type":"text"})", R"("logit_bias":{})", R"("store":false)", R"("store":true)",
        R"("logit_bias":{"5":10})", R"("metadata":{"k":"v"})",
        R"("tool_choice":"none")", R"("parallel_tool_calls":false)", R"("user":"u1")",
        R"("response_format":{"type":"json_object"})",
        R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}})"}) {
    const Http h = http(port(), "POST", "/v1/chat/completions", "{" + chat + "," + extra + "}");
    EXPECT_EQ(h.status, 200) << extra << ": " << h.body;
  }
}

TEST_F(ServeApi, LogprobsFollowTheModelsDistribution) {
  ASSERT_GT(port(), 0);
  const Http h = http(
      port(), "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Who made the heaven?"}],"max_tokens":6,"temperature":0,
                          "logprobs":true,"top_logprobs":3})");
  ASSERT_EQ(h.status, 200) << h.body;
  const json c = h.j()["choices"][0];
  const json& content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u) << h.body;
  std::string joined;
  for (const json& t : content) {
    joined += t["token"].get<std::string>();
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one, and probabilities are proper.
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
    EXPECT_FLOAT_EQ(t["top_logprobs"][0]["logprob"].get<float>(), t["logprob"].get<float>());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][2]["logprob"].get<double>());
    double p = 0;
    for (const json& a : t["top_logprobs"]) p += std::exp(a["logprob"].get<double>());
    EXPECT_LE(p, 1.0 + 1e-4);
    EXPECT_EQ(t["bytes"].size(), t["token"].get<std::string>().size());
  }
  EXPECT_EQ(joined, c["message"]["content"]);

  // Completions format, streamed: one entry per token across the chunks.
  const Http s = http(
      port(), "POST", "/v1/completions",
      R"({"prompt":"And God said","max_tokens":5,"temperature":0,"logprobs":2,"stream":true})");
  ASSERT_EQ(s.status, 200);
  size_t n = 0;
  for (size_t at = s.body.find("data: {"); at != std::string::npos;
       at = s.body.find("data: {", at + 1)) {
    const json e = json::parse(s.body.substr(at + 6, s.body.find('\n', at) - at - 6));
    const json& lp = e["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    n += lp["tokens"].size();
    for (const json& alt : lp["top_logprobs"]) EXPECT_EQ(alt.size(), 2u);
  }
  EXPECT_EQ(n, 5u);
}

// A conversation with a tool call and its result, on a model whose template defines tool calls
// (the qwen3moe reference: Qwen3's template): OpenAI's shape (arguments as JSON text) and
// Anthropic's (tool_use / tool_result blocks) must build the prompt the template builds from
// arguments as an object.
TEST(ServeTools, ToolTurnsRoundTripThroughTheTemplate) {
  const std::string model = sluice::test::testdata("reference/qwen3moe-f32.gguf");
  Server server({"-c", "1024"}, model);
  ASSERT_GT(server.port(), 0) << server.log();
  const json tools =
      json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  const json openai = {
      {"max_tokens", 1},
      {"tools", tools},
      {"messages",
       json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                    {{"role", "assistant"},
                     {"content", nullptr},
                     {"tool_calls", json::array({{{"id", "call_1"},
                                                  {"type", "function"},
                                                  {"function",
                                                   {{"name", "get_weather"},
                                                    {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
                    {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}})}};
  const json anthropic = {
      {"max_tokens", 1},
      {"tools", json::array({{{"name", "get_weather"},
                              {"description", "Weather"},
                              {"input_schema", tools[0]["function"]["parameters"]}}})},
      {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                                {{"role", "assistant"},
                                 {"content", json::array({{{"type", "tool_use"},
                                                           {"id", "call_1"},
                                                           {"name", "get_weather"},
                                                           {"input", {{"city", "Paris"}}}}})}},
                                {{"role", "user"},
                                 {"content", json::array({{{"type", "tool_result"},
                                                           {"tool_use_id", "call_1"},
                                                           {"content", "sunny"}}})}}})}};
  const Http o = http(server.port(), "POST", "/v1/chat/completions", openai.dump());
  const Http a = http(server.port(), "POST", "/v1/messages", anthropic.dump());
  ASSERT_EQ(o.status, 200) << o.body;
  ASSERT_EQ(a.status, 200) << a.body;

  auto engine = sluice::Engine::load({.model_path = model, .n_threads = 1, .n_ctx = 256});
  json native = openai["messages"];
  native[1]["content"] = "";  // what a null content means to the template
  native[1]["tool_calls"][0]["function"]["arguments"] = {{"city", "Paris"}};
  std::string rendered;
  const auto tokens = sluice::chat_prompt_tokens(*engine, native.dump(), tools.dump(), &rendered);
  EXPECT_NE(rendered.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                          "\"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << rendered;
  EXPECT_NE(rendered.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos)
      << rendered;
  EXPECT_EQ(o.j()["usage"]["prompt_tokens"], tokens.size());
  EXPECT_EQ(a.j()["usage"]["input_tokens"], tokens.size());
}

}  // namespace
