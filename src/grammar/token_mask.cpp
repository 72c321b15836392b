// Token masks of grammar states (see token_grammar.h): match states, token sets, and the walk of
// the vocabulary trie that splits a state's tokens into accepted, rejected and uncertain.
#include <algorithm>
#include <bit>
#include <limits>

#include "core/error.h"
#include "grammar/token_grammar.h"

namespace sluice::grammar {

namespace {

void sort_unique(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

void set_bits(std::vector<uint64_t>& bits, std::span<const int32_t> ids) {
  for (int32_t id : ids) bits[static_cast<uint32_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

// The relative position during a trie walk: stacks whose bottom frame is in the walked state's
// rule (`simple` ≥ 0 stands for the one-frame stack of a plain state, the common case, without
// allocating), and whether that rule may have ended here.
struct Walk {
  int32_t simple = -1;
  std::vector<Stack> stacks;
  bool escaped = false;
  bool escaped_before = false;  // the rule could end somewhere on the way here
  bool alive() const { return simple >= 0 || !stacks.empty(); }
};

void step(const Automaton& a, const Walk& from, uint8_t byte, Walk& to) {
  to.stacks.clear();
  to.simple = -1;
  to.escaped = false;
  if (from.simple >= 0) {
    const int32_t t = a.next(from.simple, byte);
    if (t < 0) return;
    if (a.plain(t)) {
      to.simple = t;
      return;
    }
    Stack prefix;
    to.escaped = a.expand(prefix, t, to.stacks);
  } else {
    for (const Stack& s : from.stacks) {
      const int32_t t = a.next(s.back(), byte);
      if (t < 0) continue;
      Stack prefix(s.begin(), s.end() - 1);
      to.escaped = a.expand(prefix, t, to.stacks) || to.escaped;
    }
  }
  sort_unique(to.stacks);
  if (to.stacks.size() == 1 && to.stacks[0].size() == 1 && a.plain(to.stacks[0][0])) {
    to.simple = to.stacks[0][0];
    to.stacks.clear();
  }
}

}  // namespace

void apply_bits(std::span<const float> in, const std::vector<uint64_t>& bits, size_t count,
                std::vector<float>& out) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const size_t n = in.size();
  // Start from whichever side is larger, then visit only the other side's bits.
  if (count * 2 > n) {
    out.assign(in.begin(), in.end());
    for (size_t w = 0; w * 64 < n; ++w)
      for (uint64_t off = w < bits.size() ? ~bits[w] : ~uint64_t{0}; off; off &= off - 1) {
        const size_t id = w * 64 + static_cast<size_t>(std::countr_zero(off));
        if (id < n) out[id] = kOff;
      }
  } else {
    out.assign(n, kOff);
    for (size_t w = 0; w < bits.size() && w * 64 < n; ++w)
      for (uint64_t on = bits[w]; on; on &= on - 1) {
        const size_t id = w * 64 + static_cast<size_t>(std::countr_zero(on));
        if (id < n) out[id] = in[id];
      }
  }
}

MatchState start_state(const Automaton& a) {
  MatchState s;
  Stack prefix;
  s.can_end = a.expand(prefix, a.root_start(), s.stacks);
  sort_unique(s.stacks);
  return s;
}

MatchState advance(const Automaton& a, const MatchState& from, std::string_view bytes) {
  MatchState cur = from, next;
  for (char c : bytes) {
    next.stacks.clear();
    next.can_end = false;
    for (const Stack& s : cur.stacks) {
      const int32_t t = a.next(s.back(), static_cast<uint8_t>(c));
      if (t < 0) continue;
      Stack prefix(s.begin(), s.end() - 1);
      next.can_end = a.expand(prefix, t, next.stacks) || next.can_end;
    }
    sort_unique(next.stacks);
    std::swap(cur, next);
    if (cur.dead()) break;
  }
  return cur;
}

TokenSet TokenSet::from_bits(std::vector<uint64_t> bits, int n_rows) {
  TokenSet s;
  s.n_rows_ = n_rows;
  for (uint64_t w : bits) s.count_ += static_cast<size_t>(std::popcount(w));
  const size_t small = static_cast<size_t>(n_rows) / 32;
  if (s.count_ <= small) {
    s.kind_ = Kind::kList;
    for (int32_t id = 0; id < n_rows; ++id)
      if (bits[id >> 6] >> (id & 63) & 1) s.ids_.push_back(id);
  } else if (static_cast<size_t>(n_rows) - s.count_ <= small) {
    s.kind_ = Kind::kExcept;
    for (int32_t id = 0; id < n_rows; ++id)
      if (!(bits[id >> 6] >> (id & 63) & 1)) s.ids_.push_back(id);
  } else {
    s.kind_ = Kind::kBits;
    s.bits_ = std::move(bits);
  }
  return s;
}

void TokenSet::apply(std::span<const float> in, std::vector<float>& out) const {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const size_t n = in.size();
  switch (kind_) {
    case Kind::kList:
      out.assign(n, kOff);
      for (int32_t id : ids_) out[id] = in[id];
      return;
    case Kind::kExcept:
      out.assign(in.begin(), in.end());
      for (int32_t id : ids_) out[id] = kOff;
      for (size_t id = static_cast<size_t>(n_rows_); id < n; ++id) out[id] = kOff;
      return;
    case Kind::kBits:
      apply_bits(in, bits_, count_, out);
      return;
  }
}

void TokenSet::add_to(std::vector<uint64_t>& bits) const {
  switch (kind_) {
    case Kind::kList:
      set_bits(bits, ids_);
      return;
    case Kind::kExcept: {
      std::vector<uint64_t> all(bits.size(), ~uint64_t{0});
      for (int32_t id : ids_) all[id >> 6] &= ~(uint64_t{1} << (id & 63));
      for (size_t w = 0; w < bits.size(); ++w) bits[w] |= all[w];
      return;
    }
    case Kind::kBits:
      for (size_t w = 0; w < bits.size(); ++w) bits[w] |= bits_[w];
      return;
  }
}

StateMask TokenGrammar::compute_mask(int32_t state) const {
  const Automaton& a = automaton_;
  const VocabTrie& v = *vocab_;
  std::vector<uint64_t> accepted((static_cast<size_t>(v.n_rows()) + 63) / 64, 0);
  StateMask out;
  auto uncertain = [&](uint32_t begin, uint32_t end) {
    const auto ids = v.tokens(begin, end);
    out.uncertain.insert(out.uncertain.end(), ids.begin(), ids.end());
  };
  // walk[d]: the position after the first d bytes of the current prefix; walk[0] is the state
  // itself, which consumes the first byte by its own transitions (its calls and its rule's end
  // are other stacks of any position it is the top of).
  std::vector<Walk> walk(static_cast<size_t>(v.max_depth()) + 1);
  walk[0].simple = state;
  const auto& nodes = v.nodes();
  for (size_t i = 0; i < nodes.size();) {
    const VocabTrie::Node& node = nodes[i];
    const Walk& parent = walk[node.depth - 1];
    Walk& cur = walk[node.depth];
    step(a, parent, node.byte, cur);
    cur.escaped_before = parent.escaped_before || cur.escaped;
    if (!cur.alive() && !cur.escaped) {
      if (parent.escaped_before) uncertain(node.tok_begin, node.sub_end);
      i = node.skip;
      continue;
    }
    set_bits(accepted, v.tokens(node.tok_begin, node.tok_end));
    if (!cur.alive()) {
      // The rule ends exactly here: longer tokens continue in whatever called it.
      uncertain(node.tok_end, node.sub_end);
      i = node.skip;
      continue;
    }
    ++i;
  }
  // Control tokens the grammar spells: the same test, byte by byte.
  for (int32_t id : controls_) {
    Walk from, to;
    from.simple = state;
    bool escaped_before = false;
    for (char c : v.bytes(id)) {
      step(a, from, static_cast<uint8_t>(c), to);
      escaped_before = escaped_before || to.escaped;
      std::swap(from, to);
      if (!from.alive()) break;
    }
    if (from.alive() || from.escaped)
      set_bits(accepted, std::span<const int32_t>(&id, 1));
    else if (escaped_before)
      out.uncertain.push_back(id);
  }
  out.accepted = TokenSet::from_bits(std::move(accepted), v.n_rows());
  return out;
}

std::shared_ptr<const StateMask> TokenGrammar::mask(int32_t state) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (masks_[state]) return masks_[state];
  }
  auto m = std::make_shared<const StateMask>(compute_mask(state));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!masks_[state]) masks_[state] = std::move(m);
  return masks_[state];
}

}  // namespace sluice::grammar
