// Chat prompt tokens for the server and `sluice chat` (see sluice/serving.h): the model's own
// Jinja chat template when it has one, else a plain-text fallback. The fallback exists for base
// models such as the shipped tiny model, whose vocabulary has no turn markers: "User: ..." /
// "Assistant: ..." lines read as ordinary text, and "\nUser:" stops a reply.
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "runtime/engine_impl.h"
#include "sluice/serving.h"

namespace sluice {

namespace {

constexpr const char* kUserPrefix = "User: ";
constexpr const char* kAssistantPrefix = "Assistant:";
constexpr const char* kFallbackStop = "\nUser:";

// Text of a message's content: a string, null, or an array of {"type":"text","text":...} parts.
std::string content_text(const nlohmann::ordered_json& content) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  for (const auto& part : content)
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string())
      out += part["text"].get<std::string>();
  return out;
}

std::string fallback_prompt(const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) {
    const std::string role = m.value("role", "user");
    const std::string content = content_text(m.value("content", nlohmann::ordered_json()));
    if (role == "system") out += content + "\n\n";
    else if (role != "assistant") out += kUserPrefix + content + "\n";
    // A reply kept as generated brings its own leading space, so the next prompt starts with
    // exactly the cached tokens; trimmed text (from a client) gets the space here.
    else if (!content.empty() && (content[0] == ' ' || content[0] == '\n')) out += kAssistantPrefix + content + "\n";
    else out += std::string(kAssistantPrefix) + " " + content + "\n";
  }
  return add_generation_prompt ? out + kAssistantPrefix : out;
}

}  // namespace

std::vector<int32_t> chat_prompt_tokens(Engine& engine, std::string_view messages_json, std::string_view tools_json,
                                        std::string* rendered, const ChatPromptOptions& options) {
  Engine::Impl& e = engine_impl(engine);
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(messages_json, nullptr, false);
  if (!messages.is_array()) fail("messages must be a JSON array");
  const std::string& source = e.info.chat_template;
  const Tokenizer& tk = *e.tokenizer;
  std::string text;
  if (source.empty()) {
    text = fallback_prompt(messages, options.add_generation_prompt);
    if (rendered) *rendered = text;
    return tk.encode(text, true, false);
  }
  chat::ChatRequest req;
  req.messages = std::move(messages);
  req.add_generation_prompt = options.add_generation_prompt;
  if (!tools_json.empty()) {
    req.tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
    if (req.tools.is_discarded()) fail("tools must be valid JSON");
  }
  req.bos_token = e.info.bos_token;
  req.eos_token = e.info.eos_token;
  if (options.enable_thinking) req.extra["enable_thinking"] = *options.enable_thinking;
  if (!options.reasoning_effort.empty()) req.extra["reasoning_effort"] = options.reasoning_effort;
  try {
    text = chat::render_chat(source, req);
  } catch (const std::exception& ex) {
    fail("the model's chat template failed: {}", ex.what());
  }
  if (rendered) *rendered = text;
  // A template that writes bos_token itself must not get a second BOS from the tokenizer.
  const std::string& bos = e.info.bos_token;
  const bool template_wrote_bos = !bos.empty() && text.starts_with(bos);
  return tk.encode(text, !template_wrote_bos, true);
}

std::vector<std::string> chat_stop_strings(const Engine& engine) {
  if (engine.info().chat_template.empty()) return {kFallbackStop};
  return {};
}

}  // namespace sluice
