// Jinja syntax tree. One node struct with generic child slots keeps the parser and evaluator
// short; the comment on each NodeType says which slots it uses. Nodes keep their template line
// and column for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_lexer.h"

namespace sluice::jinja {

enum class NodeType : uint8_t {
  Program,          // body
  Text,             // str (literal template text)
  If,               // a = test, body, alt
  For,              // a = loop variable (Identifier/Tuple), b = iterable (maybe Select), body, alt
  Set,              // a = target, b = value (null for a block set), body
  Macro,            // str = name, list = parameters, body
  CallBlock,        // a = Call node, list = caller parameters, body
  FilterBlock,      // a = filter (Identifier or Call), body
  Break,
  Continue,
  Comment,
  Identifier,       // str
  IntegerLiteral,   // num
  FloatLiteral,     // num
  StringLiteral,    // str
  ArrayLiteral,     // list
  TupleLiteral,     // list
  ObjectLiteral,    // pairs
  Binary,           // str = operator, a, b
  Unary,            // str = operator, a
  Member,           // a = object, b = property, flag = computed ([...])
  Call,             // a = callee, list = arguments
  Filter,           // a = operand, b = filter (Identifier or Call)
  Test,             // a = operand, str = test name, flag = negated, list = arguments
  Select,           // a = value, b = condition (`x if c` without else)
  Ternary,          // a = condition, b = if true, c = if false
  Slice,            // a = start, b = stop, c = step (each may be null)
  KeywordArgument,  // str = name, a = value
  Spread,           // a (`*args`)
  KeywordSpread,    // a (`**kwargs`)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeType type;
  uint32_t line = 0, col = 0;
  std::string str;
  double num = 0;
  bool flag = false;
  NodePtr a, b, c;
  std::vector<NodePtr> list, body, alt;
  std::vector<std::pair<NodePtr, NodePtr>> pairs;
  // Macros and call blocks: which of caller/kwargs/varargs the body reads (set by the parser).
  bool uses_caller = false, uses_kwargs = false, uses_varargs = false;
};

// Parses tokens into a Program node; throws sluice::Error naming the line and column.
NodePtr parse(const std::vector<Token>& tokens);

}  // namespace sluice::jinja
