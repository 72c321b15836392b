// A vocabulary as a byte trie, laid out in depth-first order so a walk that rejects a prefix skips
// its whole subtree with one jump: what makes computing a grammar state's token mask cost one pass
// over the prefixes the state allows rather than over every token string. Built once per engine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice {

class Tokenizer;

namespace grammar {

class VocabTrie {
 public:
  // `n_rows`: the model's logit rows (at least the tokenizer's size; rows past it are padding).
  VocabTrie(const Tokenizer& tok, int n_rows);

  struct Node {
    uint32_t skip;       // index of the next node outside this node's subtree
    uint32_t tok_begin;  // tokens()[tok_begin, tok_end): the tokens whose bytes end here
    uint32_t tok_end;
    uint32_t sub_end;  // tokens()[tok_begin, sub_end): every token in the subtree
    uint16_t depth;    // bytes from the root (1 for a first byte)
    uint8_t byte;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  // Token ids sorted by their bytes.
  std::span<const int32_t> tokens(uint32_t begin, uint32_t end) const {
    return std::span<const int32_t>(sorted_).subspan(begin, end - begin);
  }
  int max_depth() const { return max_depth_; }

  int n_rows() const { return n_rows_; }
  // The bytes a token adds to the text; empty for ids without text (padding rows included).
  const std::string& bytes(int32_t id) const {
    static const std::string kNone;
    return id >= 0 && static_cast<size_t>(id) < bytes_.size() ? bytes_[id] : kNone;
  }
  // End-of-generation tokens: they end the text and are allowed only where the grammar may end.
  const std::vector<int32_t>& eog() const { return eog_; }
  // Control tokens with text (<|im_start|>, harmony's <|channel|>, …), in id order: left out of
  // the trie, a grammar matches one only where a literal of the grammar spells it.
  const std::vector<int32_t>& control() const { return control_; }

 private:
  int n_rows_ = 0;
  int max_depth_ = 0;
  std::vector<std::string> bytes_;  // per id below the tokenizer's size
  std::vector<int32_t> sorted_;
  std::vector<Node> nodes_;
  std::vector<int32_t> eog_, control_;
};

}  // namespace grammar
}  // namespace sluice
