// A grammar bound to a vocabulary, and one generation's walk through it (see token_grammar.h).
#include <algorithm>
#include <bit>
#include <limits>

#include "core/error.h"
#include "grammar/token_grammar.h"
#include "tokenizer/utf8.h"

namespace sluice::grammar {

namespace {

void collect_literals(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == Expr::Kind::kLiteral) {
    std::string s;
    for (uint32_t cp : e.text) s += utf8::encode(cp);
    out.push_back(std::move(s));
  }
  for (const Expr& x : e.items) collect_literals(x, out);
}

std::string describe_bytes(const std::vector<uint8_t>& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 16; ++i) {
    const uint8_t b = bytes[i];
    if (!out.empty()) out += ", ";
    out += b >= 0x20 && b < 0x7F ? fmt::format("'{}'", static_cast<char>(b))
                                 : fmt::format("byte 0x{:02X}", b);
  }
  if (bytes.size() > 16) out += fmt::format(" (and {} more)", bytes.size() - 16);
  return out;
}

}  // namespace

TokenGrammar::TokenGrammar(std::string_view gbnf, std::shared_ptr<const VocabTrie> vocab)
    : TokenGrammar(parse_gbnf(gbnf), std::move(vocab)) {}

TokenGrammar::TokenGrammar(const Grammar& g, std::shared_ptr<const VocabTrie> vocab)
    : automaton_(g), vocab_(std::move(vocab)) {
  masks_.resize(automaton_.n_states());
  std::vector<std::string> literals;
  for (const Rule& r : g.rules) collect_literals(r.body, literals);
  for (int32_t id : vocab_->control()) {
    const std::string& text = vocab_->bytes(id);
    if (std::any_of(literals.begin(), literals.end(),
                    [&](const std::string& l) { return l.find(text) != std::string::npos; }))
      controls_.push_back(id);
  }
  // A grammar no token can start would stall at the first step.
  const MatchState start = start_state(automaton_);
  for (const Stack& s : start.stacks) {
    const auto m = mask(s.back());
    if (m->accepted.size() > 0) return;
    MatchState one{{s}, false};
    for (int32_t id : m->uncertain)
      if (allows(one, id)) return;
  }
  if (start.can_end) return;
  std::vector<uint8_t> first;
  for (const Stack& s : start.stacks)
    for (uint8_t b : automaton_.bytes_from(s.back())) first.push_back(b);
  std::sort(first.begin(), first.end());
  first.erase(std::unique(first.begin(), first.end()), first.end());
  fail(
      "grammar: no token of the model's vocabulary can begin the text it allows (which starts with "
      "{})",
      describe_bytes(first));
}

bool TokenGrammar::matchable(int32_t token) const {
  if (token < 0 || token >= vocab_->n_rows() || vocab_->bytes(token).empty()) return false;
  // Both lists are in id order.
  const auto& control = vocab_->control();
  return !std::binary_search(control.begin(), control.end(), token) ||
         std::binary_search(controls_.begin(), controls_.end(), token);
}

bool TokenGrammar::allows(const MatchState& s, int32_t token) const {
  return matchable(token) && !advance(automaton_, s, vocab_->bytes(token)).dead();
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar)
    : grammar_(std::move(grammar)), state_(start_state(grammar_->automaton())) {}

bool GrammarMatcher::is_eog(int32_t token) const {
  const auto& eog = grammar_->vocab().eog();
  return std::find(eog.begin(), eog.end(), token) != eog.end();
}

bool GrammarMatcher::mask(std::span<const float> logits, std::vector<float>& out, bool eog) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  bool any = false;
  const std::vector<Stack>& stacks = state_.stacks;
  std::shared_ptr<const StateMask> single;
  if (stacks.size() == 1) single = grammar_->mask(stacks[0].back());
  if (single && (stacks[0].size() == 1 || single->uncertain.empty())) {
    // One stack whose tokens do not depend on its callers: the state's own set.
    single->accepted.apply(logits, out);
    any = single->accepted.size() > 0;
  } else if (stacks.empty()) {
    out.assign(logits.size(), kOff);
  } else {
    const size_t words = (logits.size() + 63) / 64;
    auto hit = std::find_if(cache_.begin(), cache_.end(),
                            [&](const Cached& c) { return c.stacks == stacks; });
    if (hit == cache_.end()) {
      bits_.assign(words, 0);
      for (const Stack& s : stacks) {
        const auto m = grammar_->mask(s.back());
        m->accepted.add_to(bits_);
        if (s.size() == 1) continue;
        const MatchState one{{s}, false};
        for (int32_t id : m->uncertain)
          if (!(bits_[id >> 6] >> (id & 63) & 1) && grammar_->allows(one, id))
            bits_[id >> 6] |= uint64_t{1} << (id & 63);
      }
      constexpr size_t kCached = 8;
      if (cache_.size() < kCached) {
        cache_.push_back({stacks, bits_});
        hit = cache_.end() - 1;
      } else {
        hit = cache_.begin() + static_cast<std::ptrdiff_t>(cache_next_++ % kCached);
        *hit = {stacks, bits_};
      }
    }
    size_t count = 0;
    for (uint64_t w : hit->bits) count += static_cast<size_t>(std::popcount(w));
    apply_bits(logits, hit->bits, count, out);
    any = count > 0;
  }
  if (eog && state_.can_end)
    for (int32_t id : grammar_->vocab().eog())
      if (static_cast<size_t>(id) < logits.size()) {
        out[id] = logits[id];
        any = true;
      }
  return any;
}

bool GrammarMatcher::accept(int32_t token) {
  if (!grammar_->matchable(token)) return false;
  MatchState next = advance(grammar_->automaton(), state_, grammar_->vocab().bytes(token));
  if (next.dead()) return false;
  state_ = std::move(next);
  return true;
}

size_t GrammarMatcher::valid_prefix(std::span<const int32_t> tokens, bool eog) const {
  MatchState s = state_;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (is_eog(t)) return eog && s.can_end ? i + 1 : i;
    if (!grammar_->matchable(t)) return i;
    s = advance(grammar_->automaton(), s, grammar_->vocab().bytes(t));
    if (s.dead()) return i;
  }
  return tokens.size();
}

}  // namespace sluice::grammar
