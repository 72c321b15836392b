// Structured output through `sluice serve` on a random-weight model with Qwen3's vocabulary and
// chat template: response_format json_schema / json_object, llama-server's grammar and json_schema
// fields, forced tool calls in OpenAI's and Anthropic's shapes, streamed and not (arguments
// validated by ajv against each tool's schema), the 400s that name the field and the reason,
// finish_reason "length" for a reply cut inside its grammar, tool calls through /v1/responses, and
// the openai npm client's chat.completions.parse with zod and responses API with a function tool
// (tests/node/serve_structured.mjs).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "../unit/qwen3_model.h"
#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

const std::filesystem::path kNodeDir = std::filesystem::path(kSource) / "tests/node";

bool have_node() {
  return std::filesystem::exists(kNodeDir / "node_modules/ajv") &&
         std::system("node --version > /dev/null 2>&1") == 0;
}

const json kWeather = json::parse(R"({"type":"object","properties":{
    "city":{"type":"string","maxLength":10},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
    "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit","days"],"additionalProperties":false})");
const json kBooking = json::parse(R"({"type":"object","properties":{
    "day":{"type":"string","format":"date"},"seats":{"type":"integer","minimum":1,"maximum":9},
    "note":{"type":["string","null"],"maxLength":6}},"required":["day","seats"],"additionalProperties":false})");
const json kReply = json::parse(R"({"type":"object","properties":{
    "answer":{"type":"string","maxLength":12},"confidence":{"type":"number","minimum":0,"maximum":1},
    "sources":{"type":"array","items":{"type":"string","format":"uuid"},"maxItems":2}},
    "required":["answer","confidence","sources"],"additionalProperties":false})");

json openai_tools() {
  return json::array(
      {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", kWeather}}}},
       {{"type", "function"}, {"function", {{"name", "book"}, {"parameters", kBooking}}}}});
}
json anthropic_tools() {
  return json::array({{{"name", "get_weather"}, {"input_schema", kWeather}},
                      {{"name", "book"}, {"input_schema", kBooking}}});
}

// The JSON objects of an SSE body's data lines.
std::vector<json> events(const std::string& body) {
  std::vector<json> out;
  for (size_t at = body.find("data: {"); at != std::string::npos; at = body.find("data: {", at + 1))
    out.push_back(json::parse(body.substr(at + 6, body.find('\n', at) - at - 6)));
  return out;
}

class ServeStructured : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = sluice::test::qwen3_tiny_model();
    if (!model.empty())
      server_ = new Server({"--parallel", "4", "--api-key", kKey, "-c", "2048"}, model);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_)
      GTEST_SKIP() << "tests/node/node_modules missing (scripts/install-deps): no Qwen3 vocabulary";
    ASSERT_GT(server_->port(), 0) << "server did not start; log: " << server_->log();
  }
  static Http post(const std::string& path, const json& body) {
    return http(server_->port(), "POST", path, body.dump());
  }
  static json chat(json extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Help me."}}})},
                 {"max_tokens", 300},
                 {"temperature", 1}};
    body.update(extra);
    return body;
  }
  // Every output validated under its schema by ajv.
  static void validate(const json& cases, const std::string& label) {
    if (!have_node()) return;
    const std::filesystem::path file =
        sluice::test::scratch_dir() / ("serve-structured-" + label + ".json");
    std::ofstream(file) << cases.dump();
    const auto r = sluice::test::sh("cd '" + kNodeDir.string() + "' && node validate_json.mjs '" +
                                    file.string() + "'");
    EXPECT_EQ(r.status, 0) << r.out;
  }
  static Server* server_;
};
Server* ServeStructured::server_ = nullptr;

}  // namespace

TEST_F(ServeStructured, ResponseFormatJsonSchemaStreamedAndNot) {
  json outputs = json::array();
  for (int seed = 1; seed <= 4; ++seed) {
    const bool stream = seed > 2;
    const json body =
        chat({{"seed", seed},
              {"stream", stream},
              {"response_format",
               {{"type", "json_schema"},
                {"json_schema", {{"name", "reply"}, {"strict", true}, {"schema", kReply}}}}}});
    const Http h = post("/v1/chat/completions", body);
    ASSERT_EQ(h.status, 200) << h.body;
    std::string content, finish;
    if (stream) {
      for (const json& e : events(h.body))
        for (const json& c : e["choices"]) {
          if (c["delta"].contains("content") && c["delta"]["content"].is_string())
            content += c["delta"]["content"];
          if (c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
    } else {
      content = h.j()["choices"][0]["message"]["content"];
      finish = h.j()["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "stop") << h.body;
    outputs.push_back(content);
  }
  // json_object: any object.
  const Http o =
      post("/v1/chat/completions",
           chat({{"seed", 3}, {"response_format", {{"type", "json_object"}}}, {"max_tokens", 40}}));
  ASSERT_EQ(o.status, 200) << o.body;
  const std::string text = o.j()["choices"][0]["message"]["content"];
  EXPECT_EQ(text.substr(0, 1), "{") << text;
  validate(json::array({{{"name", "reply"}, {"schema", kReply}, {"outputs", outputs}}}), "reply");
}

TEST_F(ServeStructured, LlamaServerGrammarAndJsonSchemaFields) {
  const std::string gbnf = "root ::= [0-9]{3} \"-\" [a-z]{2,4} \"!\"\n";
  const Http c = post("/v1/completions",
                      {{"prompt", "Code:"}, {"grammar", gbnf}, {"max_tokens", 20}, {"seed", 1}});
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string text = c.j()["choices"][0]["text"];
  EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{3}-[a-z]{2,4}!"))) << text;
  EXPECT_EQ(c.j()["choices"][0]["finish_reason"], "stop");
  const json schema = {{"type", "array"},
                       {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
                       {"maxItems", 3}};
  json outputs = json::array();
  const Http js =
      post("/v1/completions",
           {{"prompt", "List:"}, {"json_schema", schema}, {"max_tokens", 40}, {"seed", 2}});
  ASSERT_EQ(js.status, 200) << js.body;
  outputs.push_back(js.j()["choices"][0]["text"]);
  const Http jc = post("/v1/chat/completions", chat({{"json_schema", schema}, {"seed", 4}}));
  ASSERT_EQ(jc.status, 200) << jc.body;
  outputs.push_back(jc.j()["choices"][0]["message"]["content"]);
  const Http gc = post("/v1/chat/completions", chat({{"grammar", gbnf}, {"seed", 5}}));
  ASSERT_EQ(gc.status, 200) << gc.body;
  const std::string chat_text = gc.j()["choices"][0]["message"]["content"];
  EXPECT_TRUE(std::regex_match(chat_text, std::regex("[0-9]{3}-[a-z]{2,4}!"))) << chat_text;
  validate(json::array({{{"name", "digits"}, {"schema", schema}, {"outputs", outputs}}}), "fields");
}

TEST_F(ServeStructured, ForcedToolCallsInOpenAiShape) {
  json weather = json::array(), booking = json::array();
  const json choices[] = {"required", {{"type", "function"}, {"function", {{"name", "book"}}}}};
  for (int seed = 1; seed <= 4; ++seed) {
    const bool stream = seed % 2 == 0;
    const json& choice = choices[(seed / 2) % 2];
    const Http h = post("/v1/chat/completions", chat({{"seed", seed},
                                                      {"stream", stream},
                                                      {"tools", openai_tools()},
                                                      {"tool_choice", choice},
                                                      {"parallel_tool_calls", false}}));
    ASSERT_EQ(h.status, 200) << h.body;
    std::string name, args, finish;
    if (stream) {
      for (const json& e : events(h.body))
        for (const json& c : e["choices"]) {
          for (const json& tc : c["delta"].value("tool_calls", json::array())) {
            if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
            if (tc["function"].contains("arguments"))
              args += tc["function"]["arguments"].get<std::string>();
          }
          if (c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
    } else {
      const json j = h.j();
      const json& m = j["choices"][0]["message"];
      ASSERT_EQ(m["tool_calls"].size(), 1u) << h.body;
      name = m["tool_calls"][0]["function"]["name"];
      args = m["tool_calls"][0]["function"]["arguments"];
      finish = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "tool_calls") << h.body;
    if (choice.is_object()) {
      EXPECT_EQ(name, "book");
    }
    ASSERT_TRUE(name == "get_weather" || name == "book") << h.body;
    (name == "book" ? booking : weather).push_back(args);
  }
  validate(json::array({{{"name", "get_weather"}, {"schema", kWeather}, {"outputs", weather}},
                        {{"name", "book"}, {"schema", kBooking}, {"outputs", booking}}}),
           "openai-tools");
}

TEST_F(ServeStructured, ForcedToolCallsInAnthropicShape) {
  json weather = json::array(), booking = json::array();
  // "any" may call several tools in one reply; "tool" with disable_parallel_tool_use calls one.
  const json choices[] = {
      {{"type", "any"}},
      {{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", true}}};
  for (int seed = 1; seed <= 4; ++seed) {
    const bool stream = seed % 2 == 0;
    const json& choice = choices[(seed / 2) % 2];
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "Help me."}}})},
                 {"max_tokens", 300},
                 {"temperature", 1},
                 {"stream", stream},
                 {"tools", anthropic_tools()},
                 {"tool_choice", choice}};
    const Http h = post("/v1/messages", body);
    ASSERT_EQ(h.status, 200) << h.body;
    std::vector<std::pair<std::string, std::string>> calls;  // name, input per tool_use block
    std::string stop;
    if (stream) {
      std::map<int, size_t> block;  // content block index → calls entry
      for (const json& e : events(h.body)) {
        if (e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use") {
          block[e["index"]] = calls.size();
          calls.emplace_back(e["content_block"]["name"], "");
        }
        if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta")
          calls.at(block.at(e["index"])).second += e["delta"]["partial_json"].get<std::string>();
        if (e["type"] == "message_delta") stop = e["delta"]["stop_reason"];
      }
    } else {
      const json j = h.j();
      for (const json& b : j["content"])
        if (b["type"] == "tool_use") calls.emplace_back(b["name"], b["input"].dump());
      stop = j["stop_reason"];
    }
    EXPECT_EQ(stop, "tool_use") << h.body;
    ASSERT_FALSE(calls.empty()) << h.body;
    if (choice["type"] == "tool") {
      EXPECT_EQ(calls.size(), 1u) << h.body;
      EXPECT_EQ(calls[0].first, "get_weather");
    }
    for (const auto& [name, input] : calls) {
      ASSERT_TRUE(name == "get_weather" || name == "book") << h.body;
      (name == "book" ? booking : weather).push_back(input);
    }
  }
  validate(json::array({{{"name", "get_weather"}, {"schema", kWeather}, {"outputs", weather}},
                        {{"name", "book"}, {"schema", kBooking}, {"outputs", booking}}}),
           "anthropic-tools");
}

TEST_F(ServeStructured, BadConstraintsAre400sWithTheReason) {
  auto error = [&](const std::string& path, const json& body, const std::string& param,
                   const std::string& words) {
    const Http h = post(path, body);
    expect_error(h, 400, param);
    EXPECT_NE(h.body.find(words), std::string::npos) << h.body;
  };
  auto with = [&](const char* extra) { return chat(json::parse(extra)); };
  error("/v1/chat/completions", with(R"({"grammar":"root ::= \"a\" bad\n"})"), "grammar",
        "line 1, column 14: rule 'bad' is used but never defined");
  error("/v1/completions", json::parse(R"({"prompt":"x","grammar":"root ::= [a-\n"})"), "grammar",
        "line 1");
  error(
      "/v1/chat/completions",
      with(
          R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","contains":{"type":"integer"}}}}})"),
      "response_format.json_schema.schema", "keyword 'contains' is not supported");
  error("/v1/chat/completions", with(R"({"json_schema":{"type":"string","format":"hostname"}})"),
        "json_schema", "format 'hostname' is not supported");
  error("/v1/chat/completions",
        with(R"({"json_schema":{"type":"integer"},"grammar":"root ::= \"1\"\n"})"), "json_schema",
        "both constrain the reply");
  json forced =
      chat(json::parse(R"({"tool_choice":"required","response_format":{"type":"json_object"}})"));
  forced["tools"] = openai_tools();
  error("/v1/chat/completions", forced, "response_format",
        "cannot be combined with a tool_choice that forces a call");
  json missing =
      chat(json::parse(R"({"tool_choice":{"type":"function","function":{"name":"nope"}}})"));
  missing["tools"] = openai_tools();
  error("/v1/chat/completions", missing, "tool_choice", "no tool is named 'nope'");
  error("/v1/chat/completions", with(R"({"tool_choice":"required"})"), "tool_choice",
        "no 'tools' are given");
  error(
      "/v1/chat/completions",
      with(
          R"({"response_format":{"type":"json_object"},"chat_template_kwargs":{"enable_thinking":true}})"),
      "chat_template_kwargs.enable_thinking", "thinking cannot be combined");
  const json thinking = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                         {"max_tokens", 100},
                         {"thinking", {{"type", "enabled"}, {"budget_tokens", 50}}},
                         {"tools", anthropic_tools()},
                         {"tool_choice", {{"type", "any"}}}};
  const Http t = post("/v1/messages", thinking);
  EXPECT_EQ(t.status, 400) << t.body;
  EXPECT_NE(t.body.find("thinking cannot be combined"), std::string::npos) << t.body;
}

TEST_F(ServeStructured, ReplyCutInsideTheGrammarIsLength) {
  const Http h =
      post("/v1/chat/completions", chat({{"json_schema", kReply}, {"max_tokens", 3}, {"seed", 1}}));
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["choices"][0]["finish_reason"], "length") << h.body;
  EXPECT_EQ(h.j()["usage"]["completion_tokens"], 3);
}

TEST_F(ServeStructured, OpenAiClientParsesWithZod) {
  if (!have_node() || !std::filesystem::exists(kNodeDir / "node_modules/zod"))
    GTEST_SKIP() << "node or tests/node/node_modules missing (scripts/install-deps)";
  const auto r = sluice::test::sh("cd '" + kNodeDir.string() +
                                  "' && node serve_structured.mjs http://127.0.0.1:" +
                                  std::to_string(server_->port()) + "/v1 " + kKey);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   a streamed zod response format"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   responses: a forced function tool"), std::string::npos) << r.out;
}

// /v1/responses with function tools: a forced call is a function_call item with arguments valid
// under the tool's schema; streamed, its arguments arrive as function_call_arguments events that
// add up to the item's; a function_call_output continues it.
TEST_F(ServeStructured, ResponsesToolCalls) {
  json tools = json::array();
  for (const json& t : openai_tools())
    tools.push_back({{"type", "function"}, {"name", t["function"]["name"]}, {"parameters", t["function"]["parameters"]}});
  json cases = json::array();
  for (int seed = 1; seed <= 2; ++seed) {
    const bool stream = seed == 2;
    const json body = {{"input", "Book me a table."}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "book"}}},
                       {"parallel_tool_calls", false}, {"temperature", 1}, {"seed", seed},
                       {"max_output_tokens", 300}, {"stream", stream}};
    const Http h = post("/v1/responses", body);
    ASSERT_EQ(h.status, 200) << h.body;
    json response;
    std::string deltas;
    if (stream) {
      for (const json& e : events(h.body)) {
        if (e["type"] == "response.function_call_arguments.delta") deltas += e["delta"].get<std::string>();
        if (e["type"] == "response.completed") response = e["response"];
      }
    } else {
      response = h.j();
    }
    json call;
    for (const json& o : response["output"])
      if (o["type"] == "function_call") call = o;
    ASSERT_TRUE(call.is_object()) << h.body;
    EXPECT_EQ(call["name"], "book");
    EXPECT_EQ(call["status"], "completed");
    ASSERT_TRUE(call["call_id"].is_string());
    const std::string args = call["arguments"];
    if (stream) EXPECT_EQ(deltas, args);
    cases.push_back(args);
    if (!stream) {
      // The continued prompt starts with the first one (tools again, as a client sends them), so
      // its KV comes from the prefix cache: all but the tail the template renders differently for
      // a past assistant turn than for the generation prompt.
      const json next = {{"previous_response_id", response["id"]}, {"max_output_tokens", 4}, {"temperature", 0}, {"tools", tools},
                         {"input", json::array({{{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "booked"}}})}};
      const Http n = post("/v1/responses", next);
      ASSERT_EQ(n.status, 200) << n.body;
      EXPECT_GE(n.j()["usage"]["input_tokens_details"]["cached_tokens"].get<int>(),
                response["usage"]["input_tokens"].get<int>() * 3 / 4)
          << n.body;
    }
  }
  validate(json::array({{{"name", "book"}, {"schema", kBooking}, {"outputs", cases}}}), "responses-tools");
}
