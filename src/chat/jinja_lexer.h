// Jinja lexer: template source → tokens, with the whitespace handling of @huggingface/jinja
// (trim_blocks and lstrip_blocks on, one trailing newline dropped, `-` markers strip adjacent
// whitespace, transformers' {% generation %} tags removed). Every token remembers its line and
// column in the original source so that parse and runtime errors can point at it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::jinja {

enum class Tok : uint8_t {
  Text, NumericLiteral, StringLiteral, Identifier, Equals, OpenParen, CloseParen, OpenStatement,
  CloseStatement, OpenExpression, CloseExpression, OpenSquareBracket, CloseSquareBracket,
  OpenCurlyBracket, CloseCurlyBracket, Comma, Dot, Colon, Pipe, AdditiveBinaryOperator,
  MultiplicativeBinaryOperator, ExponentiationBinaryOperator, ComparisonBinaryOperator,
  UnaryOperator, Comment,
};

const char* tok_name(Tok t);

struct Token {
  Tok type;
  std::string value;
  uint32_t line = 0, col = 0;  // 1-based, in the original template
};

std::vector<Token> tokenize(const std::string& source);

}  // namespace sluice::jinja
