// Errors inside the Jinja interpreter. Builtins throw RuntimeFail, which knows nothing about the
// template; the evaluator catches it at the innermost AST node and rethrows a sluice::Error that
// names that node's template line and column, so every message points at the failing spot.
#pragma once

#include <stdexcept>
#include <string>

namespace sluice::jinja {

class RuntimeFail : public std::runtime_error {
 public:
  explicit RuntimeFail(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown by raise_exception(): carries the template's own message verbatim.
class RaisedByTemplate : public RuntimeFail {
 public:
  explicit RaisedByTemplate(const std::string& msg) : RuntimeFail(msg) {}
};

}  // namespace sluice::jinja
