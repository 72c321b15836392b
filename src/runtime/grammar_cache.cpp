// Compiled grammars of an engine (see grammar_cache.h).
#include "runtime/grammar_cache.h"

namespace sluice {

std::shared_ptr<const grammar::TokenGrammar> GrammarCache::get(std::string_view gbnf) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it)
      if (it->first == gbnf) {
        recent_.splice(recent_.begin(), recent_, it);
        return recent_.front().second;
      }
  }
  std::call_once(trie_once_,
                 [&] { trie_ = std::make_shared<const grammar::VocabTrie>(tokenizer_, n_rows_); });
  // Compiled outside the lock: a large grammar must not hold up requests with other grammars.
  auto g = std::make_shared<const grammar::TokenGrammar>(gbnf, trie_);
  std::lock_guard<std::mutex> lock(mutex_);
  recent_.emplace_front(std::string(gbnf), g);
  if (recent_.size() > kKept) recent_.pop_back();
  return g;
}

}  // namespace sluice
