// From grammar rules to byte automata with calls: each rule that must stay a rule (the root, and
// rules that reach themselves) becomes a nondeterministic automaton over UTF-8 bytes whose edges
// are byte ranges, empty moves, or calls of another such rule. Every other rule is expanded in
// place, so a grammar without recursion is one automaton and its token masks never depend on a
// stack. Character classes become the byte sequences of their code points.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/gbnf.h"

namespace sluice::grammar {

struct NfaState {
  struct Bytes {
    uint8_t lo, hi;
    int32_t to;
  };
  struct Call {
    int32_t rule, to;  // rule: index into Nfas::rules; to: where the call returns
  };
  std::vector<Bytes> bytes;
  std::vector<int32_t> eps;
  std::vector<Call> calls;
};

struct Nfas {
  struct Rule {
    int source = -1;  // index into Grammar::rules
    int32_t start = 0, final = 0;
  };
  std::vector<NfaState> states;  // every rule's states, numbered together
  std::vector<Rule> rules;       // rules[0] is the root
};

Nfas build_nfas(const Grammar& g);

// The UTF-8 byte sequences of a set of code points: each inner vector is one sequence of byte
// ranges (lo, hi), and together they match exactly the encodings of the code points.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(
    const std::vector<CodeRange>& ranges);

}  // namespace sluice::grammar
