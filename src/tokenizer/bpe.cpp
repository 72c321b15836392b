// Byte-level BPE merging. Symbols start as the characters of the piece; the adjacent pair with
// the lowest merge rank (leftmost on ties) is merged until no ranked pair remains. Candidates sit
// in a min-heap and are checked against the current symbols when popped, so each merge costs
// O(log n) instead of a rescan of the piece.
#include <queue>

#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace sluice {

BpeModel::BpeModel(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges)
    : vocab_(vocab), ignore_merges_(ignore_merges) {
  ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) ranks_.emplace(merges[i], static_cast<int32_t>(i));
}

int BpeModel::rank(std::string_view left, std::string_view right, std::string& scratch) const {
  scratch.assign(left);
  if (ranks_.empty()) {
    scratch.append(right);
    return vocab_.find(scratch);
  }
  scratch.push_back(' ');
  scratch.append(right);
  auto it = ranks_.find(scratch);
  return it == ranks_.end() ? -1 : it->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  struct Symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = std::min(utf8::seq_len(static_cast<unsigned char>(piece[i])), piece.size() - i);
    sym.push_back({i, n, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
    i += n;
  }
  sym.back().next = -1;

  struct Candidate {
    int rank, left;
    size_t left_len, right_len;  // lengths at push time; a mismatch later means it is stale
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::string scratch;
  auto push = [&](int l) {
    if (l < 0 || sym[l].next < 0) return;
    const Symbol& a = sym[l];
    const Symbol& b = sym[a.next];
    const int r = rank(piece.substr(a.start, a.len), piece.substr(b.start, b.len), scratch);
    if (r >= 0) heap.push({r, l, a.len, b.len});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& a = sym[c.left];
    if (a.len != c.left_len || a.next < 0) continue;
    Symbol& b = sym[a.next];
    if (b.len != c.right_len) continue;
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) sym[a.next].prev = c.left;
    push(a.prev);
    push(c.left);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view text = piece.substr(sym[i].start, sym[i].len);
    const int32_t id = vocab_.find(text);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // A symbol without a token can only be a character missing from the vocabulary (merges
    // always produce tokens); emit what its characters map to and drop the rest, like HF.
    for (size_t k = 0; k < text.size();) {
      const size_t n = std::min(utf8::seq_len(static_cast<unsigned char>(text[k])), text.size() - k);
      const int32_t cid = vocab_.find(text.substr(k, n));
      if (cid >= 0) out.push_back(cid);
      k += n;
    }
  }
}

}  // namespace sluice
