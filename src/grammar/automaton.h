// A compiled grammar: one deterministic automaton per called rule over byte classes, plus what
// matching needs at rule boundaries. A matching position is a stack of states (the root rule's
// state first, each called rule's on top of its caller's return state); the top consumes bytes.
// `closure(t)` is where a rule's state t leads without consuming: the stacks (relative to t's
// rule) whose tops consume bytes, entered through calls, and `escaped` when t's rule can end there.
// Compiling checks that the grammar matches something and has no left recursion.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/nfa.h"

namespace sluice::grammar {

using Stack = std::vector<int32_t>;

class Automaton {
 public:
  explicit Automaton(const Grammar& g);  // throws sluice::Error

  // The state after `byte` from `state`; −1 when the byte does not continue the grammar there.
  int32_t next(int32_t state, uint8_t byte) const {
    return trans_[static_cast<size_t>(state) * n_classes_ + class_of_[byte]];
  }
  int32_t root_start() const { return rule_start_[0]; }

  struct Closure {
    std::vector<Stack> stacks;
    bool escaped = false;
  };
  // A plain state consumes bytes, calls nothing and does not end its rule: its closure is itself.
  bool plain(int32_t state) const { return plain_[state] != 0; }
  const Closure& closure(int32_t state) const { return closure_[closure_index_[state]]; }

  int n_states() const { return static_cast<int>(final_.size()); }
  // The bytes `state` consumes (for messages).
  std::vector<uint8_t> bytes_from(int32_t state) const;

  // Appends `prefix` + each stack of closure(state) to `out`, and where the closure escapes,
  // continues with the caller's return state below (prefix's top) the same way. Returns true when
  // the bottom frame escapes (the text may end here: the root rule, or the caller is unknown).
  // `prefix` is restored before returning.
  bool expand(Stack& prefix, int32_t state, std::vector<Stack>& out) const;

 private:
  void determinize(const Nfas& nfas);
  void trim();
  void check_left_recursion(const Grammar& g, const std::vector<int>& sources);
  void build_closures();
  int32_t closure_of(int32_t state, std::vector<uint8_t>& busy);

  int n_classes_ = 0;
  std::array<uint8_t, 256> class_of_{};
  std::vector<int32_t> trans_;  // n_states × n_classes
  std::vector<uint8_t> final_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls_;  // per state: (rule, return state)
  std::vector<int32_t> rule_start_;
  std::vector<int32_t> rule_of_;
  std::vector<uint8_t> nullable_;  // per rule
  std::vector<uint8_t> plain_;
  std::vector<uint8_t> consumes_;
  std::vector<std::string> rule_names_;  // for messages
  std::vector<int32_t> closure_index_;   // per state: index into closure_ (−1: not built yet)
  std::vector<Closure> closure_;
};

}  // namespace sluice::grammar
