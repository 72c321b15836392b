// Grammars over a vocabulary: which tokens may come next, fast enough to ask at every step.
//
// A grammar position is a set of stacks (automaton.h). For each automaton state the tokens are
// split once, by one walk of the vocabulary trie, into those the state's rule accepts whole,
// those it rejects, and the few that run past the end of its rule and so depend on the callers
// below (StateMask). A step's mask is then the union over the position's stacks of the accepted
// sets, plus the uncertain tokens checked against the whole stack — for a grammar without
// recursion, one precomputed set. Masks are computed when a state is first reached and shared
// by every request using the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/vocab_trie.h"

namespace sluice::grammar {

// Where a text can be in the grammar: its stacks (sorted, unique), and whether it may end here.
struct MatchState {
  std::vector<Stack> stacks;
  bool can_end = false;
  bool dead() const { return stacks.empty() && !can_end; }
};

MatchState start_state(const Automaton& a);
// The state after `bytes`; dead when they do not continue the text.
MatchState advance(const Automaton& a, const MatchState& s, std::string_view bytes);

// Copies `in` to `out`, with −inf for every id whose bit is clear (`count`: the bits set).
void apply_bits(std::span<const float> in, const std::vector<uint64_t>& bits, size_t count,
                std::vector<float>& out);

// A set of token ids over [0, n_rows), stored as the allowed ids, the refused ids or a bitset,
// whichever is smallest.
class TokenSet {
 public:
  static TokenSet from_bits(std::vector<uint64_t> bits, int n_rows);
  // Copies `in` to `out`, with −inf for every token outside the set.
  void apply(std::span<const float> in, std::vector<float>& out) const;
  void add_to(std::vector<uint64_t>& bits) const;
  size_t size() const { return count_; }

 private:
  enum class Kind { kList, kExcept, kBits } kind_ = Kind::kList;
  std::vector<int32_t> ids_;
  std::vector<uint64_t> bits_;
  size_t count_ = 0;
  int n_rows_ = 0;
};

struct StateMask {
  TokenSet accepted;               // consumed whole from this state (or ending its rule exactly)
  std::vector<int32_t> uncertain;  // run past the end of the state's rule: up to the callers
};

class TokenGrammar {
 public:
  // Parses and compiles GBNF; throws sluice::Error naming the position and reason, also when no
  // token of the vocabulary can start the text.
  TokenGrammar(std::string_view gbnf, std::shared_ptr<const VocabTrie> vocab);

  const Automaton& automaton() const { return automaton_; }
  const VocabTrie& vocab() const { return *vocab_; }
  std::shared_ptr<const StateMask> mask(int32_t state) const;  // thread-safe
  // Whether a token's bytes continue the text from `s`.
  bool allows(const MatchState& s, int32_t token) const;
  // Whether a grammar may match the token by its bytes at all: it has bytes, and a control token
  // is spelled by a literal of this grammar.
  bool matchable(int32_t token) const;

 private:
  TokenGrammar(const Grammar& g, std::shared_ptr<const VocabTrie> vocab);
  StateMask compute_mask(int32_t state) const;

  Automaton automaton_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<int32_t> controls_;  // control tokens a literal of the grammar spells
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const StateMask>> masks_;
};

// One generation's position in a grammar.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar);

  // Copies `logits` to `out` with −inf for every token the grammar does not allow next;
  // end-of-generation tokens are allowed where the text may end and `eog` is set. Returns false
  // when no token is allowed.
  bool mask(std::span<const float> logits, std::vector<float>& out, bool eog);
  // Moves past `token` (not an end-of-generation token); false, and no move, when not allowed.
  bool accept(int32_t token);
  // How many of `tokens` in turn the grammar allows (an end-of-generation token where the text
  // may end, with `eog`, counts and ends the run).
  size_t valid_prefix(std::span<const int32_t> tokens, bool eog) const;

  bool can_end() const { return state_.can_end; }
  // Complete, and nothing can follow.
  bool closed() const { return state_.can_end && state_.stacks.empty(); }
  bool is_eog(int32_t token) const;
  int n_rows() const { return grammar_->vocab().n_rows(); }

 private:
  std::shared_ptr<const TokenGrammar> grammar_;
  MatchState state_;
  // Masks of recent multi-stack states (a nested position recurs, e.g. inside each string).
  struct Cached {
    std::vector<Stack> stacks;
    std::vector<uint64_t> bits;
  };
  std::vector<Cached> cache_;
  size_t cache_next_ = 0;
  std::vector<uint64_t> bits_;
};

}  // namespace sluice::grammar
