// SentencePiece BPE encoding as llama.cpp and sentencepiece do it for LLaMA-style vocabularies:
// start from single characters, merge the adjacent pair whose concatenation is the best-scoring
// vocabulary entry (leftmost on ties), and fall back to byte tokens for characters the vocabulary
// lacks.
#include <queue>

#include "tokenizer/models.h"
#include "tokenizer/utf8.h"

namespace sluice {

void spm_encode(const Vocab& vocab, const std::array<int32_t, 256>& byte_ids, int32_t unk,
                std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  struct Symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    // A broken sequence is one symbol per byte, so it cannot swallow the start of the next
    // character (an escaped space would otherwise come back as U+2581's bytes).
    const size_t n = std::max<size_t>(1, utf8::valid_char_len(text, i));
    sym.push_back({i, n, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
    i += n;
  }
  sym.back().next = -1;

  struct Candidate {
    float score;
    int left;
    size_t size;  // merged byte length at push time; differs later when either side changed
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  auto push = [&](int l) {
    if (l < 0 || sym[l].next < 0) return;
    const Symbol& a = sym[l];
    const Symbol& b = sym[a.next];
    const int32_t id = vocab.find(text.substr(a.start, a.len + b.len));
    if (id >= 0) heap.push({vocab.score[id], l, a.len + b.len});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& a = sym[c.left];
    if (a.len == 0 || a.next < 0) continue;
    Symbol& b = sym[a.next];
    if (a.len + b.len != c.size) continue;
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) sym[a.next].prev = c.left;
    push(a.prev);
    push(c.left);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].len);
    const int32_t id = vocab.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char ch : piece) {
      const int32_t b = byte_ids[static_cast<uint8_t>(ch)];
      if (b >= 0) {
        out.push_back(b);
      } else if (unk >= 0) {
        out.push_back(unk);
      }
    }
  }
}

}  // namespace sluice
