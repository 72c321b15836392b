// sluice public API: reading a chat model's generated text back into its parts. Templates that
// define a tool-call syntax (Qwen3 <tool_call>, DeepSeek V3.1 tool tokens, DeepSeek V3.2/V4 DSML,
// GLM 4.5 <arg_key>/<arg_value>, gpt-oss harmony, Kimi K2 sections) and a reasoning syntax
// (<think>…</think>, harmony's analysis channel) make the model write calls and reasoning inline;
// the server hands them to clients as tool_calls / tool_use and reasoning_content / thinking.
//
//   sluice::ChatOutputParser p(sluice::chat_syntax(info.chat_template), {.tools = true});
//   for (auto& d : p.push(text)) ...;  for (auto& d : p.finish()) ...;
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

enum class ChatSyntax {
  kPlain,     // no tool-call syntax; <think> blocks are still recognised
  kHermes,    // Qwen3 / Qwen2.5: <tool_call>{"name":…,"arguments":{…}}</tool_call>
  kDeepSeek,  // DeepSeek V3 / V3.1:
              // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>…
  kDsml,  // DeepSeek V4: <｜DSML｜tool_calls><｜DSML｜invoke name="…"><｜DSML｜parameter …>
  kDsmlFunctions,  // DeepSeek V3.2: the same inside <｜DSML｜function_calls>
  kGlm,  // GLM 4.5 / 4.6: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
  kHarmony,  // gpt-oss: <|channel|>analysis|final|commentary to=functions.NAME … <|message|>…
  kKimi,     // Kimi K2:
          // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>ARGS…
};

// The syntax a chat template (tokenizer.chat_template text) teaches its model; kPlain when none.
ChatSyntax chat_syntax(std::string_view chat_template);
const char* chat_syntax_name(ChatSyntax syntax);

struct ChatDelta {
  enum class Kind { kContent, kReasoning, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;      // kContent / kReasoning: new text; kToolCall: the arguments, a JSON object
  std::string id, name;  // kToolCall: call id (unique within the response) and function name
  int index = 0;         // kToolCall: position among this response's calls
};

struct ChatOutputOptions {
  bool tools = false;                // parse tool calls (the request offered tools)
  bool starts_in_reasoning = false;  // the prompt ended inside an open <think> block
};

// Incremental: push() generated text as it arrives, then finish(). Text that might be the start
// of a marker is held back until it is decided, so no marker reaches content or reasoning (nor
// the family's turn markers, such as <|im_start|>, should a model write one); a
// tool call is reported once it is complete (its arguments in one delta). A call that does not
// parse is returned as content, marker text included, rather than dropped.
class ChatOutputParser {
 public:
  ChatOutputParser(ChatSyntax syntax, const ChatOutputOptions& options);
  std::vector<ChatDelta> push(std::string_view text);
  std::vector<ChatDelta> finish();
  int n_tool_calls() const { return n_calls_; }

 private:
  void step(std::vector<ChatDelta>& out, bool final);
  bool step_harmony(std::vector<ChatDelta>& out, bool final);
  void emit(std::vector<ChatDelta>& out, ChatDelta::Kind kind, std::string_view text);
  bool calls(std::vector<ChatDelta>& out, std::string_view block, std::string_view raw);

  ChatSyntax syntax_;
  ChatOutputOptions options_;
  std::string buf_;
  enum class State { kStart, kText, kReasoning, kToolBlock, kHarmonyHeader, kHarmonyBody } state_;
  bool at_start_ = true;  // nothing but whitespace generated yet (a <think> may open)
  bool reasoning_started_ = false;
  std::string held_space_;       // whitespace before a tool block
  std::string harmony_channel_;  // kHarmonyBody: "analysis", "final", or "tool:NAME"
  int n_calls_ = 0;
  std::string id_prefix_;
};

// Grammars (GBNF, for GenerateOptions::grammar) of constrained replies, written the way `syntax`
// expects so that ChatOutputParser reads them back. `starts_in_reasoning`: the prompt opened a
// <think> block, which the reply closes first. Both throw sluice::Error naming what they cannot
// express.
// A reply whose content is JSON valid under `schema_json` (a JSON Schema; harmony: in the final
// channel).
std::string json_reply_grammar(ChatSyntax syntax, std::string_view schema_json, bool starts_in_reasoning);
// A reply that is only tool calls: each names one of the tools (an OpenAI `tools` array as JSON;
// `name` non-empty: that tool only) with arguments valid under its `parameters` schema; one call,
// or with `parallel` one or more. Hermes (Qwen), DeepSeek V3.1, Kimi K2 and harmony (gpt-oss, one
// call per message) syntaxes; the others write arguments as text this cannot constrain.
std::string tool_call_grammar(ChatSyntax syntax, std::string_view tools_json, std::string_view name, bool parallel,
                              bool starts_in_reasoning);

// Merges deltas into whole parts (non-streaming responses).
struct ChatOutput {
  std::string content, reasoning;
  std::vector<ChatDelta> tool_calls;
  void add(const std::vector<ChatDelta>& deltas);
};

}  // namespace sluice
