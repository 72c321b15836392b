// Writing GBNF: rules with unique names (rules with the same body share one), literals and
// character classes with the escapes the parser reads back. The JSON Schema converter and the
// tool-call grammars write through it, so every generated grammar quotes text one way.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf.h"

namespace sluice::grammar {

class GbnfWriter {
 public:
  // Adds `hint ::= body` under a fresh name derived from `hint`, or returns the name of a rule
  // with the same body.
  std::string rule(std::string_view hint, const std::string& body);
  // A name to define later (recursive rules refer to it first).
  std::string reserve(std::string_view hint);
  void define(const std::string& name, const std::string& body);
  // The grammar: `root ::= root_body`, then every rule in the order added.
  std::string text(const std::string& root_body) const;

  // A GBNF literal matching exactly `utf8`.
  static std::string literal(std::string_view utf8);
  // A GBNF character class matching the code points of `ranges` ("[]"-free: an empty set is a
  // class no character matches).
  static std::string char_class(const std::vector<CodeRange>& ranges);

 private:
  std::vector<std::pair<std::string, std::string>> rules_;  // name, body (empty: reserved)
  std::map<std::string, std::string> by_body_;
  std::set<std::string> used_;
};

}  // namespace sluice::grammar
