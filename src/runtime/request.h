// One request's generation state, shared by Session::generate and the batch scheduler so the
// rules that decide what a sampled token means are written once: sampling (one conversion from
// SamplingOptions), UTF-8-safe token text, stop strings, the length and end-of-generation rules,
// and how much of a cached context a new prompt may reuse.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/timer.h"
#include "grammar/token_grammar.h"
#include "runtime/draft.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

SamplingParams sampling_params(const SamplingOptions& o);

// Tokens of `prompt` that can be served from `cached` (the evaluated context of a KV sequence):
// their common prefix, capped one short of the prompt so its last token is evaluated again (its
// logits start generation).
int reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt);

// Withholds generated text that could be the start of a stop string, and reports a match.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what is safe to emit (never part of a stop string).
  std::string push(const std::string& text);
  // End of generation: returns any withheld text.
  std::string flush(const std::string& text);
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
};

// The state of one request from its first sampled token to its final result. Callers evaluate
// tokens and time the phases; everything that decides what a token means happens here.
class Generation {
 public:
  // `prompt` primes the sampler's penalties; `n_reused` of its tokens came from a cached prefix.
  // `grammar` (GenerateOptions::grammar compiled for this vocabulary; null: none) constrains
  // every token: disallowed ones are masked before sampling (so top-k/p, greedy and logprobs see
  // the masked distribution), drafts stop at the first it refuses, and the generation ends with
  // kGrammar once the grammar is complete and nothing can follow.
  // `policy` (null: one of its own) is the DraftPolicy the caller keeps across its requests
  // (DraftPolicy::kept); it must outlive the generation.
  Generation(const Tokenizer& tokenizer, const GenerateOptions& options, std::span<const int32_t> prompt,
             int n_reused, std::shared_ptr<const grammar::TokenGrammar> grammar = nullptr,
             DraftPolicy* policy = nullptr);

  // Before sampling: true (and finished with kLength) once max_tokens are generated or the
  // context is full (`n_used` of `n_ctx` positions, the token to sample included).
  bool limit_reached(int n_used, int n_ctx);

  struct Sampled {
    int32_t token = -1;
    std::string text;      // complete UTF-8, stop strings withheld
    bool emitted = false;  // false for an end-of-generation token, which has no text
  };
  // Samples the next token; finishes on end of generation, a stop string, a completed grammar or
  // max_tokens. A grammar that allows no token here (the vocabulary cannot spell what it needs)
  // finishes with kLength and returns token −1.
  Sampled sample(std::span<const float> logits);
  // Takes `token` as the next one, chosen elsewhere (the last pipeline stage sampled it): the
  // same accounting as sample() without the sampling. `logits` (empty on a stage without them)
  // give the token's log-probabilities when the request asks for them.
  Sampled accept(int32_t token, std::span<const float> logits = {});
  // A pipeline stage without logits: true, and finished with kLength, when the grammar allows no
  // token here (sample() on the last stage then finished the same way without a token).
  bool grammar_blocked();
  // Log-probabilities recorded since the previous call (GenerateOptions::logprobs ≥ 0).
  std::vector<TokenLogprob> take_logprobs();

  // Speculative decoding, the one loop run, chat and serve share:
  //   drafts = propose(ctx)             ctx.back() is the pending token (sampled, not evaluated)
  //   evaluate the pending token and the drafts in one forward pass, logits for every row
  //   step = take(rows, drafts, ...)   samples tokens in order while they match the drafts
  //   keep KV positions < n_used + step.n_accepted, append step.tokens to the context
  // Draft tokens for the next forward pass (none when drafting is off, no candidate of at least
  // DraftOptions::min tokens exists, or DraftPolicy finds they would not pay), limited to the
  // context and max_tokens. Times the step from here to the end of take() for the policy.
  // `mtp` (empty: none) drafts up to k tokens from the model's MTP block. kMtp drafts only from it
  // (nothing without it), kNgram only by lookup, and kAuto offers both to DraftPolicy, which
  // takes whichever pays more at each step.
  using MtpSource = std::function<std::vector<int32_t>(int k)>;
  std::vector<int32_t> propose(std::span<const int32_t> ctx, int n_ctx, const MtpSource& mtp = {});
  struct Step {
    std::vector<int32_t> tokens;  // sampled this step: the accepted drafts, then one more (unless finished)
    int n_accepted = 0;           // drafts that stood
  };
  // `logits`: (drafts.size() + 1) rows of n_vocab, row i after the pending token and drafts[0, i).
  // `n_used`: context positions before this step's tokens (the pending token included). Applies
  // limit_reached before each token and calls `emit` for each emitted one (false: cancel).
  Step take(std::span<const float> logits, std::span<const int32_t> drafts, int n_used, int n_ctx,
            const std::function<bool(const Sampled&)>& emit);
  // take() on a pipeline stage without logits: the step's one token, sampled by the last stage,
  // goes through accept(), and the step counts in n_steps as on the last stage.
  Step take_sampled(int32_t token, const std::function<bool(const Sampled&)>& emit);
  // The caller stops the request (client gone, callback refused, timeout).
  void cancel();

  bool finished() const { return finished_; }
  // Ends the request: returns the text still withheld (flushed only when it ended by length or
  // end of generation; a stop string or a cancellation drops it) and hands over the result.
  GenerateResult finish(std::string* tail);

 private:
  void end(FinishReason reason);
  // `logits` masked by the grammar (themselves without one); empty, and finished, when the
  // grammar allows no token.
  std::span<const float> constrain(std::span<const float> logits);

  const Tokenizer& tokenizer_;
  const GenerateOptions options_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  GenerateResult result_;
  bool finished_ = false;
  size_t logprobs_taken_ = 0;
  bool drafting_ = false;
  std::unique_ptr<DraftPolicy> own_policy_;  // when the caller keeps none (on the heap: moves keep it)
  DraftPolicy* draft_policy_;
  Timer pass_timer_;     // from propose() to the end of take(): one decode step
  bool timing_ = false;  // propose() started pass_timer_ for the step take() now ends
  std::optional<grammar::GrammarMatcher> grammar_;
  std::vector<float> masked_;
};

}  // namespace sluice
