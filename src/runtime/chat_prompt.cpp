// Chat prompt tokens for servers (see sluice/serving.h): the model's own Jinja chat template when
// it has one, else a plain-text fallback. The fallback exists for base models such as the shipped
// tiny model, whose vocabulary has no turn markers: "User: ..." / "Assistant: ..." lines read as
// ordinary text (the format `sluice chat` uses too; the server adds "\nUser:" as a stop string).
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "runtime/engine_impl.h"
#include "sluice/serving.h"

namespace sluice {

namespace {

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

std::string fallback_prompt(const nlohmann::ordered_json& messages) {
  std::string out;
  for (const auto& m : messages) {
    const std::string role = m.value("role", "user");
    const std::string content = content_text(m.value("content", nlohmann::ordered_json()));
    if (role == "system") out += content + "\n\n";
    else if (role == "assistant") out += "Assistant: " + content + "\n";
    else out += "User: " + content + "\n";
  }
  return out + "Assistant:";
}

}  // namespace

std::vector<int32_t> chat_prompt_tokens(Engine& engine, std::string_view messages_json, std::string_view tools_json,
                                        std::string* rendered) {
  Engine::Impl& e = engine.impl();
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(messages_json, nullptr, false);
  if (!messages.is_array()) fail("messages must be a JSON array");
  const std::string& source = e.info.chat_template;
  std::string text;
  if (source.empty()) {
    text = fallback_prompt(messages);
    if (rendered) *rendered = text;
    return e.tokenizer->encode(text, true, false);
  }
  chat::ChatRequest req;
  req.messages = std::move(messages);
  if (!tools_json.empty()) {
    req.tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
    if (req.tools.is_discarded()) fail("tools must be valid JSON");
  }
  const Tokenizer& tk = *e.tokenizer;
  if (tk.bos() >= 0) req.bos_token = tk.token_text(tk.bos());
  if (tk.eos() >= 0) req.eos_token = tk.token_text(tk.eos());
  try {
    text = chat::render_chat(source, req);
  } catch (const std::exception& ex) {
    fail("the model's chat template failed: {}", ex.what());
  }
  if (rendered) *rendered = text;
  // Templates that write bos_token themselves would otherwise get a second BOS from add_special.
  std::vector<int32_t> tokens = tk.encode(text, true, true);
  if (tokens.size() >= 2 && tk.bos() >= 0 && tokens[0] == tk.bos() && tokens[1] == tk.bos()) tokens.erase(tokens.begin());
  return tokens;
}

}  // namespace sluice
