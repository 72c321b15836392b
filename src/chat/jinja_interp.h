// Internals of the Jinja evaluator shared by the interpreter (jinja_interp.cpp) and the builtin
// filters, tests and methods (jinja_builtins.cpp): scopes and the Interpreter class.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace sluice::jinja {

// One scope. Lookups walk the parent chain; assignments always go to the scope itself, as in
// the reference (so a `set` inside a loop body does not leak out of the loop).
class Env {
 public:
  explicit Env(std::shared_ptr<Env> parent = nullptr) : parent_(std::move(parent)) {}

  Value lookup(const std::string& name) const {
    for (const Env* e = this; e; e = e->parent_.get()) {
      auto it = e->vars_.find(name);
      if (it != e->vars_.end()) return it->second;
    }
    return Value::undefined();
  }
  const Value* find_local(const std::string& name) const {
    auto it = vars_.find(name);
    return it == vars_.end() ? nullptr : &it->second;
  }
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

  // Marks the scope a {% call %} block passes to its macro, whose `caller` it holds.
  bool call_block_scope = false;

 private:
  std::shared_ptr<Env> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using EnvPtr = std::shared_ptr<Env>;

class Interpreter {
 public:
  explicit Interpreter(bool extensions) : extensions(extensions) {}

  // Jinja2 features the reference lacks (see RenderOptions::strict); off in strict mode.
  const bool extensions;

  Value evaluate(const Node* n, const EnvPtr& env);
  std::string render_block(const std::vector<NodePtr>& body, const EnvPtr& env);

  // Positional arguments, then one Kwargs value when any keyword argument was given.
  std::vector<Value> call_arguments(const std::vector<NodePtr>& args, const EnvPtr& env);
  std::pair<std::vector<Value>, ObjectMap> split_arguments(const std::vector<NodePtr>& args, const EnvPtr& env);

 private:
  Value eval_node(const Node* n, const EnvPtr& env);
  Value binary(const Node* n, const EnvPtr& env);
  Value unary(const Node* n, const EnvPtr& env);
  Value member(const Node* n, const EnvPtr& env);
  Value slice(const Value& object, const Node* n, const EnvPtr& env);
  Value call(const Node* n, const EnvPtr& env);
  Value test(const Node* n, const EnvPtr& env);
  void execute_set(const Node* n, const EnvPtr& env);
  std::string render_for(const Node* n, const EnvPtr& env);
  Value define_macro(const Node* n, const EnvPtr& env);
  Value call_block(const Node* n, const EnvPtr& env);
  void bind_macro_arguments(const Node& macro, const std::vector<NodePtr>& params, std::vector<Value> args,
                            const EnvPtr& scope);

  EnvPtr closure_scope(const std::weak_ptr<Env>& scope);

  int depth_ = 0;
  // Scopes captured by macros and call blocks, which hold them weakly (see define_macro): owned
  // here for the whole render, so they are freed with the Interpreter when render() returns.
  std::vector<EnvPtr> closure_scopes_;
};

// Builtins: filters and tests (jinja_filters.cpp), methods and globals (jinja_methods.cpp).
Value apply_filter(Interpreter& interp, const Value& operand, const Node& filter, const EnvPtr& env);
bool run_test(const std::string& name, const Value& operand, const std::vector<Value>& args, bool extensions);
// Methods and properties of strings, arrays and objects (`s.strip`, `d.items`, `a.length`);
// Undefined when there is none.
Value builtin_member(const Value& object, const std::string& name, bool extensions);
void setup_globals(Env& env, const RenderOptions& options);
// Jinja's getattr path for map/sort attribute="a.b.0".
Value attribute_path(const Value& item, const std::string& path);

// Helpers shared by the builtins (jinja_filters.cpp).
size_t utf16_length(std::string_view s);  // JS string length
std::string title_case(std::string s);    // the reference's title(): ASCII word starts upper-cased
std::string capitalize(const std::string& s);
// The reference's ordering for sort/dictsort: numbers (and booleans) together, strings
// (case-insensitive unless asked), null/undefined only against themselves; anything else throws.
int compare_values(const Value& a, const Value& b, bool case_sensitive);
Array sorted(const Array& items, bool reverse, bool case_sensitive, const std::function<Value(const Value&)>& key);
Value pairs_of(const ObjectMap& m);  // [[key, value], ...]
const Value* kwarg(const ObjectMap& kw, const char* name);
// Positional argument i, else keyword argument `name`, else `fallback`.
Value arg_or(const std::vector<Value>& args, size_t i, const ObjectMap& kw, const char* name, Value fallback);

}  // namespace sluice::jinja
