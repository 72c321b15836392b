// Chat prompt rendering: turns an OpenAI-style conversation into the prompt text a model expects,
// by running the model's own Jinja chat template (`tokenizer.chat_template`). Output matches
// @huggingface/jinja byte for byte, so prompts are identical to what Hugging Face's JS stack builds.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chat/jinja.h"

namespace sluice::chat {

struct ChatRequest {
  // [{role, content, tool_calls?, reasoning_content?, ...}], passed to the template as `messages`.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Tool definitions as `tools`; null leaves `tools` undefined (templates test `tools is defined`).
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // Further template variables such as enable_thinking or reasoning_effort; these override the
  // fields above if they share a name.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// The template variables a request becomes.
nlohmann::ordered_json chat_context(const ChatRequest& request);

// A parsed chat template, reusable across requests.
class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source) : template_(source) {}
  std::string render(const ChatRequest& request, const jinja::RenderOptions& options = {}) const {
    return template_.render(chat_context(request), options);
  }

 private:
  jinja::Template template_;
};

// One-shot convenience: parse and render.
std::string render_chat(const std::string& template_source, const ChatRequest& request,
                        const jinja::RenderOptions& options = {});

}  // namespace sluice::chat
