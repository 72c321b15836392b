// The engine's compiled grammars (GenerateOptions::grammar): the vocabulary trie is built on first
// use, and the most recently used grammars are kept by their text, so requests that repeat a
// schema share its compiled automaton and the token masks computed so far.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "grammar/token_grammar.h"

namespace sluice {

class Tokenizer;

class GrammarCache {
 public:
  // `n_rows`: the model's logit rows.
  GrammarCache(const Tokenizer& tokenizer, int n_rows) : tokenizer_(tokenizer), n_rows_(n_rows) {}
  // The compiled grammar; throws sluice::Error (position and reason) for a bad one. Thread-safe.
  std::shared_ptr<const grammar::TokenGrammar> get(std::string_view gbnf);

 private:
  static constexpr size_t kKept = 16;
  const Tokenizer& tokenizer_;
  const int n_rows_;
  std::once_flag trie_once_;
  std::shared_ptr<const grammar::VocabTrie> trie_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::TokenGrammar>>>
      recent_;  // newest first
};

}  // namespace sluice
