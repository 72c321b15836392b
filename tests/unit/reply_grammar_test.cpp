// Chat reply grammars read back by the chat output parser: random texts of each family's forced
// tool-call grammar (Hermes/Qwen, DeepSeek V3.1, Kimi K2, gpt-oss harmony) and of the JSON reply
// grammar must parse into the tool call, with the tool's name and arguments of its schema, or
// into the JSON content; families whose calls have no JSON form are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "grammar/token_grammar.h"
#include "sluice/chat_output.h"

using namespace sluice;
using json = nlohmann::json;

namespace {

const json kTools = json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
     "city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},
     "required":["city","days"],"additionalProperties":false}}},
  {"type":"function","function":{"name":"stop","parameters":{"type":"object","properties":{},"additionalProperties":false}}}])");

// A random text of the grammar: bytes drawn uniformly among those that continue it, ending at
// the first place it may end once `min_bytes` are written (or where nothing can follow).
std::string random_text(const std::string& gbnf, uint64_t seed, size_t min_bytes = 0) {
  const grammar::Automaton a(grammar::parse_gbnf(gbnf));
  grammar::MatchState s = grammar::start_state(a);
  std::mt19937_64 rng(seed);
  std::string text;
  for (;;) {
    std::vector<uint8_t> next;
    for (const grammar::Stack& st : s.stacks)
      for (uint8_t b : a.bytes_from(st.back())) next.push_back(b);
    if (next.empty() || (s.can_end && text.size() >= min_bytes && rng() % 4 == 0)) break;
    const char b = static_cast<char>(next[rng() % next.size()]);
    text += b;
    s = grammar::advance(a, s, std::string(1, b));
    if (text.size() > 4000) break;
  }
  EXPECT_TRUE(s.can_end) << text;
  return text;
}

std::vector<ChatDelta> parse(ChatSyntax syntax, const std::string& text) {
  ChatOutputParser p(syntax, {.tools = true});
  std::vector<ChatDelta> out = p.push(text);
  for (ChatDelta& d : p.finish()) out.push_back(std::move(d));
  return out;
}

}  // namespace

TEST(ReplyGrammar, ForcedToolCallsParseBackInEverySyntax) {
  for (ChatSyntax syntax :
       {ChatSyntax::kHermes, ChatSyntax::kDeepSeek, ChatSyntax::kKimi, ChatSyntax::kHarmony}) {
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      const bool named = seed % 3 == 0;
      const std::string gbnf = tool_call_grammar(syntax, kTools.dump(), named ? "get_weather" : "",
                                                 seed % 2 == 0, false);
      const std::string text = random_text(gbnf, seed);
      const std::vector<ChatDelta> deltas = parse(syntax, text);
      ASSERT_FALSE(deltas.empty()) << chat_syntax_name(syntax) << ": " << text;
      for (const ChatDelta& d : deltas) {
        ASSERT_EQ(d.kind, ChatDelta::Kind::kToolCall) << chat_syntax_name(syntax) << ": " << text;
        const json args = json::parse(d.text);
        if (named) {
          EXPECT_EQ(d.name, "get_weather");
        }
        if (d.name == "get_weather") {
          EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 8 * 3)
              << d.text;
          EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7)
              << d.text;
        } else {
          EXPECT_EQ(d.name, "stop");
          EXPECT_EQ(args, json::object());
        }
      }
      if (seed % 2 == 1 || syntax == ChatSyntax::kHarmony) {
        EXPECT_EQ(deltas.size(), 1u) << text;  // one call without parallel_tool_calls
      }
    }
  }
}

TEST(ReplyGrammar, JsonRepliesAreTheContent) {
  const std::string schema =
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"]})";
  for (ChatSyntax syntax : {ChatSyntax::kPlain, ChatSyntax::kHermes, ChatSyntax::kHarmony}) {
    for (bool reasoning : {false, true}) {
      if (reasoning && syntax == ChatSyntax::kHarmony) continue;
      const std::string text = random_text(json_reply_grammar(syntax, schema, reasoning), 5);
      ChatOutputParser p(syntax, {.tools = false, .starts_in_reasoning = reasoning});
      ChatOutput out;
      out.add(p.push(text));
      out.add(p.finish());
      const json j = json::parse(out.content, nullptr, false);
      ASSERT_TRUE(j.is_object()) << chat_syntax_name(syntax) << ": " << text << " -> "
                                 << out.content;
      EXPECT_TRUE(j["n"].is_number_integer());
      EXPECT_TRUE(out.tool_calls.empty());
    }
  }
}

TEST(ReplyGrammar, SyntaxesWithoutJsonCallsAreRefused) {
  for (ChatSyntax syntax : {ChatSyntax::kPlain, ChatSyntax::kGlm, ChatSyntax::kDsml}) {
    try {
      tool_call_grammar(syntax, kTools.dump(), "", false, false);
      ADD_FAILURE() << chat_syntax_name(syntax);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(chat_syntax_name(syntax)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(tool_call_grammar(ChatSyntax::kHermes, kTools.dump(), "missing", false, false),
               Error);
  EXPECT_THROW(tool_call_grammar(ChatSyntax::kHermes, "[]", "", false, false), Error);
}
