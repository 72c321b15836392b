// One request's generation state (see request.h).
#include "runtime/request.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"

namespace sluice {

namespace {

// Log-softmax of `logits` at `token`, and the `k` most likely tokens.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = logits[token] - log_z;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  k = std::min<int>(k, static_cast<int>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  // Tokens a grammar masked out have no probability: they are not alternatives.
  for (int i = 0; i < k && std::isfinite(logits[ids[i]]); ++i) lp.top.emplace_back(ids[i], logits[ids[i]] - log_z);
  return lp;
}

}  // namespace

SamplingParams sampling_params(const SamplingOptions& o) {
  return {o.temperature,      o.top_k,          o.top_p, o.min_p, o.repeat_penalty, o.presence_penalty,
          o.frequency_penalty, o.penalty_last_n, o.seed, o.logit_bias};
}

int reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt) {
  const size_t limit = std::min(cached.size(), prompt.empty() ? 0 : prompt.size() - 1);
  size_t n = 0;
  while (n < limit && cached[n] == prompt[n]) ++n;
  return static_cast<int>(n);
}

Generation::Generation(const Tokenizer& tokenizer, const GenerateOptions& options, std::span<const int32_t> prompt,
                       int n_reused, std::shared_ptr<const grammar::TokenGrammar> grammar,
                       DraftPolicy* policy)
    : tokenizer_(tokenizer),
      options_(options),
      sampler_(sampling_params(options.sampling)),
      decoder_(tokenizer),
      stops_(options.stop),
      draft_policy_(policy) {
  if (!draft_policy_) {
    own_policy_ = std::make_unique<DraftPolicy>(options.draft);
    draft_policy_ = own_policy_.get();
  }
  // Whether MTP drafts can run is the caller's check (Session::generate, the Scheduler).
  check_draft_options(options.draft);
  drafting_ = options.draft.mode != DraftMode::kNone && options.draft.max > 0;
  for (int32_t t : prompt) sampler_.accept(t);
  if (grammar) grammar_.emplace(std::move(grammar));
  result_.n_reused = n_reused;
  result_.n_prompt = static_cast<int>(prompt.size()) - n_reused;
}

void Generation::end(FinishReason reason) {
  result_.finish = reason;
  finished_ = true;
}

bool Generation::limit_reached(int n_used, int n_ctx) {
  if (!finished_ && (static_cast<int>(result_.tokens.size()) >= options_.max_tokens || n_used >= n_ctx))
    end(FinishReason::kLength);
  return finished_;
}

std::span<const float> Generation::constrain(std::span<const float> logits) {
  if (!grammar_) return logits;
  const Timer t;
  const bool any = grammar_->mask(logits, masked_, options_.stop_at_eog);
  result_.grammar_seconds += t.seconds();
  if (any) return masked_;
  // Nothing the vocabulary can write continues the grammar: the text stays unfinished.
  end(FinishReason::kLength);
  return {};
}

bool Generation::grammar_blocked() {
  if (!grammar_) return false;
  // Any finite logits will do: only the mask's emptiness matters.
  const std::vector<float> flat(static_cast<size_t>(grammar_->n_rows()), 0.0f);
  return constrain(flat).empty();
}

Generation::Sampled Generation::sample(std::span<const float> logits) {
  const std::span<const float> row = constrain(logits);
  if (row.empty()) return {};
  return accept(sampler_.sample(row), row);
}

Generation::Sampled Generation::accept(int32_t token, std::span<const float> logits) {
  Sampled s;
  s.token = token;
  sampler_.accept(s.token);
  result_.tokens.push_back(s.token);
  if (options_.stop_at_eog && tokenizer_.is_eog(s.token)) {
    end(FinishReason::kEog);
    return s;
  }
  if (grammar_) {
    const Timer t;
    // Sampling only ever offers allowed tokens; a refusal means the stages or drafts disagree.
    if (!grammar_->accept(s.token))
      fail("grammar: token {} ('{}') does not continue the grammar after {} generated tokens", s.token,
           tokenizer_.token_bytes(s.token), result_.tokens.size() - 1);
    result_.grammar_seconds += t.seconds();
  }
  s.emitted = true;
  if (options_.logprobs >= 0 && !logits.empty())
    result_.logprobs.push_back(token_logprob(logits, s.token, options_.logprobs));
  s.text = stops_.push(decoder_.push(s.token));
  result_.text += s.text;
  if (stops_.matched()) {
    end(FinishReason::kStop);
  } else if (grammar_ && grammar_->closed()) {
    end(FinishReason::kGrammar);
  } else if (static_cast<int>(result_.tokens.size()) >= options_.max_tokens) {
    end(FinishReason::kLength);
  }
  return s;
}

std::vector<TokenLogprob> Generation::take_logprobs() {
  if (logprobs_taken_ >= result_.logprobs.size()) return {};
  std::vector<TokenLogprob> out(
      result_.logprobs.begin() + static_cast<std::ptrdiff_t>(logprobs_taken_),
      result_.logprobs.end());
  logprobs_taken_ = result_.logprobs.size();
  return out;
}

std::vector<int32_t> Generation::propose(std::span<const int32_t> ctx, int n_ctx,
                                         const MtpSource& mtp) {
  if (!drafting_ || finished_) return {};
  // The policy weighs whole steps: this lookup, the forward pass and take()'s sampling of its rows.
  pass_timer_.reset();
  timing_ = true;
  // Up to k drafts: their positions must fit the context, and with the token sampled after them
  // they must not pass max_tokens.
  const int remaining = options_.max_tokens - static_cast<int>(result_.tokens.size()) - 1;
  const int room = n_ctx - static_cast<int>(ctx.size());
  const int k_max = std::min({options_.draft.max, remaining, room});
  const DraftMode mode = options_.draft.mode;
  // The offers: prompt lookup (not under kMtp) and the MTP block (kMtp, or kAuto when the model
  // has one). The policy picks the drafter and length before the MTP block runs: each MTP draft
  // costs a pass of the block.
  NgramDraft lookup;
  std::array<DraftOffer, 2> offers;
  size_t n_offers = 0;
  if (mode != DraftMode::kMtp) {
    lookup = ngram_draft(ctx, k_max);
    offers[n_offers++] = {lookup.match, static_cast<int>(lookup.tokens.size())};
  }
  if (mtp && mode != DraftMode::kNgram) offers[n_offers++] = {kMtpMatch, k_max};
  const DraftChoice choice = draft_policy_->choose(std::span(offers.data(), n_offers));
  if (choice.k < std::max(1, options_.draft.min)) return {};
  std::vector<int32_t> drafts;
  if (choice.match == kMtpMatch) {
    drafts = mtp(choice.k);
  } else {
    drafts = std::move(lookup.tokens);
    drafts.resize(choice.k);
  }
  // A draft the grammar refuses could never be sampled: the draft ends before it.
  if (grammar_) drafts.resize(grammar_->valid_prefix(drafts, options_.stop_at_eog));
  return drafts;
}

Generation::Step Generation::take(std::span<const float> logits, std::span<const int32_t> drafts, int n_used,
                                  int n_ctx, const std::function<bool(const Sampled&)>& emit) {
  Step st;
  const size_t n_vocab = logits.size() / (drafts.size() + 1);
  ++result_.n_steps;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    if (limit_reached(n_used + static_cast<int>(i), n_ctx)) break;
    const std::span<const float> row = constrain(logits.subspan(i * n_vocab, n_vocab));
    if (row.empty()) break;
    bool accepted = false;
    const Sampled s =
        i < drafts.size() ? accept(sampler_.sample_draft(row, drafts[i], &accepted), row) : accept(sampler_.sample(row), row);
    st.tokens.push_back(s.token);
    if (accepted) ++st.n_accepted;
    if (s.emitted && emit && !emit(s)) cancel();
    if (finished_ || !accepted) break;
  }
  result_.n_drafted += static_cast<int>(drafts.size());
  result_.n_accepted += st.n_accepted;
  draft_policy_->record(static_cast<int>(drafts.size()), st.n_accepted, timing_ ? pass_timer_.seconds() : -1.0);
  timing_ = false;
  return st;
}

Generation::Step Generation::take_sampled(int32_t token, const std::function<bool(const Sampled&)>& emit) {
  Step st;
  ++result_.n_steps;
  const Sampled s = accept(token);
  st.tokens.push_back(s.token);
  if (s.emitted && emit && !emit(s)) cancel();
  return st;
}

void Generation::cancel() { end(FinishReason::kCancelled); }

GenerateResult Generation::finish(std::string* tail) {
  tail->clear();
  if (result_.finish == FinishReason::kLength || result_.finish == FinishReason::kEog ||
      result_.finish == FinishReason::kGrammar) {
    *tail = stops_.flush(decoder_.flush());
    result_.text += *tail;
  }
  return std::move(result_);
}

}  // namespace sluice
