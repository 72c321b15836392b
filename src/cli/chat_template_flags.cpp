// --chat-template NAME|TEXT, --chat-template-file FILE and --jinja (serve, chat): a chat template
// in place of the model file's, as llama.cpp users spell it. NAME is one of a few well-known
// formats written here (chatml, llama3); anything else must be Jinja template text. The template is
// rendered once on a sample conversation while the flags are read, so a template that does not
// parse or render is an argument error (exit 2) naming the flag, not a failure on the first
// request. --jinja is accepted and changes nothing: sluice always renders templates as Jinja.
#include <fmt/format.h>

#include <array>
#include <string_view>

#include "chat/chat_template.h"
#include "cli/options.h"

namespace sluice::cli {

namespace {

struct Named {
  std::string_view name, source;
};

// The formats' markers are the ones their model families' tokenizers define.
constexpr std::array<Named, 2> kNamed = {{
    {"chatml",
     "{%- for message in messages -%}"
     "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"},
    {"llama3",
     "{{- bos_token -}}"
     "{%- for message in messages -%}"
     "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + "
     "'<|eot_id|>' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"},
}};

std::string names() {
  std::string out;
  for (const Named& n : kNamed) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

}  // namespace

void add_chat_template_flags(CLI::App& app, ModelFlags& f) {
  auto* text = app.add_option("--chat-template", f.chat_template,
                              fmt::format("chat template instead of the model's: a name ({}) or Jinja template text", names()));
  auto* file = app.add_option("--chat-template-file", f.chat_template_file, "read the chat template (Jinja) from FILE")
                   ->check(CLI::ExistingFile);
  text->excludes(file);
  file->excludes(text);
  app.add_flag("--jinja", f.jinja, "accepted for llama.cpp users: sluice always renders chat templates as Jinja");
}

std::string chat_template_override(const ModelFlags& f) {
  std::string flag, source;
  if (!f.chat_template_file.empty()) {
    flag = "--chat-template-file";
    source = read_text(f.chat_template_file);
  } else if (!f.chat_template.empty()) {
    flag = "--chat-template";
    for (const Named& n : kNamed)
      if (f.chat_template == n.name) source = n.source;
    if (source.empty()) {
      if (f.chat_template.find("{{") == std::string::npos && f.chat_template.find("{%") == std::string::npos)
        throw CLI::ValidationError(flag, fmt::format("'{}' is neither a template name ({}) nor Jinja template text",
                                                     f.chat_template, names()));
      source = f.chat_template;
    }
  } else {
    return {};
  }
  if (source.empty()) throw CLI::ValidationError(flag, "the chat template is empty");
  chat::ChatRequest sample;
  sample.messages = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},)"
      R"({"role":"user","content":"u"}])");
  try {
    chat::render_chat(source, sample);
  } catch (const std::exception& e) {
    throw CLI::ValidationError(flag, fmt::format("the chat template does not render: {}", e.what()));
  }
  return source;
}

}  // namespace sluice::cli
