// Grammar compilation (see automaton.h): subset construction per rule over byte classes, then the
// checks and tables matching relies on — states that can never finish are cut, rules that can
// match nothing are noted, left recursion is refused, and each state's closure is computed once.
#include "grammar/automaton.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace sluice::grammar {

namespace {

// Entries of the transition table (states × byte classes) a grammar may need.
constexpr size_t kMaxTableEntries = 32u << 20;
// Stacks one closure may hold: more means a grammar so ambiguous that matching would crawl.
constexpr size_t kMaxClosureStacks = 4096;

struct SetHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    size_t h = v.size();
    for (int32_t x : v) h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(x);
    return h;
  }
};

}  // namespace

Automaton::Automaton(const Grammar& g) {
  const Nfas nfas = build_nfas(g);
  std::vector<int> sources;
  for (const Nfas::Rule& r : nfas.rules) {
    sources.push_back(r.source);
    rule_names_.push_back(g.rules[r.source].name);
  }
  determinize(nfas);
  trim();
  check_left_recursion(g, sources);
  build_closures();
}

void Automaton::determinize(const Nfas& nfas) {
  std::array<bool, 257> cut{};
  cut[0] = true;
  for (const NfaState& st : nfas.states)
    for (const NfaState::Bytes& e : st.bytes) cut[e.lo] = cut[e.hi + 1] = true;
  int c = -1;
  for (int b = 0; b < 256; ++b) {
    if (cut[b]) ++c;
    class_of_[b] = static_cast<uint8_t>(c);
  }
  n_classes_ = c + 1;

  // Empty-move closure of a set of NFA states, sorted.
  std::vector<uint32_t> seen(nfas.states.size(), 0);
  uint32_t generation = 0;
  auto close = [&](std::vector<int32_t> set) {
    ++generation;
    std::vector<int32_t> todo = set;
    set.clear();
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      if (seen[s] == generation) continue;
      seen[s] = generation;
      set.push_back(s);
      for (int32_t t : nfas.states[s].eps) todo.push_back(t);
    }
    std::sort(set.begin(), set.end());
    return set;
  };

  for (size_t r = 0; r < nfas.rules.size(); ++r) {
    const Nfas::Rule& rule = nfas.rules[r];
    std::unordered_map<std::vector<int32_t>, int32_t, SetHash> ids;
    std::vector<std::vector<int32_t>> sets;
    const int32_t first = n_states();
    auto intern = [&](std::vector<int32_t> set) {
      auto [it, added] = ids.emplace(set, n_states());
      if (added) {
        if ((static_cast<size_t>(n_states()) + 1) * n_classes_ > kMaxTableEntries)
          fail(
              "grammar: too large (more than {} automaton states); use fewer or smaller "
              "repetitions",
              kMaxTableEntries / n_classes_);
        trans_.resize(trans_.size() + n_classes_, -1);
        final_.push_back(0);
        calls_.emplace_back();
        rule_of_.push_back(static_cast<int32_t>(r));
        sets.push_back(std::move(set));
      }
      return it->second;
    };
    rule_start_.push_back(intern(close({rule.start})));
    std::vector<std::vector<int32_t>> targets(n_classes_);
    for (int32_t k = first; k < n_states(); ++k) {
      const std::vector<int32_t> set = sets[k - first];
      for (auto& t : targets) t.clear();
      std::map<int32_t, std::vector<int32_t>> calls;
      bool fin = false;
      for (int32_t s : set) {
        fin = fin || s == rule.final;
        for (const NfaState::Bytes& e : nfas.states[s].bytes)
          for (int cl = class_of_[e.lo]; cl <= class_of_[e.hi]; ++cl) targets[cl].push_back(e.to);
        for (const NfaState::Call& call : nfas.states[s].calls) calls[call.rule].push_back(call.to);
      }
      final_[k] = fin;
      for (int cl = 0; cl < n_classes_; ++cl)
        if (!targets[cl].empty()) {
          const int32_t to = intern(close(targets[cl]));
          trans_[static_cast<size_t>(k) * n_classes_ + cl] = to;
        }
      for (auto& [callee, tos] : calls) {
        const int32_t ret = intern(close(tos));
        calls_[k].emplace_back(callee, ret);
      }
    }
  }
}

void Automaton::trim() {
  // Productive states can still reach the end of their rule; found backwards from final states.
  const int n = n_states();
  std::vector<std::vector<int32_t>> back(n), call_deps(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int cl = 0; cl < n_classes_; ++cl)
      if (const int32_t t = trans_[static_cast<size_t>(s) * n_classes_ + cl]; t >= 0)
        back[t].push_back(s);
    for (auto [callee, ret] : calls_[s]) {
      call_deps[rule_start_[callee]].push_back(s);
      call_deps[ret].push_back(s);
    }
  }
  std::vector<uint8_t> productive(n, 0);
  std::vector<int32_t> todo;
  for (int32_t s = 0; s < n; ++s)
    if (final_[s]) {
      productive[s] = 1;
      todo.push_back(s);
    }
  auto call_productive = [&](int32_t s) {
    for (auto [callee, ret] : calls_[s])
      if (productive[rule_start_[callee]] && productive[ret]) return true;
    return false;
  };
  while (!todo.empty()) {
    const int32_t t = todo.back();
    todo.pop_back();
    for (int32_t s : back[t])
      if (!productive[s]) productive[s] = 1, todo.push_back(s);
    for (int32_t s : call_deps[t])
      if (!productive[s] && call_productive(s)) productive[s] = 1, todo.push_back(s);
  }
  if (!productive[root_start()])
    fail(
        "grammar: it matches no text at all: every way through 'root' needs a rule that never "
        "ends");
  for (int32_t s = 0; s < n; ++s) {
    for (int cl = 0; cl < n_classes_; ++cl) {
      int32_t& t = trans_[static_cast<size_t>(s) * n_classes_ + cl];
      if (t >= 0 && !productive[t]) t = -1;
    }
    std::erase_if(calls_[s], [&](const std::pair<int32_t, int32_t>& c) {
      return !productive[rule_start_[c.first]] || !productive[c.second];
    });
  }
  consumes_.assign(n, 0);
  for (int32_t s = 0; s < n; ++s)
    for (int cl = 0; cl < n_classes_ && !consumes_[s]; ++cl)
      consumes_[s] = trans_[static_cast<size_t>(s) * n_classes_ + cl] >= 0;

  // A rule is nullable when its start reaches its end through calls of nullable rules only.
  nullable_.assign(rule_start_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rule_start_.size(); ++r) {
      if (nullable_[r]) continue;
      std::vector<int32_t> todo_states{rule_start_[r]}, seen;
      while (!todo_states.empty() && !nullable_[r]) {
        const int32_t s = todo_states.back();
        todo_states.pop_back();
        if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
        seen.push_back(s);
        if (final_[s]) nullable_[r] = 1, changed = true;
        for (auto [callee, ret] : calls_[s])
          if (nullable_[callee]) todo_states.push_back(ret);
      }
    }
  }
}

void Automaton::check_left_recursion(const Grammar& g, const std::vector<int>& sources) {
  // Rule r calls q before consuming anything when q is called from a state r reaches from its
  // start through nullable calls alone.
  const size_t n = rule_start_.size();
  std::vector<std::vector<int32_t>> first_calls(n);
  for (size_t r = 0; r < n; ++r) {
    std::vector<int32_t> todo{rule_start_[r]}, seen;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      for (auto [callee, ret] : calls_[s]) {
        first_calls[r].push_back(callee);
        if (nullable_[callee]) todo.push_back(ret);
      }
    }
  }
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<int32_t> path;
  std::function<void(int32_t)> visit = [&](int32_t r) {
    state[r] = 1;
    path.push_back(r);
    for (int32_t q : first_calls[r]) {
      if (state[q] == 1) {
        std::string chain;
        for (auto it = std::find(path.begin(), path.end(), q); it != path.end(); ++it)
          chain += rule_names_[*it] + " -> ";
        chain += rule_names_[q];
        fail(
            "grammar: {}: rule '{}' is left-recursive ({}): it can reach itself before matching a "
            "character; rewrite it with repetition, e.g. x ::= y (\"+\" y)*",
            source_position(g.source, g.rules[sources[q]].pos), rule_names_[q], chain);
      }
      if (state[q] == 0) visit(q);
    }
    path.pop_back();
    state[r] = 2;
  };
  for (size_t r = 0; r < n; ++r)
    if (state[r] == 0) visit(static_cast<int32_t>(r));
}

int32_t Automaton::closure_of(int32_t state, std::vector<uint8_t>& busy) {
  if (closure_index_[state] >= 0) return closure_index_[state];
  if (busy[state]) fail("grammar: rule '{}' is left-recursive", rule_names_[rule_of_[state]]);
  busy[state] = 1;
  Closure out;
  std::vector<int32_t> seen;
  std::function<void(int32_t)> visit = [&](int32_t t) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) return;
    seen.push_back(t);
    if (consumes_[t]) out.stacks.push_back({t});
    if (final_[t]) out.escaped = true;
    for (auto [callee, ret] : calls_[t]) {
      const int32_t ci = closure_of(rule_start_[callee], busy);
      for (const Stack& st : closure_[ci].stacks) {
        Stack s{ret};
        s.insert(s.end(), st.begin(), st.end());
        out.stacks.push_back(std::move(s));
      }
      if (closure_[ci].escaped) visit(ret);
    }
  };
  visit(state);
  busy[state] = 0;
  std::sort(out.stacks.begin(), out.stacks.end());
  out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
  if (out.stacks.size() > kMaxClosureStacks)
    fail("grammar: rule '{}' is too ambiguous: more than {} ways to continue from one position",
         rule_names_[rule_of_[state]], kMaxClosureStacks);
  closure_index_[state] = static_cast<int32_t>(closure_.size());
  closure_.push_back(std::move(out));
  return closure_index_[state];
}

void Automaton::build_closures() {
  const int n = n_states();
  plain_.assign(n, 0);
  for (int32_t s = 0; s < n; ++s) plain_[s] = consumes_[s] && calls_[s].empty() && !final_[s];
  closure_index_.assign(n, -1);
  std::vector<uint8_t> busy(n, 0);
  for (int32_t s = 0; s < n; ++s)
    if (!plain_[s]) closure_of(s, busy);
}

std::vector<uint8_t> Automaton::bytes_from(int32_t state) const {
  std::vector<uint8_t> out;
  for (int b = 0; b < 256; ++b)
    if (next(state, static_cast<uint8_t>(b)) >= 0) out.push_back(static_cast<uint8_t>(b));
  return out;
}

bool Automaton::expand(Stack& prefix, int32_t state, std::vector<Stack>& out) const {
  if (plain_[state]) {
    prefix.push_back(state);
    out.push_back(prefix);
    prefix.pop_back();
    return false;
  }
  const Closure& c = closure(state);
  for (const Stack& s : c.stacks) {
    Stack full = prefix;
    full.insert(full.end(), s.begin(), s.end());
    out.push_back(std::move(full));
  }
  if (!c.escaped) return false;
  if (prefix.empty()) return true;
  const int32_t ret = prefix.back();
  prefix.pop_back();
  const bool escaped = expand(prefix, ret, out);
  prefix.push_back(ret);
  return escaped;
}

}  // namespace sluice::grammar
