// Chat prompt rendering (see chat_template.h): builds the template context from a request.
#include "chat/chat_template.h"

#include "core/error.h"

namespace sluice::chat {

nlohmann::ordered_json chat_context(const ChatRequest& request) {
  if (!request.messages.is_array()) fail("chat request: messages must be a JSON array");
  if (!request.tools.is_null() && !request.tools.is_array()) fail("chat request: tools must be a JSON array or null");
  if (!request.extra.is_object()) fail("chat request: extra template variables must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = request.messages;
  if (!request.tools.is_null()) ctx["tools"] = request.tools;
  ctx["add_generation_prompt"] = request.add_generation_prompt;
  ctx["bos_token"] = request.bos_token;
  ctx["eos_token"] = request.eos_token;
  for (const auto& [key, value] : request.extra.items()) ctx[key] = value;
  return ctx;
}

std::string render_chat(const std::string& template_source, const ChatRequest& request,
                        const jinja::RenderOptions& options) {
  return ChatTemplate(template_source).render(request, options);
}

}  // namespace sluice::chat
