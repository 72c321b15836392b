// Jinja parser: recursive descent with @huggingface/jinja's grammar and precedence (tests bind
// tighter than `*`, filters tighter than tests, unary signs tighter than filters, `**` is
// left-associative). Where the reference accepts a construct, so do we, with the same tree shape.
#include <algorithm>
#include <set>

#include "chat/jinja_ast.h"
#include "core/error.h"

namespace sluice::jinja {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  NodePtr program() {
    auto p = node(NodeType::Program);
    while (cur_ < t_.size()) p->body.push_back(any());
    return p;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const {
    if (cur_ < t_.size()) fail("chat template line {}, column {}: {}", t_[cur_].line, t_[cur_].col, msg);
    if (!t_.empty()) fail("chat template line {}, column {}: {} (at end of template)", t_.back().line, t_.back().col, msg);
    fail("chat template: {}", msg);
  }

  NodePtr node(NodeType type) {
    auto n = std::make_unique<Node>();
    n->type = type;
    const Token* at = cur_ < t_.size() ? &t_[cur_] : (t_.empty() ? nullptr : &t_.back());
    if (at) {
      n->line = at->line;
      n->col = at->col;
    }
    return n;
  }

  const Token& peek() const {
    if (cur_ >= t_.size()) error("Unexpected end of template");
    return t_[cur_];
  }

  bool is(Tok type, size_t ahead = 0) const { return cur_ + ahead < t_.size() && t_[cur_ + ahead].type == type; }

  bool is_ident(const char* name, size_t ahead = 0) const {
    return is(Tok::Identifier, ahead) && t_[cur_ + ahead].value == name;
  }

  bool is_statement(std::initializer_list<const char*> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Identifier, 1)) return false;
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return t_[cur_ + 1].value == n; });
  }

  const Token& expect(Tok type, const char* what) {
    if (cur_ >= t_.size()) error(fmt::format("{}, got end of template", what));
    if (t_[cur_].type != type) error(fmt::format("{}, got {} '{}'", what, tok_name(t_[cur_].type), t_[cur_].value));
    return t_[cur_++];
  }

  void expect_ident(const char* name) {
    if (!is_ident(name)) error(fmt::format("Expected '{}'", name));
    ++cur_;
  }

  // Body statements until one of the given block keywords opens the next tag.
  void block_until(std::vector<NodePtr>& body, std::initializer_list<const char*> names) {
    while (!is_statement(names)) {
      if (cur_ >= t_.size()) {
        std::string list;
        for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string("{% ") + n + " %}";
        error("Unexpected end of template, expected " + list);
      }
      body.push_back(any());
    }
  }

  void end_tag(const char* name) {
    expect(Tok::OpenStatement, "Expected '{%'");
    expect_ident(name);
    expect(Tok::CloseStatement, "Expected '%}'");
  }

  NodePtr any() {
    const Token& tok = peek();
    switch (tok.type) {
      case Tok::Comment: {
        auto n = node(NodeType::Comment);
        ++cur_;
        return n;
      }
      case Tok::Text: {
        auto n = node(NodeType::Text);
        n->str = t_[cur_++].value;
        return n;
      }
      case Tok::OpenStatement: return statement();
      case Tok::OpenExpression: {
        ++cur_;
        auto e = expression();
        expect(Tok::CloseExpression, "Expected '}}'");
        return e;
      }
      default: error(fmt::format("Unexpected token {} '{}'", tok_name(tok.type), tok.value));
    }
  }

  NodePtr statement();
  NodePtr set_statement(NodePtr n);
  NodePtr if_statement();
  NodePtr for_statement(NodePtr n);
  NodePtr sequence(bool primary_only);
  NodePtr expression();
  NodePtr logical_or();
  NodePtr logical_and();
  NodePtr logical_not();
  NodePtr comparison();
  NodePtr additive();
  NodePtr multiplicative();
  NodePtr power();
  NodePtr test_expr();
  NodePtr filter_expr();
  NodePtr unary_sign();
  NodePtr call_member();
  NodePtr call(NodePtr callee);
  NodePtr member(NodePtr object);
  NodePtr subscript();
  NodePtr primary();
  std::vector<NodePtr> args(bool parameters);
  void scan_special_args(Node& n);

  const std::vector<Token>& t_;
  size_t cur_ = 0;
};

NodePtr Parser::statement() {
  auto n = node(NodeType::Comment);
  expect(Tok::OpenStatement, "Expected '{%'");
  if (!is(Tok::Identifier)) error("Expected a statement name after '{%'");
  std::string name = t_[cur_].value;
  n->line = t_[cur_].line;
  n->col = t_[cur_].col;
  ++cur_;
  if (name == "set") return set_statement(std::move(n));
  if (name == "if") {
    auto r = if_statement();
    end_tag("endif");
    return r;
  }
  if (name == "for") {
    auto r = for_statement(std::move(n));
    end_tag("endfor");
    return r;
  }
  if (name == "macro") {
    n->type = NodeType::Macro;
    if (!is(Tok::Identifier)) error("Expected identifier following macro statement");
    n->str = t_[cur_++].value;
    n->list = args(true);
    expect(Tok::CloseStatement, "Expected '%}'");
    block_until(n->body, {"endmacro"});
    end_tag("endmacro");
    scan_special_args(*n);
    return n;
  }
  if (name == "call") {
    n->type = NodeType::CallBlock;
    if (is(Tok::OpenParen)) n->list = args(true);
    auto callee = primary();
    if (callee->type != NodeType::Identifier) error("Expected identifier following call statement");
    auto c = node(NodeType::Call);
    c->a = std::move(callee);
    c->list = args(false);
    n->a = std::move(c);
    expect(Tok::CloseStatement, "Expected '%}'");
    block_until(n->body, {"endcall"});
    end_tag("endcall");
    scan_special_args(*n);
    return n;
  }
  if (name == "break" || name == "continue") {
    n->type = name == "break" ? NodeType::Break : NodeType::Continue;
    expect(Tok::CloseStatement, "Expected '%}'");
    return n;
  }
  if (name == "filter") {
    n->type = NodeType::FilterBlock;
    auto f = primary();
    if (f->type == NodeType::Identifier && is(Tok::OpenParen)) f = call(std::move(f));
    n->a = std::move(f);
    expect(Tok::CloseStatement, "Expected '%}'");
    block_until(n->body, {"endfilter"});
    end_tag("endfilter");
    return n;
  }
  --cur_;
  error(fmt::format("Unknown statement type: {}", name));
}

NodePtr Parser::set_statement(NodePtr n) {
  n->type = NodeType::Set;
  n->a = sequence(false);
  if (is(Tok::Equals)) {
    ++cur_;
    n->b = sequence(false);
  } else {
    expect(Tok::CloseStatement, "Expected '%}' or '='");
    block_until(n->body, {"endset"});
    expect(Tok::OpenStatement, "Expected '{%'");
    expect_ident("endset");
  }
  expect(Tok::CloseStatement, "Expected '%}'");
  return n;
}

NodePtr Parser::if_statement() {
  auto n = node(NodeType::If);
  n->a = expression();
  expect(Tok::CloseStatement, "Expected '%}'");
  block_until(n->body, {"elif", "else", "endif"});
  if (is_statement({"elif"})) {
    cur_ += 2;
    n->alt.push_back(if_statement());
  } else if (is_statement({"else"})) {
    cur_ += 2;
    expect(Tok::CloseStatement, "Expected '%}'");
    block_until(n->alt, {"endif"});
  }
  return n;
}

NodePtr Parser::for_statement(NodePtr n) {
  n->type = NodeType::For;
  n->a = sequence(true);
  if (n->a->type != NodeType::Identifier && n->a->type != NodeType::TupleLiteral)
    error("Expected identifier/tuple for the loop variable");
  if (!is_ident("in")) error("Expected `in` keyword following loop variable");
  ++cur_;
  n->b = expression();
  expect(Tok::CloseStatement, "Expected '%}'");
  block_until(n->body, {"endfor", "else"});
  if (is_statement({"else"})) {
    cur_ += 2;
    expect(Tok::CloseStatement, "Expected '%}'");
    block_until(n->alt, {"endfor"});
  }
  return n;
}

NodePtr Parser::sequence(bool primary_only) {
  auto tuple = node(NodeType::TupleLiteral);
  auto first = primary_only ? primary() : expression();
  if (!is(Tok::Comma)) return first;
  tuple->list.push_back(std::move(first));
  while (is(Tok::Comma)) {
    ++cur_;
    tuple->list.push_back(primary_only ? primary() : expression());
  }
  return tuple;
}

NodePtr Parser::expression() {
  auto n = node(NodeType::Ternary);
  auto a = logical_or();
  if (!is_ident("if")) return a;
  ++cur_;
  auto test = logical_or();
  if (is_ident("else")) {
    ++cur_;
    n->a = std::move(test);
    n->b = std::move(a);
    n->c = expression();
    return n;
  }
  n->type = NodeType::Select;
  n->a = std::move(a);
  n->b = std::move(test);
  return n;
}

NodePtr Parser::logical_or() {
  auto left = logical_and();
  while (is_ident("or")) {
    auto n = node(NodeType::Binary);
    n->str = t_[cur_++].value;
    n->a = std::move(left);
    n->b = logical_and();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::logical_and() {
  auto left = logical_not();
  while (is_ident("and")) {
    auto n = node(NodeType::Binary);
    n->str = t_[cur_++].value;
    n->a = std::move(left);
    n->b = logical_not();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::logical_not() {
  if (!is_ident("not")) return comparison();
  auto n = node(NodeType::Unary);
  n->str = "not";
  ++cur_;
  n->a = logical_not();
  return n;
}

NodePtr Parser::comparison() {
  auto left = additive();
  while (true) {
    auto n = node(NodeType::Binary);
    if (is_ident("not") && is_ident("in", 1)) {
      n->str = "not in";
      cur_ += 2;
    } else if (is_ident("in") || is(Tok::ComparisonBinaryOperator)) {
      n->str = t_[cur_++].value;
    } else {
      break;
    }
    n->a = std::move(left);
    n->b = additive();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::additive() {
  auto left = multiplicative();
  while (is(Tok::AdditiveBinaryOperator)) {
    auto n = node(NodeType::Binary);
    n->str = t_[cur_++].value;
    n->a = std::move(left);
    n->b = multiplicative();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::multiplicative() {
  auto left = power();
  while (is(Tok::MultiplicativeBinaryOperator)) {
    auto n = node(NodeType::Binary);
    n->str = t_[cur_++].value;
    n->a = std::move(left);
    n->b = power();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::power() {
  auto left = test_expr();
  while (is(Tok::ExponentiationBinaryOperator)) {
    auto n = node(NodeType::Binary);
    n->str = t_[cur_++].value;
    n->a = std::move(left);
    n->b = test_expr();
    left = std::move(n);
  }
  return left;
}

NodePtr Parser::test_expr() {
  auto operand = filter_expr();
  while (is_ident("is")) {
    auto n = node(NodeType::Test);
    ++cur_;
    if (is_ident("not")) {
      n->flag = true;
      ++cur_;
    }
    if (!is(Tok::Identifier)) error("Expected identifier for the test");
    n->str = t_[cur_++].value;
    // Extension over the reference, which has no test arguments: `is divisibleby(3)`.
    if (is(Tok::OpenParen)) n->list = args(false);
    n->a = std::move(operand);
    operand = std::move(n);
  }
  return operand;
}

NodePtr Parser::filter_expr() {
  auto operand = unary_sign();
  while (is(Tok::Pipe)) {
    ++cur_;
    auto n = node(NodeType::Filter);  // positioned at the filter name
    auto f = primary();
    if (f->type != NodeType::Identifier) error("Expected identifier for the filter");
    if (is(Tok::OpenParen)) f = call(std::move(f));
    n->a = std::move(operand);
    n->b = std::move(f);
    operand = std::move(n);
  }
  return operand;
}

NodePtr Parser::unary_sign() {
  if ((is(Tok::UnaryOperator) || is(Tok::AdditiveBinaryOperator)) &&
      (t_[cur_].value == "-" || t_[cur_].value == "+")) {
    auto n = node(NodeType::Unary);
    n->str = t_[cur_++].value;
    n->a = unary_sign();
    return n;
  }
  return call_member();
}

NodePtr Parser::call_member() {
  auto m = member(primary());
  if (is(Tok::OpenParen)) return call(std::move(m));
  return m;
}

NodePtr Parser::call(NodePtr callee) {
  auto n = node(NodeType::Call);
  n->line = callee->line;
  n->col = callee->col;
  n->a = std::move(callee);
  n->list = args(false);
  NodePtr e = member(std::move(n));
  if (is(Tok::OpenParen)) e = call(std::move(e));
  return e;
}

std::vector<NodePtr> Parser::args(bool parameters) {
  expect(Tok::OpenParen, "Expected '('");
  std::vector<NodePtr> out;
  std::set<std::string> names;
  bool saw_keyword = false, saw_spread = false;
  while (!is(Tok::CloseParen)) {
    if (cur_ >= t_.size()) error("Expected ')'");
    bool kw_spread = is(Tok::ExponentiationBinaryOperator);
    bool spread = is(Tok::MultiplicativeBinaryOperator) && t_[cur_].value == "*";
    if (parameters && (kw_spread || spread)) error("Argument unpacking is not allowed in parameter declarations");
    if (kw_spread) {
      auto n = node(NodeType::KeywordSpread);
      ++cur_;
      n->a = expression();
      out.push_back(std::move(n));
      if (is(Tok::Comma)) ++cur_;
      if (!is(Tok::CloseParen)) error("Expected closing parenthesis: `**` must be applied to the final argument");
      break;
    }
    NodePtr arg;
    if (spread) {
      if (saw_spread) error("Only one `*` argument unpacking is allowed");
      saw_spread = true;
      arg = node(NodeType::Spread);
      ++cur_;
      arg->a = expression();
    } else {
      arg = expression();
      if (is(Tok::Equals)) {
        ++cur_;
        if (arg->type != NodeType::Identifier)
          error(parameters ? "Expected identifier for parameter declaration" : "Expected identifier for keyword argument");
        auto kw = node(NodeType::KeywordArgument);
        kw->line = arg->line;
        kw->col = arg->col;
        kw->str = arg->str;
        kw->a = expression();
        arg = std::move(kw);
      }
      if (parameters) {
        if (arg->type != NodeType::Identifier && arg->type != NodeType::KeywordArgument)
          error("Expected identifier for parameter declaration");
        if (!names.insert(arg->str).second) error(fmt::format("Duplicate parameter name: {}", arg->str));
      }
      if (arg->type == NodeType::KeywordArgument) {
        saw_keyword = true;
      } else if (saw_keyword) {
        error(parameters ? "Non-default argument follows default argument"
                         : "Positional arguments must come before keyword arguments");
      } else if (saw_spread) {
        error("Positional arguments must not follow `*` argument unpacking");
      }
    }
    out.push_back(std::move(arg));
    if (is(Tok::Comma)) ++cur_;
  }
  ++cur_;
  return out;
}

NodePtr Parser::subscript() {
  auto n = node(NodeType::Slice);
  std::vector<NodePtr> parts;
  bool is_slice = false;
  while (!is(Tok::CloseSquareBracket)) {
    if (cur_ >= t_.size()) error("Expected ']'");
    if (is(Tok::Colon)) {
      parts.push_back(nullptr);
      ++cur_;
      is_slice = true;
    } else {
      parts.push_back(expression());
      if (is(Tok::Colon)) {
        ++cur_;
        is_slice = true;
      }
    }
  }
  if (parts.empty()) error("Expected at least one argument for member/slice expression");
  if (!is_slice) return std::move(parts[0]);
  if (parts.size() > 3) error("Expected 0-3 arguments for slice expression");
  parts.resize(3);
  n->a = std::move(parts[0]);
  n->b = std::move(parts[1]);
  n->c = std::move(parts[2]);
  return n;
}

NodePtr Parser::member(NodePtr object) {
  while (is(Tok::Dot) || is(Tok::OpenSquareBracket)) {
    auto n = node(NodeType::Member);
    bool computed = t_[cur_++].type == Tok::OpenSquareBracket;
    if (computed) {
      n->b = subscript();
      expect(Tok::CloseSquareBracket, "Expected ']'");
    } else {
      n->b = primary();
      if (n->b->type != NodeType::Identifier && n->b->type != NodeType::IntegerLiteral)
        error("Expected identifier or integer following dot operator");
    }
    n->flag = computed;
    n->a = std::move(object);
    object = std::move(n);
  }
  return object;
}

NodePtr Parser::primary() {
  const Token& tok = peek();
  auto n = node(NodeType::Identifier);
  ++cur_;
  switch (tok.type) {
    case Tok::NumericLiteral:
      n->type = tok.value.find('.') != std::string::npos ? NodeType::FloatLiteral : NodeType::IntegerLiteral;
      n->num = std::stod(tok.value);
      return n;
    case Tok::StringLiteral:
      n->type = NodeType::StringLiteral;
      n->str = tok.value;
      while (is(Tok::StringLiteral)) n->str += t_[cur_++].value;
      return n;
    case Tok::Identifier:
      n->str = tok.value;
      return n;
    case Tok::OpenParen: {
      auto e = sequence(false);
      expect(Tok::CloseParen, "Expected ')'");
      return e;
    }
    case Tok::OpenSquareBracket:
      n->type = NodeType::ArrayLiteral;
      while (!is(Tok::CloseSquareBracket)) {
        if (cur_ >= t_.size()) error("Expected ']'");
        n->list.push_back(expression());
        if (is(Tok::Comma)) ++cur_;
      }
      ++cur_;
      return n;
    case Tok::OpenCurlyBracket:
      n->type = NodeType::ObjectLiteral;
      while (!is(Tok::CloseCurlyBracket)) {
        if (cur_ >= t_.size()) error("Expected '}'");
        auto key = expression();
        expect(Tok::Colon, "Expected colon between key and value in object literal");
        n->pairs.emplace_back(std::move(key), expression());
        if (is(Tok::Comma)) ++cur_;
      }
      ++cur_;
      return n;
    default:
      --cur_;
      error(fmt::format("Unexpected token {} '{}'", tok_name(tok.type), tok.value));
  }
}

// Which special names (caller, kwargs, varargs) a macro body reads decides whether extra
// keyword/positional arguments are accepted, as in Jinja. A plain scan for identifier loads is
// enough for real templates; names rebound by the body's own set/for count as loads too.
void scan_node(const Node* n, Node& owner) {
  if (!n) return;
  if (n->type == NodeType::Identifier) {
    owner.uses_caller |= n->str == "caller";
    owner.uses_kwargs |= n->str == "kwargs";
    owner.uses_varargs |= n->str == "varargs";
    return;
  }
  if (n->type == NodeType::Filter) {
    scan_node(n->a.get(), owner);
    if (n->b->type == NodeType::Call)
      for (const auto& x : n->b->list) scan_node(x.get(), owner);
    return;
  }
  if (n->type == NodeType::Member && !n->flag) {
    scan_node(n->a.get(), owner);
    return;
  }
  scan_node(n->a.get(), owner);
  scan_node(n->b.get(), owner);
  scan_node(n->c.get(), owner);
  for (const auto* v : {&n->list, &n->body, &n->alt})
    for (const auto& x : *v) scan_node(x.get(), owner);
  for (const auto& [k, v] : n->pairs) {
    scan_node(k.get(), owner);
    scan_node(v.get(), owner);
  }
}

void Parser::scan_special_args(Node& n) {
  for (const auto& x : n.body) scan_node(x.get(), n);
  for (const auto& p : n.list) {
    if (p->str == "caller") n.uses_caller = false;
    if (p->str == "kwargs") n.uses_kwargs = false;
    if (p->str == "varargs") n.uses_varargs = false;
  }
}

}  // namespace

NodePtr parse(const std::vector<Token>& tokens) { return Parser(tokens).program(); }

}  // namespace sluice::jinja
