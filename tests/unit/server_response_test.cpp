// The HTTP API's response shapes for parsed chat output: a Qwen3-style reply holding reasoning and
// tool calls must leave as reasoning_content + tool_calls (OpenAI) and thinking + tool_use blocks
// (Anthropic), whole and as stream deltas, with no marker text anywhere on the wire.
#include <gtest/gtest.h>

#include "server/api.h"

using namespace sluice;
using namespace sluice::server;
using json = nlohmann::json;

namespace {

const std::string kReply =
    "<think>\nNeed two lookups.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
    "\"days\": 2}}\n</tool_call>";

ResponseFormat format(Api api) {
  ResponseFormat f;
  f.api = api;
  f.id = "x";
  f.model = "m";
  f.syntax = ChatSyntax::kHermes;
  f.output.tools = true;
  return f;
}

GenerateResult result() {
  GenerateResult r;
  r.text = kReply;
  r.tokens.assign(40, 1);
  r.finish = FinishReason::kEog;
  return r;
}

// The JSON payloads of an SSE body, in order.
std::vector<json> events(const std::string& body) {
  std::vector<json> out;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 1)) {
    const size_t end = body.find('\n', at);
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
  }
  return out;
}

// Streams kReply in `piece`-byte chunks.
std::string stream(ResponseFormat& f, size_t piece) {
  std::string out = f.stream_begin();
  for (size_t i = 0; i < kReply.size(); i += piece)
    out += f.stream_text(kReply.substr(i, piece), {});
  return out + f.stream_end(result(), false);
}

TEST(ServerResponse, OpenAiWholeReply) {
  ResponseFormat f = format(Api::kChat);
  const json j = f.full(result());
  const json& c = j["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["content"], "Checking.");
  EXPECT_EQ(c["message"]["reasoning_content"], "Need two lookups.");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(c["message"]["tool_calls"][1]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(c["message"]["tool_calls"][1]["function"]["arguments"].get<std::string>()),
            json({{"city", "Oslo"}, {"days", 2}}));
  EXPECT_NE(c["message"]["tool_calls"][0]["id"], c["message"]["tool_calls"][1]["id"]);
}

TEST(ServerResponse, OpenAiStreamDeltas) {
  for (size_t piece : {size_t{1}, size_t{3}, size_t{1000}}) {
    ResponseFormat f = format(Api::kChat);
    const std::string body = stream(f, piece);
    EXPECT_EQ(body.find("<tool_call>"), std::string::npos);
    EXPECT_EQ(body.find("think>"), std::string::npos);
    EXPECT_TRUE(body.ends_with("data: [DONE]\n\n"));
    std::string content, reasoning;
    std::vector<json> calls;
    std::string finish;
    for (const json& e : events(body)) {
      const json& c = e["choices"][0];
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      const json& d = c["delta"];
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (const json& t : d["tool_calls"]) {
          const size_t i = t["index"];
          if (i == calls.size())
            calls.push_back({{"id", t["id"]}, {"name", t["function"]["name"]}, {"arguments", ""}});
          calls[i]["arguments"] = calls[i]["arguments"].get<std::string>() +
                                  t["function"]["arguments"].get<std::string>();
        }
    }
    EXPECT_EQ(content, "Checking.");
    EXPECT_EQ(reasoning, "Need two lookups.");
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  }
}

TEST(ServerResponse, ParallelToolCallsFalseKeepsTheFirst) {
  ResponseFormat f = format(Api::kChat);
  f.max_tool_calls = 1;
  EXPECT_EQ(f.full(result())["choices"][0]["message"]["tool_calls"].size(), 1u);
}

TEST(ServerResponse, AnthropicBlocks) {
  ResponseFormat whole = format(Api::kMessages);
  const json j = whole.full(result());
  EXPECT_EQ(j["stop_reason"], "tool_use");
  ASSERT_EQ(j["content"].size(), 4u);
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][0]["thinking"], "Need two lookups.");
  EXPECT_EQ(j["content"][1]["text"], "Checking.");
  EXPECT_EQ(j["content"][3]["type"], "tool_use");
  EXPECT_EQ(j["content"][3]["input"], json({{"city", "Oslo"}, {"days", 2}}));

  ResponseFormat f = format(Api::kMessages);
  const std::string body = stream(f, 2);
  EXPECT_EQ(body.find("<tool_call>"), std::string::npos);
  std::vector<json> blocks;
  int open = -1;
  for (const json& e : events(body)) {
    if (e["type"] == "content_block_start") {
      EXPECT_EQ(open, -1) << "a block opened before the previous one closed";
      open = e["index"];
      EXPECT_EQ(open, static_cast<int>(blocks.size()));
      blocks.push_back(e["content_block"]);
      blocks.back()["partial"] = "";
    } else if (e["type"] == "content_block_delta") {
      EXPECT_EQ(e["index"], open);
      const json& d = e["delta"];
      const std::string piece = d["type"] == "text_delta"       ? d["text"]
                                : d["type"] == "thinking_delta" ? d["thinking"]
                                                                : d["partial_json"];
      blocks.back()["partial"] = blocks.back()["partial"].get<std::string>() + piece;
    } else if (e["type"] == "content_block_stop") {
      EXPECT_EQ(e["index"], open);
      open = -1;
    } else if (e["type"] == "message_delta") {
      EXPECT_EQ(e["delta"]["stop_reason"], "tool_use");
    }
  }
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0]["type"], "thinking");
  EXPECT_EQ(blocks[0]["partial"], "Need two lookups.");
  EXPECT_EQ(blocks[1]["partial"], "Checking.");
  EXPECT_EQ(blocks[2]["type"], "tool_use");
  EXPECT_EQ(blocks[2]["name"], "get_weather");
  EXPECT_EQ(json::parse(blocks[2]["partial"].get<std::string>()), json({{"city", "Paris"}}));
}

TEST(ServerResponse, CompletionsTextIsNotParsed) {
  ResponseFormat f = format(Api::kCompletion);
  EXPECT_EQ(f.full(result())["choices"][0]["text"], kReply);
}

}  // namespace
