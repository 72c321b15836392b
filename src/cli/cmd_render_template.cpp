// `sluice render-template -t TEMPLATE.jinja -c CONTEXT.json [-o OUT]`: renders a chat template
// with a JSON context (messages, tools, add_generation_prompt, bos_token, ...), so that outside
// tools can compare sluice's prompts with other implementations.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/jinja.h"
#include "cli/commands.h"
#include "core/error.h"

namespace sluice::cli {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {}", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int cmd_render_template(int argc, char** argv) {
  CLI::App app{"Render a Jinja chat template with a JSON context", "sluice render-template"};
  std::string template_path, context_path, out_path;
  int64_t now = -1;
  bool strict = false;
  app.add_option("-t,--template", template_path, "Jinja template file")->required();
  app.add_option("-c,--context", context_path, "JSON object of template variables (default: {})");
  app.add_option("-o,--output", out_path, "write the result here instead of stdout");
  app.add_option("--now", now, "fixed clock for strftime_now, seconds since the epoch (rendered as UTC)");
  app.add_flag("--strict", strict, "only what @huggingface/jinja supports (no Jinja2 extensions)");
  SLUICE_PARSE(app, argc, argv);

  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (!context_path.empty()) {
    context = nlohmann::ordered_json::parse(read_file(context_path), nullptr, false);
    if (context.is_discarded()) fail("{}: not valid JSON", context_path);
  }
  jinja::RenderOptions options;
  options.strict = strict;
  if (now >= 0) options.now = static_cast<std::time_t>(now);
  std::string out = jinja::Template(read_file(template_path)).render(context, options);
  if (out_path.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::ofstream f(out_path, std::ios::binary);
  if (!f.write(out.data(), static_cast<std::streamsize>(out.size()))) fail("cannot write {}", out_path);
  return 0;
}

}  // namespace sluice::cli
