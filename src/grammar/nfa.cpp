// Rule automata (see nfa.h): Thompson's construction over the expression trees, with references
// to non-recursive rules expanded in place while the expansion stays small.
#include "grammar/nfa.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

namespace {

// A rule expands in place while its expansion has at most this many states; a larger one is
// called instead (its tokens then cross a rule boundary, which masks check at run time).
constexpr uint64_t kInlineLimit = 100000;
// Every rule automaton together; beyond this the grammar is refused.
constexpr size_t kMaxNfaStates = 4'000'000;

void split_utf8(uint32_t lo, uint32_t hi,
                std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  // Split at the encoding lengths' bounds first: a sequence has one length.
  static constexpr uint32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : kBounds)
    if (lo <= b && hi > b) {
      split_utf8(lo, b, out);
      split_utf8(b + 1, hi, out);
      return;
    }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  // Then until each continuation byte spans its whole range wherever a higher byte varies.
  const size_t n = utf8::encode(lo).size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8::encode(lo), b = utf8::encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k)
    seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(seq));
}

void collect_refs(const Expr& e, std::vector<int>& out) {
  if (e.kind == Expr::Kind::kRef) out.push_back(e.rule);
  for (const Expr& x : e.items) collect_refs(x, out);
}

// Rules on a cycle of references (Tarjan's strongly connected components).
std::vector<bool> recursive_rules(const Grammar& g) {
  const int n = static_cast<int>(g.rules.size());
  std::vector<std::vector<int>> refs(n);
  for (int r = 0; r < n; ++r) collect_refs(g.rules[r].body, refs[r]);
  std::vector<int> index(n, -1), low(n, 0), stack;
  std::vector<bool> on_stack(n, false), out(n, false);
  int next = 0;
  std::function<void(int)> visit = [&](int v) {
    index[v] = low[v] = next++;
    stack.push_back(v);
    on_stack[v] = true;
    for (int w : refs[v]) {
      if (index[w] < 0) {
        visit(w);
        low[v] = std::min(low[v], low[w]);
      } else if (on_stack[w]) {
        low[v] = std::min(low[v], index[w]);
      }
    }
    if (low[v] != index[v]) return;
    std::vector<int> scc;
    int w;
    do {
      w = stack.back();
      stack.pop_back();
      on_stack[w] = false;
      scc.push_back(w);
    } while (w != v);
    const bool self = std::find(refs[v].begin(), refs[v].end(), v) != refs[v].end();
    if (scc.size() > 1 || self)
      for (int x : scc) out[x] = true;
  };
  for (int r = 0; r < n; ++r)
    if (index[r] < 0) visit(r);
  return out;
}

class Builder {
 public:
  explicit Builder(const Grammar& g)
      : g_(g), recursive_(recursive_rules(g)), size_(g.rules.size(), 0) {}

  Nfas run() {
    call_id(g_.root);
    // Rules join the list as calls to them are built; each is built once.
    for (size_t i = 0; i < out_.rules.size(); ++i) {
      const int source = out_.rules[i].source;
      const int32_t start = new_state();
      const int32_t end = build(g_.rules[source].body, start);
      out_.rules[i].start = start;
      out_.rules[i].final = end;
    }
    return std::move(out_);
  }

 private:
  int32_t new_state() {
    if (out_.states.size() >= kMaxNfaStates)
      fail("grammar: too large (more than {} automaton states); use fewer or smaller repetitions",
           kMaxNfaStates);
    out_.states.emplace_back();
    return static_cast<int32_t>(out_.states.size() - 1);
  }

  int32_t call_id(int source) {
    auto [it, added] = calls_.emplace(source, static_cast<int32_t>(out_.rules.size()));
    if (added) out_.rules.push_back({source, 0, 0});
    return it->second;
  }

  // States an in-place expansion of `e` takes, saturating at twice the inline limit.
  uint64_t estimate(const Expr& e) {
    const uint64_t cap = 2 * kInlineLimit;
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return 0;
      case Expr::Kind::kLiteral:
        return 4 * e.text.size();
      case Expr::Kind::kClass:
        return 4 * e.ranges.size() + 1;
      case Expr::Kind::kRef:
        return inline_rule(e.rule) ? rule_size(e.rule) : 1;
      case Expr::Kind::kSeq:
      case Expr::Kind::kAlt: {
        uint64_t n = 1;
        for (const Expr& x : e.items) n = std::min(cap, n + estimate(x));
        return n;
      }
      case Expr::Kind::kRepeat: {
        const uint64_t copies =
            e.max < 0 ? static_cast<uint64_t>(e.min) + 1 : static_cast<uint64_t>(e.max);
        return std::min(cap, estimate(e.items[0]) * copies + 2);
      }
    }
    return cap;
  }

  uint64_t rule_size(int r) {
    if (size_[r] == 0) size_[r] = std::max<uint64_t>(1, estimate(g_.rules[r].body));
    return size_[r];
  }

  bool inline_rule(int r) { return !recursive_[r] && rule_size(r) <= kInlineLimit; }

  void bytes(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
    out_.states[from].bytes.push_back({lo, hi, to});
  }
  void eps(int32_t from, int32_t to) { out_.states[from].eps.push_back(to); }

  // Adds `e` starting at state `from`; returns the state where it ends.
  int32_t build(const Expr& e, int32_t from) {
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return from;
      case Expr::Kind::kLiteral: {
        int32_t cur = from;
        for (uint32_t cp : e.text)
          for (char c : utf8::encode(cp)) {
            const int32_t next = new_state();
            bytes(cur, static_cast<uint8_t>(c), static_cast<uint8_t>(c), next);
            cur = next;
          }
        return cur;
      }
      case Expr::Kind::kClass: {
        const int32_t end = new_state();
        for (const auto& seq : utf8_sequences(e.ranges)) {
          int32_t cur = from;
          for (size_t k = 0; k < seq.size(); ++k) {
            const int32_t next = k + 1 == seq.size() ? end : new_state();
            bytes(cur, seq[k].first, seq[k].second, next);
            cur = next;
          }
        }
        return end;
      }
      case Expr::Kind::kRef: {
        if (inline_rule(e.rule)) return build(g_.rules[e.rule].body, from);
        const int32_t rule = call_id(e.rule);
        const int32_t end = new_state();
        out_.states[from].calls.push_back({rule, end});
        return end;
      }
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (const Expr& x : e.items) cur = build(x, cur);
        return cur;
      }
      case Expr::Kind::kAlt: {
        const int32_t end = new_state();
        for (const Expr& x : e.items) eps(build(x, from), end);
        return end;
      }
      case Expr::Kind::kRepeat: {
        const Expr& item = e.items[0];
        int32_t cur = from;
        for (int i = 0; i < e.min; ++i) cur = build(item, cur);
        if (e.max < 0) {
          // A fresh loop state, so what follows cannot jump back into an earlier copy.
          const int32_t loop = new_state();
          eps(cur, loop);
          eps(build(item, loop), loop);
          return loop;
        }
        const int32_t end = new_state();
        for (int i = e.min; i < e.max; ++i) {
          eps(cur, end);
          cur = build(item, cur);
        }
        eps(cur, end);
        return end;
      }
    }
    return from;
  }

  const Grammar& g_;
  std::vector<bool> recursive_;
  std::vector<uint64_t> size_;
  std::unordered_map<int, int32_t> calls_;
  Nfas out_;
};

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(
    const std::vector<CodeRange>& ranges) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  for (const CodeRange& r : ranges) {
    // Surrogates have no UTF-8 form: the parts of a range around them.
    if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
      if (r.lo < 0xD800) split_utf8(r.lo, 0xD7FF, out);
      if (r.hi > 0xDFFF) split_utf8(0xE000, r.hi, out);
    } else {
      split_utf8(r.lo, r.hi, out);
    }
  }
  return out;
}

Nfas build_nfas(const Grammar& g) {
  return Builder(g).run();
}

}  // namespace sluice::grammar
