// A Jinja2 template engine for chat templates (`tokenizer.chat_template`), rendering
// byte-identically to @huggingface/jinja, the implementation Hugging Face uses in JavaScript.
// Construction parses once; render() is const and may be called repeatedly and concurrently.
// Every failure (syntax, unknown filter, raise_exception) is a sluice::Error naming the template
// line and column.
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>

namespace sluice::jinja {

struct Node;

struct RenderOptions {
  // Fixed clock for strftime_now(), read as UTC; unset means the current local time.
  std::optional<std::time_t> now;
  // Strict: exactly what @huggingface/jinja accepts, failing where it fails. Otherwise a few
  // Jinja2 features it lacks are added (list append/pop, select/reject, from_json, test
  // arguments, more filters); they only apply where the reference would raise, so output that
  // the reference renders is identical in both modes.
  bool strict = false;
};

class Template {
 public:
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `context` must be a JSON object; its keys become template variables. An ordered_json keeps
  // key order, which tojson and dict iteration expose.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::unique_ptr<Node> program_;
};

}  // namespace sluice::jinja
