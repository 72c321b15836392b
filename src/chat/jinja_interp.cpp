// Jinja evaluator: walks the syntax tree with @huggingface/jinja's semantics (operator rules,
// scoping, loop variables, macros and call blocks). Builtin filters, tests and methods live in
// jinja_builtins.cpp.
#include "chat/jinja_interp.h"

#include <fmt/format.h>

#include <cmath>

#include "chat/jinja_error.h"
#include "core/error.h"

namespace sluice::jinja {

namespace {

struct BreakSignal {};
struct ContinueSignal {};

// Macro recursion beyond this is a template bug; stop before the native stack does.
constexpr int kMaxDepth = 256;

[[noreturn]] void located(const RuntimeFail& e, const Node* n) {
  if (dynamic_cast<const RaisedByTemplate*>(&e))
    fail("chat template raised an exception (line {}, column {}): {}", n->line, n->col, e.what());
  fail("chat template line {}, column {}: {}", n->line, n->col, e.what());
}

template <typename T>
std::vector<T> js_slice(const std::vector<T>& arr, const Value& start_v, const Value& stop_v, const Value& step_v) {
  double n = static_cast<double>(arr.size());
  double step = step_v.is_undefined() ? 1 : step_v.num;
  double dir = step > 0 ? 1 : step < 0 ? -1 : 0;
  double start, stop;
  if (dir >= 0) {
    start = start_v.is_undefined() ? 0 : start_v.num;
    start = start < 0 ? std::max(n + start, 0.0) : std::min(start, n);
    stop = stop_v.is_undefined() ? n : stop_v.num;
    stop = stop < 0 ? std::max(n + stop, 0.0) : std::min(stop, n);
  } else {
    start = start_v.is_undefined() ? n - 1 : start_v.num;
    start = start < 0 ? std::max(n + start, -1.0) : std::min(start, n - 1);
    stop = stop_v.is_undefined() ? -1 : stop_v.num;
    stop = stop < -1 ? std::max(n + stop, -1.0) : std::min(stop, n - 1);
  }
  std::vector<T> out;
  for (double i = start; dir * i < dir * stop; i += step) out.push_back(arr[static_cast<size_t>(i)]);
  return out;
}

Value loop_object(size_t i, const std::vector<Value>& items) {
  ObjectMap m;
  double len = static_cast<double>(items.size()), idx = static_cast<double>(i);
  m.set("index", Value::integer(idx + 1));
  m.set("index0", Value::integer(idx));
  m.set("revindex", Value::integer(len - idx));
  m.set("revindex0", Value::integer(len - idx - 1));
  m.set("first", Value::boolean(i == 0));
  m.set("last", Value::boolean(i + 1 == items.size()));
  m.set("length", Value::integer(len));
  m.set("previtem", i > 0 ? items[i - 1] : Value::undefined());
  m.set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined());
  return Value::object(std::move(m));
}

void bind_loop_variable(const Node* var, const Value& item, Env& scope) {
  if (var->type == NodeType::Identifier) {
    scope.set(var->str, item);
    return;
  }
  for (size_t j = 0; j < var->list.size(); ++j) {
    if (var->list[j]->type != NodeType::Identifier) throw RuntimeFail("Cannot unpack non-identifier type");
    scope.set(var->list[j]->str, (*item.arr)[j]);
  }
}

}  // namespace

Value Interpreter::evaluate(const Node* n, const EnvPtr& env) {
  if (!n) return Value::undefined();
  try {
    return eval_node(n, env);
  } catch (const RuntimeFail& e) {
    located(e, n);
  }
}

std::string Interpreter::render_block(const std::vector<NodePtr>& body, const EnvPtr& env) {
  std::string out;
  for (const auto& stmt : body) {
    try {
      switch (stmt->type) {
        case NodeType::Text: out += stmt->str; break;
        case NodeType::If: {
          bool cond = truthy(evaluate(stmt->a.get(), env));
          out += render_block(cond ? stmt->body : stmt->alt, env);
          break;
        }
        case NodeType::For: out += render_for(stmt.get(), env); break;
        case NodeType::Set: execute_set(stmt.get(), env); break;
        case NodeType::Comment: break;
        default: {
          Value v = evaluate(stmt.get(), env);
          if (!v.is_null() && !v.is_undefined()) out += to_output(v);
        }
      }
    } catch (const RuntimeFail& e) {
      located(e, stmt.get());
    }
  }
  return out;
}

std::vector<Value> Interpreter::call_arguments(const std::vector<NodePtr>& args, const EnvPtr& env) {
  for (const auto& a : args) {
    if (a->type == NodeType::KeywordArgument || a->type == NodeType::Spread || a->type == NodeType::KeywordSpread) {
      auto [pos, kw] = split_arguments(args, env);
      if (kw.size() > 0) pos.push_back(Value::object(std::move(kw), Kind::Kwargs));
      return pos;
    }
  }
  std::vector<Value> out;
  out.reserve(args.size());
  for (const auto& a : args) out.push_back(evaluate(a.get(), env));
  return out;
}

std::pair<std::vector<Value>, ObjectMap> Interpreter::split_arguments(const std::vector<NodePtr>& args,
                                                                      const EnvPtr& env) {
  std::vector<Value> pos;
  ObjectMap kw;
  auto add_kw = [&](const std::string& k, Value v) {
    if (kw.find(k)) throw RuntimeFail(fmt::format("Got multiple values for keyword argument '{}'", k));
    kw.set(k, std::move(v));
  };
  for (const auto& a : args) {
    if (a->type == NodeType::Spread) {
      Value v = evaluate(a->a.get(), env);
      if (!v.is_array()) throw RuntimeFail(fmt::format("Cannot unpack non-iterable type: {}", type_name(v)));
      for (const auto& x : *v.arr) pos.push_back(x);
    } else if (a->type != NodeType::KeywordArgument && a->type != NodeType::KeywordSpread) {
      pos.push_back(evaluate(a.get(), env));
    }
  }
  for (const auto& a : args) {
    if (a->type == NodeType::KeywordArgument) {
      add_kw(a->str, evaluate(a->a.get(), env));
    } else if (a->type == NodeType::KeywordSpread) {
      Value v = evaluate(a->a.get(), env);
      if (!v.is_object()) throw RuntimeFail(fmt::format("Argument after ** must be a mapping, not {}", type_name(v)));
      for (const auto& [k, x] : *v.obj) add_kw(k, x);
    }
  }
  return {std::move(pos), std::move(kw)};
}

Value Interpreter::eval_node(const Node* n, const EnvPtr& env) {
  switch (n->type) {
    case NodeType::Identifier: return env->lookup(n->str);
    case NodeType::IntegerLiteral: return Value::integer(n->num);
    case NodeType::FloatLiteral: return Value::floating(n->num);
    case NodeType::StringLiteral:
    case NodeType::Text: return Value::string(n->str);
    case NodeType::Binary: return binary(n, env);
    case NodeType::Member: return member(n, env);
    case NodeType::Call: return call(n, env);
    case NodeType::Filter: return apply_filter(*this, evaluate(n->a.get(), env), *n->b, env);
    case NodeType::Test: return test(n, env);
    case NodeType::Ternary:
      return truthy(evaluate(n->a.get(), env)) ? evaluate(n->b.get(), env) : evaluate(n->c.get(), env);
    case NodeType::Select:
      return truthy(evaluate(n->b.get(), env)) ? evaluate(n->a.get(), env) : Value::undefined();
    case NodeType::Unary: return unary(n, env);
    case NodeType::ArrayLiteral:
    case NodeType::TupleLiteral: {
      Array items;
      for (const auto& x : n->list) items.push_back(evaluate(x.get(), env));
      return Value::array(std::move(items), n->type == NodeType::TupleLiteral ? Kind::Tuple : Kind::Array);
    }
    case NodeType::ObjectLiteral: {
      ObjectMap m;
      for (const auto& [k, v] : n->pairs) {
        Value key = evaluate(k.get(), env);
        if (!key.is_string()) throw RuntimeFail(fmt::format("Object keys must be strings: got {}", type_name(key)));
        m.set(key.str, evaluate(v.get(), env));
      }
      return Value::object(std::move(m));
    }
    case NodeType::If: {
      bool cond = truthy(evaluate(n->a.get(), env));
      return Value::string(render_block(cond ? n->body : n->alt, env));
    }
    case NodeType::For: return Value::string(render_for(n, env));
    case NodeType::Set: execute_set(n, env); return Value::null();
    case NodeType::Macro: return define_macro(n, env);
    case NodeType::CallBlock: return call_block(n, env);
    case NodeType::FilterBlock: return apply_filter(*this, Value::string(render_block(n->body, env)), *n->a, env);
    case NodeType::Comment: return Value::null();
    case NodeType::Break: throw BreakSignal{};
    case NodeType::Continue: throw ContinueSignal{};
    case NodeType::Program: return Value::string(render_block(n->body, env));
    default: throw RuntimeFail("Unexpected syntax in this position");
  }
}

Value Interpreter::binary(const Node* n, const EnvPtr& env) {
  const std::string& op = n->str;
  Value left = evaluate(n->a.get(), env);
  if (op == "and") return truthy(left) ? evaluate(n->b.get(), env) : left;
  if (op == "or") return truthy(left) ? left : evaluate(n->b.get(), env);
  Value right = evaluate(n->b.get(), env);
  if (op == "==") return Value::boolean(loose_equal(left, right));
  if (op == "!=") return Value::boolean(!loose_equal(left, right));

  auto numeric_like = [](const Value& v) { return v.is_number() || v.kind == Kind::Bool; };
  auto num_of = [](const Value& v) { return v.kind == Kind::Bool ? (v.b ? 1.0 : 0.0) : v.num; };
  if (left.is_number() && right.is_number() && op != "~" && op != "**") {
    double a = left.num, b = right.num;
    bool is_float = left.kind == Kind::Float || right.kind == Kind::Float;
    auto num = [&](double r) { return is_float ? Value::floating(r) : Value::integer(r); };
    if (op == "+") return num(a + b);
    if (op == "-") return num(a - b);
    if (op == "*") return num(a * b);
    if (op == "/") return Value::floating(a / b);
    if (op == "//") return num(std::floor(a / b));
    if (op == "%") return num(std::fmod(a, b));
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == ">=") return Value::boolean(a >= b);
    if (op == "<=") return Value::boolean(a <= b);
  } else if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
    if (op == "~" && !left.is_null() && !right.is_null())
      return Value::string((left.is_undefined() ? "" : raw_js_string(left)) +
                           (right.is_undefined() ? "" : raw_js_string(right)));
    throw RuntimeFail(fmt::format("Cannot perform operation {} on undefined values", op));
  } else if (left.is_null() || right.is_null()) {
    throw RuntimeFail("Cannot perform operation on null values");
  } else if (op == "~") {
    return Value::string(raw_js_string(left) + raw_js_string(right));
  } else if (op == "**" && numeric_like(left) && numeric_like(right)) {
    double a = num_of(left), b = num_of(right);
    if (a == 0 && b < 0) throw RuntimeFail("0.0 cannot be raised to a negative power");
    double r = std::pow(a, b);
    if (!std::isfinite(r)) throw RuntimeFail("Exponentiation result is not a finite real number");
    bool is_float = left.kind == Kind::Float || right.kind == Kind::Float || b < 0;
    return is_float ? Value::floating(r) : Value::integer(r);
  } else if (left.is_array() && right.is_array()) {
    if (op == "+") {
      Array items = *left.arr;
      items.insert(items.end(), right.arr->begin(), right.arr->end());
      return Value::array(std::move(items));
    }
  } else if (right.is_array()) {
    bool found = false;
    for (const auto& x : *right.arr) found = found || strict_equal(x, left);
    if (op == "in") return Value::boolean(found);
    if (op == "not in") return Value::boolean(!found);
  }
  if ((left.is_string() || right.is_string()) && op == "+")
    return Value::string(raw_js_string(left) + raw_js_string(right));
  if (left.is_string() && right.is_string() && (op == "in" || op == "not in"))
    return Value::boolean((right.str.find(left.str) != std::string::npos) == (op == "in"));
  if (left.is_string() && right.is_object() && (op == "in" || op == "not in"))
    return Value::boolean((right.obj->find(left.str) != nullptr) == (op == "in"));
  throw RuntimeFail(fmt::format("Unknown operator \"{}\" between {} and {}", op, type_name(left), type_name(right)));
}

Value Interpreter::unary(const Node* n, const EnvPtr& env) {
  Value v = evaluate(n->a.get(), env);
  if (n->str == "not") return Value::boolean(!truthy(v));
  double sign = n->str == "-" ? -1 : 1;
  if (v.is_number()) return v.kind == Kind::Float ? Value::floating(sign * v.num) : Value::integer(sign * v.num);
  if (v.kind == Kind::Bool) return Value::integer(sign * (v.b ? 1 : 0));
  throw RuntimeFail(fmt::format("Unknown operator \"{}\" for {}", n->str, type_name(v)));
}

Value Interpreter::slice(const Value& object, const Node* n, const EnvPtr& env) {
  if (!object.is_array() && !object.is_string()) throw RuntimeFail("Slice object must be an array or string");
  Value start = evaluate(n->a.get(), env), stop = evaluate(n->b.get(), env), step = evaluate(n->c.get(), env);
  for (const auto* v : {&start, &stop, &step})
    if (v->kind != Kind::Int && !v->is_undefined()) throw RuntimeFail("Slice arguments must be integers or undefined");
  if (object.is_array()) return Value::array(js_slice(*object.arr, start, stop, step));
  std::string out;
  for (const auto& cp : js_slice(code_points(object.str), start, stop, step)) out += cp;
  return Value::string(std::move(out));
}

Value Interpreter::member(const Node* n, const EnvPtr& env) {
  Value object = evaluate(n->a.get(), env);
  Value prop;
  if (n->flag) {
    if (n->b->type == NodeType::Slice) return slice(object, n->b.get(), env);
    prop = evaluate(n->b.get(), env);
  } else if (n->b->type == NodeType::IntegerLiteral) {
    prop = Value::integer(n->b->num);
  } else {
    prop = Value::string(n->b->str);
  }
  if (object.is_attr_container()) {
    if (!prop.is_string()) throw RuntimeFail(fmt::format("Cannot access property with non-string: got {}", type_name(prop)));
    if (const Value* v = object.obj->find(prop.str)) return *v;
    return object.is_object() ? builtin_member(object, prop.str, extensions) : Value::undefined();
  }
  if (object.is_array() || object.is_string()) {
    if (prop.kind == Kind::Int) {
      if (object.is_array()) {
        double len = static_cast<double>(object.arr->size());
        double i = prop.num < 0 ? prop.num + len : prop.num;
        return i >= 0 && i < len ? (*object.arr)[static_cast<size_t>(i)] : Value::undefined();
      }
      // String indexing is by UTF-16 code unit in the reference.
      std::u16string u = to_utf16(object.str);
      double len = static_cast<double>(u.size());
      double i = prop.num < 0 ? prop.num + len : prop.num;
      if (i < 0 || i >= len) return Value::undefined();
      return Value::string(from_utf16(std::u16string_view(u).substr(static_cast<size_t>(i), 1)));
    }
    if (prop.is_string()) return builtin_member(object, prop.str, extensions);
    throw RuntimeFail(fmt::format("Cannot access property with non-string/non-number: got {}", type_name(prop)));
  }
  if (!prop.is_string()) throw RuntimeFail(fmt::format("Cannot access property with non-string: got {}", type_name(prop)));
  return builtin_member(object, prop.str, extensions);
}

Value Interpreter::call(const Node* n, const EnvPtr& env) {
  std::vector<Value> args = call_arguments(n->list, env);
  Value fn = evaluate(n->a.get(), env);
  if (fn.kind != Kind::Function)
    throw RuntimeFail(fmt::format("Cannot call something that is not a function: got {}", type_name(fn)));
  return (*fn.fn)(args, *env);
}

Value Interpreter::test(const Node* n, const EnvPtr& env) {
  Value operand = evaluate(n->a.get(), env);
  std::vector<Value> args;
  for (const auto& a : n->list) args.push_back(evaluate(a.get(), env));
  bool r = run_test(n->str, operand, args, extensions);
  return Value::boolean(n->flag ? !r : r);
}

void Interpreter::execute_set(const Node* n, const EnvPtr& env) {
  Value rhs = n->b ? evaluate(n->b.get(), env) : Value::string(render_block(n->body, env));
  const Node* target = n->a.get();
  if (target->type == NodeType::Identifier) {
    env->set(target->str, std::move(rhs));
  } else if (target->type == NodeType::TupleLiteral) {
    if (!rhs.is_array()) throw RuntimeFail(fmt::format("Cannot unpack non-iterable type in set: {}", type_name(rhs)));
    if (rhs.arr->size() != target->list.size())
      throw RuntimeFail(fmt::format("Too {} items to unpack in set", target->list.size() > rhs.arr->size() ? "few" : "many"));
    for (size_t i = 0; i < target->list.size(); ++i) {
      if (target->list[i]->type != NodeType::Identifier) throw RuntimeFail("Cannot unpack to non-identifier in set");
      env->set(target->list[i]->str, (*rhs.arr)[i]);
    }
  } else if (target->type == NodeType::Member) {
    Value object = evaluate(target->a.get(), env);
    if (object.kind != Kind::Namespace) throw RuntimeFail("cannot assign attribute on non-namespace object");
    if (target->b->type != NodeType::Identifier || target->flag)
      throw RuntimeFail("Cannot assign to member with non-identifier property");
    object.obj->set(target->b->str, std::move(rhs));
  } else {
    throw RuntimeFail("Invalid left-hand side of assignment");
  }
}

std::string Interpreter::render_for(const Node* n, const EnvPtr& env) {
  auto scope = std::make_shared<Env>(env);
  const Node* cond = nullptr;
  Value iterable;
  if (n->b->type == NodeType::Select) {
    iterable = evaluate(n->b->a.get(), scope);
    cond = n->b->b.get();
  } else {
    iterable = evaluate(n->b.get(), scope);
  }
  if (!iterable.is_array() && !iterable.is_object())
    throw RuntimeFail(fmt::format("Expected iterable or object type in for loop: got {}", type_name(iterable)));
  Array candidates;
  if (iterable.is_object()) {
    for (const auto& kv : *iterable.obj) candidates.push_back(Value::string(kv.first));
  } else {
    candidates = *iterable.arr;
  }

  const Node* var = n->a.get();
  Array items;
  if (var->type == NodeType::Identifier && !cond) {
    items = std::move(candidates);
  } else {
    for (const auto& item : candidates) {
      if (var->type == NodeType::TupleLiteral) {
        if (item.kind != Kind::Array) throw RuntimeFail(fmt::format("Cannot unpack non-iterable type: {}", type_name(item)));
        size_t expected = var->list.size(), actual = item.arr->size();
        if (expected != actual) throw RuntimeFail(fmt::format("Too {} items to unpack", expected > actual ? "few" : "many"));
      }
      if (cond) {
        auto test_scope = std::make_shared<Env>(scope);
        bind_loop_variable(var, item, *test_scope);
        if (!truthy(evaluate(cond, test_scope))) continue;
      }
      items.push_back(item);
    }
  }

  std::string out;
  bool no_iteration = true;
  for (size_t i = 0; i < items.size(); ++i) {
    scope->set("loop", loop_object(i, items));
    bind_loop_variable(var, items[i], *scope);
    try {
      out += render_block(n->body, scope);
    } catch (const ContinueSignal&) {
      // The reference counts a loop whose every iteration hit `continue` as empty (runs `else`).
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) out += render_block(n->alt, scope);
  return out;
}

void Interpreter::bind_macro_arguments(const Node& macro, const std::vector<NodePtr>& params, std::vector<Value> args,
                                       const EnvPtr& scope_ptr) {
  Env& scope = *scope_ptr;
  std::string display = macro.type == NodeType::Macro ? "'" + macro.str + "'" : "None";
  ObjectMap kwargs;
  if (!args.empty() && args.back().kind == Kind::Kwargs) {
    kwargs = *args.back().obj;
    args.pop_back();
  }
  std::vector<std::pair<std::string, const Node*>> pending;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node* p = params[i].get();
    const std::string& name = p->str;
    const Node* def = p->type == NodeType::KeywordArgument ? p->a.get() : nullptr;
    bool have = i < args.size();
    Value v = have ? args[i] : Value::undefined();
    if (!have) {
      if (const Value* k = kwargs.find(name)) {
        v = *k;
        kwargs.erase(name);
        have = true;
      }
    }
    if (!have && def) pending.emplace_back(name, def);
    scope.set(name, std::move(v));
  }
  if (macro.uses_kwargs) {
    scope.set("kwargs", Value::object(kwargs));
  } else if (kwargs.size() > 0) {
    throw RuntimeFail(fmt::format("macro {} takes no keyword argument '{}'", display, kwargs.begin()->first));
  }
  if (macro.uses_varargs) {
    Array rest(args.begin() + static_cast<std::ptrdiff_t>(std::min(params.size(), args.size())), args.end());
    scope.set("varargs", Value::array(std::move(rest)));
  } else if (args.size() > params.size()) {
    throw RuntimeFail(fmt::format("macro {} takes not more than {} argument(s)", display, params.size()));
  }
  // Defaults are evaluated after every parameter is bound, in the macro's own scope, so they see
  // earlier parameters and never an outer variable of the same name.
  for (const auto& [name, def] : pending) scope.set(name, evaluate(def, scope_ptr));
}

EnvPtr Interpreter::closure_scope(const std::weak_ptr<Env>& scope) {
  EnvPtr e = scope.lock();
  // closure_scopes_ holds every captured scope until the render ends, and no value outlives it.
  if (!e) throw RuntimeFail("internal error: a macro's defining scope was freed before the render ended");
  return e;
}

Value Interpreter::define_macro(const Node* n, const EnvPtr& env) {
  // The macro is stored in the scope it captures; a strong capture would be a reference cycle
  // (scope -> macro -> scope) that is never freed. It captures a weak reference instead and the
  // render keeps the scope alive (closure_scopes_), so macros passed out of their scope through a
  // namespace or a list still work.
  if (closure_scopes_.empty() || closure_scopes_.back() != env) closure_scopes_.push_back(env);
  std::weak_ptr<Env> defining_weak = env;
  env->set(n->str, Value::function([this, n, defining_weak](std::vector<Value>& args, Env& call_site) {
    if (depth_ >= kMaxDepth) throw RuntimeFail("maximum macro recursion depth exceeded");
    EnvPtr defining = closure_scope(defining_weak);
    EnvPtr parent = defining;
    if (n->uses_caller) {
      const Value* caller = call_site.call_block_scope ? call_site.find_local("caller") : nullptr;
      parent = std::make_shared<Env>(defining);
      parent->set("caller", caller ? *caller : Value::undefined());
    }
    auto scope = std::make_shared<Env>(parent);
    bind_macro_arguments(*n, n->list, args, scope);
    ++depth_;
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    return Value::string(render_block(n->body, scope));
  }));
  return Value::null();
}

Value Interpreter::call_block(const Node* n, const EnvPtr& env) {
  // `caller` can be stored into a namespace that env reaches (`{% set ns.c = caller %}`), so it
  // captures env weakly too, for the same reason as a macro.
  if (closure_scopes_.empty() || closure_scopes_.back() != env) closure_scopes_.push_back(env);
  std::weak_ptr<Env> env_weak = env;
  Value caller = Value::function([this, n, env_weak](std::vector<Value>& args, Env&) {
    auto scope = std::make_shared<Env>(closure_scope(env_weak));
    bind_macro_arguments(*n, n->list, args, scope);
    return Value::string(render_block(n->body, scope));
  });
  const Node* c = n->a.get();
  auto [args, kwargs] = split_arguments(c->list, env);
  args.push_back(Value::object(std::move(kwargs), Kind::Kwargs));
  Value fn = evaluate(c->a.get(), env);
  if (fn.kind != Kind::Function)
    throw RuntimeFail(fmt::format("Cannot call something that is not a function: got {}", type_name(fn)));
  Env site(env);
  site.call_block_scope = true;
  site.set("caller", std::move(caller));
  return (*fn.fn)(args, site);
}

Template::Template(const std::string& source) : program_(parse(tokenize(source))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) fail("chat template context must be a JSON object");
  auto global = std::make_shared<Env>();
  setup_globals(*global, options);
  for (const auto& [key, value] : context.items()) {
    if (global->find_local(key)) fail("chat template context: variable already declared: {}", key);
    try {
      global->set(key, from_json(value));
    } catch (const RuntimeFail& e) {
      fail("chat template context: {}: {}", key, e.what());
    }
  }
  Interpreter interp(!options.strict);
  try {
    return interp.render_block(program_->body, global);
  } catch (const BreakSignal&) {
    fail("chat template: {{% break %}} outside a loop");
  } catch (const ContinueSignal&) {
    fail("chat template: {{% continue %}} outside a loop");
  }
}

}  // namespace sluice::jinja
