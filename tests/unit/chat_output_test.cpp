// Chat output parsing: for each real template with a tool-call syntax, an assistant turn holding
// reasoning, text and tool calls is rendered by the template itself; the part after the generation
// prompt is what the model was taught to write, and the parser must recover the same reasoning,
// text and calls from it — whole, and fed one byte at a time (markers split across pushes).
#include "sluice/chat_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "test_util.h"

using namespace sluice;
using json = nlohmann::ordered_json;

namespace {

std::string template_text(const std::string& name) {
  std::ifstream f(sluice::test::testdata("chat-templates/" + name), std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json tools() {
  return json::parse(
      R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
    "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}])");
}

json call(const std::string& name, const json& args, const std::string& id) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

// What the model writes for `assistant`: the rendering with the turn minus the generation prompt,
// without the end-of-turn marker (an end-of-generation token, which carries no text).
std::string generated(const std::string& source, const json& assistant, const std::string& eot,
                      json extra = json::object()) {
  chat::ChatRequest req;
  req.messages = json::array({{{"role", "user"}, {"content", "Weather in Paris and Oslo?"}}});
  req.tools = tools();
  req.extra = extra;
  const std::string prompt = chat::render_chat(source, req);
  req.messages.push_back(assistant);
  req.add_generation_prompt = false;
  const std::string full = chat::render_chat(source, req);
  // DeepSeek V3.2's generation prompt opens and closes an empty thinking block; a past turn shows
  // only its "</think>": the model's text follows either.
  std::string out;
  const std::string empty_think = "<think></think>",
                    base = prompt.substr(0, prompt.size() - empty_think.size());
  if (full.starts_with(prompt))
    out = full.substr(prompt.size());
  else if (prompt.ends_with(empty_think) && full.starts_with(base + "</think>"))
    out = full.substr(base.size() + 8);
  else
    ADD_FAILURE() << "prompt:\n" << prompt << "\nfull:\n" << full;
  if (eot.empty()) return out;
  const size_t e = out.rfind(eot);
  EXPECT_NE(e, std::string::npos) << out;
  return out.substr(0, e);
}

ChatOutput parse(ChatSyntax syntax, const std::string& text, bool bytewise,
                 bool starts_in_reasoning = false) {
  ChatOutputParser p(syntax, {.tools = true, .starts_in_reasoning = starts_in_reasoning});
  ChatOutput out;
  if (bytewise)
    for (char c : text) out.add(p.push(std::string_view(&c, 1)));
  else
    out.add(p.push(text));
  out.add(p.finish());
  return out;
}

void expect_calls(const ChatOutput& out, const json& expected) {
  ASSERT_EQ(out.tool_calls.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(out.tool_calls[i].name, expected[i]["function"]["name"].get<std::string>());
    EXPECT_EQ(json::parse(out.tool_calls[i].text), expected[i]["function"]["arguments"]);
    EXPECT_EQ(out.tool_calls[i].index, static_cast<int>(i));
    EXPECT_FALSE(out.tool_calls[i].id.empty());
  }
}

struct Case {
  const char* file;
  ChatSyntax syntax;
  const char* eot;
  bool reasoning;  // the template renders reasoning_content of the last turn
};

class ChatOutputTemplates : public ::testing::TestWithParam<Case> {};

TEST_P(ChatOutputTemplates, RecoversWhatTheTemplateTeaches) {
  const Case& c = GetParam();
  const std::string source = template_text(c.file);
  ASSERT_FALSE(source.empty()) << c.file;
  EXPECT_EQ(chat_syntax(source), c.syntax);
  const json calls =
      json::array({call("get_weather", {{"city", "Paris"}, {"days", 3}}, "functions.get_weather:0"),
                   call("get_weather", {{"city", "Oslo"}}, "functions.get_weather:1")});
  json assistant = {{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}};
  json extra = json::object();
  if (c.reasoning) {
    assistant["reasoning_content"] = "The user wants two cities.";
    assistant["thinking"] = "The user wants two cities.";  // gpt-oss names it so
    extra["enable_thinking"] = true;
    extra["thinking"] = true;
  }
  const std::string text = generated(source, assistant, c.eot, extra);
  // The DeepSeek V4 prompt opens <think> itself when thinking is on.
  const bool open = c.syntax == ChatSyntax::kDsml && c.reasoning;
  // gpt-oss's template renders an assistant turn's first call only (the model stops at <|call|>).
  const json expected = c.syntax == ChatSyntax::kHarmony ? json::array({calls[0]}) : calls;
  for (bool bytewise : {false, true}) {
    SCOPED_TRACE(::testing::Message() << c.file << (bytewise ? " bytewise" : " whole") << "\n"
                                      << text);
    ChatOutput out = parse(c.syntax, text, bytewise, open);
    expect_calls(out, expected);
    EXPECT_EQ(out.content, "");
    if (c.reasoning) {
      EXPECT_EQ(out.reasoning, "The user wants two cities.");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Real, ChatOutputTemplates,
    ::testing::Values(
        Case{"Qwen-Qwen3-0.6B.jinja", ChatSyntax::kHermes, "<|im_end|>", true},
        Case{"Qwen-Qwen2.5-7B-Instruct.jinja", ChatSyntax::kHermes, "<|im_end|>", false},
        Case{"deepseek-ai-DeepSeek-V3.1.jinja", ChatSyntax::kDeepSeek, "<｜end▁of▁sentence｜>",
             false},
        Case{"deepseek-ai-DeepSeek-V3.2.jinja", ChatSyntax::kDsmlFunctions, "<｜end▁of▁sentence｜>",
             false},
        Case{"deepseek-ai-DeepSeek-V4.jinja", ChatSyntax::kDsml, "<｜end▁of▁sentence｜>", true},
        Case{"GLM-4.6.jinja", ChatSyntax::kGlm, "", false},
        Case{"moonshotai-Kimi-K2.jinja", ChatSyntax::kKimi, "<|im_end|>", false},
        Case{"Kimi-K2-Instruct.jinja", ChatSyntax::kKimi, "<|im_end|>", false},
        Case{"openai-gpt-oss-120b.jinja", ChatSyntax::kHarmony, "<|call|>", true}));

TEST(ChatOutput, PlainTemplatesHaveNoToolSyntax) {
  EXPECT_EQ(chat_syntax(template_text("google-gemma-2-2b-it.jinja")), ChatSyntax::kPlain);
  EXPECT_EQ(chat_syntax(""), ChatSyntax::kPlain);
}

TEST(ChatOutput, ThinkBlockGoesToReasoningAndTextStaysVerbatim) {
  for (bool bytewise : {false, true}) {
    ChatOutput out =
        parse(ChatSyntax::kHermes, "<think>\nstep 1 < step 2\n</think>\n\nThe answer is <b>4</b>.",
              bytewise);
    EXPECT_EQ(out.reasoning, "step 1 < step 2");
    EXPECT_EQ(out.content, "The answer is <b>4</b>.");
    EXPECT_TRUE(out.tool_calls.empty());
  }
  // A reply with no reasoning keeps its leading space (the plain fallback format relies on it).
  EXPECT_EQ(parse(ChatSyntax::kPlain, " Hello <thin", true).content, " Hello <thin");
  // A prompt that opened <think> itself: everything up to </think> is reasoning.
  ChatOutput open = parse(ChatSyntax::kDsml, "plan</think>done", true, true);
  EXPECT_EQ(open.reasoning, "plan");
  EXPECT_EQ(open.content, "done");
  // Cut off while thinking: what was thought is reasoning, never content.
  EXPECT_EQ(parse(ChatSyntax::kHermes, "<think>still going", false).reasoning, "still going");
}

TEST(ChatOutput, StrayTurnMarkersNeverReachText) {
  for (bool bytewise : {false, true}) {
    ChatOutput q =
        parse(ChatSyntax::kHermes,
              "<think>a<|im_start|>b</think>Hi<|im_end|> there<|im_start|>user", bytewise);
    EXPECT_EQ(q.reasoning, "ab");
    EXPECT_EQ(q.content, "Hi thereuser");
    EXPECT_EQ(parse(ChatSyntax::kDsml, "Done<｜end▁of▁sentence｜><｜User｜>", bytewise).content,
              "Done");
  }
}

TEST(ChatOutput, HarmonyChannels) {
  const std::string text =
      "<|channel|>analysis<|message|>Need "
      "weather.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.";
  for (bool bytewise : {false, true}) {
    ChatOutput out = parse(ChatSyntax::kHarmony, text, bytewise);
    EXPECT_EQ(out.reasoning, "Need weather.");
    EXPECT_EQ(out.content, "It is sunny.");
  }
}

TEST(ChatOutput, BrokenCallIsContentNotDropped) {
  ChatOutput out = parse(ChatSyntax::kHermes, "Try <tool_call>{not json}</tool_call> again", false);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "Try <tool_call>{not json}</tool_call> again");
  // Without tools in the request the markers are plain text.
  ChatOutputParser p(ChatSyntax::kHermes, {});
  ChatOutput plain;
  plain.add(p.push("<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>"));
  plain.add(p.finish());
  EXPECT_EQ(plain.content, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>");
}

TEST(ChatOutput, CallWithoutClosingMarkerAtEndOfGeneration) {
  ChatOutput out = parse(ChatSyntax::kHermes,
                         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", true);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "f");
  EXPECT_EQ(out.tool_calls[0].text, R"({"x":1})");
}

}  // namespace
