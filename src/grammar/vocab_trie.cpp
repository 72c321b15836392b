// Vocabulary trie (see vocab_trie.h): tokens sorted by bytes give the depth-first order directly —
// each token adds the nodes past its common prefix with the one before it.
#include "grammar/vocab_trie.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace sluice::grammar {

VocabTrie::VocabTrie(const Tokenizer& tok, int n_rows) : n_rows_(n_rows) {
  const int n = tok.n_vocab();
  bytes_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = tok.token_type(id);
    if (tok.is_eog(id)) {
      eog_.push_back(id);
      continue;
    }
    if (type == TokenType::kUnused) continue;
    bytes_[id] = tok.token_bytes(id);
    if (bytes_[id].empty()) continue;
    if (bytes_[id].size() > std::numeric_limits<uint16_t>::max()) continue;
    if (type == TokenType::kControl)
      control_.push_back(id);
    else
      sorted_.push_back(id);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  // `open[d]` is the node at depth d + 1 on the path of the previous token; nodes deeper than
  // the next token's common prefix with it are finished, their subtrees ending before it.
  std::vector<uint32_t> open;
  auto close_to = [&](size_t depth, uint32_t next_token) {
    while (open.size() > depth) {
      Node& node = nodes_[open.back()];
      node.skip = static_cast<uint32_t>(nodes_.size());
      node.sub_end = next_token;
      open.pop_back();
    }
  };
  std::string_view prev;
  for (uint32_t k = 0; k < sorted_.size(); ++k) {
    const std::string& b = bytes_[sorted_[k]];
    size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    close_to(common, k);
    for (size_t d = common; d < b.size(); ++d) {
      open.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({0, k, k, k, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(b[d])});
    }
    Node& leaf = nodes_[open.back()];
    if (leaf.tok_end != k) fail("vocabulary trie: tokens out of order");  // sorted above
    leaf.tok_end = k + 1;
    max_depth_ = std::max<int>(max_depth_, static_cast<int>(b.size()));
    prev = b;
  }
  close_to(0, static_cast<uint32_t>(sorted_.size()));
  if (nodes_.size() >= std::numeric_limits<uint32_t>::max())
    fail("vocabulary trie: too many nodes");
}

}  // namespace sluice::grammar
