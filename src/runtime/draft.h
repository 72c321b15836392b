// Draft tokens for speculative decoding and the cost-aware drafting policy. A drafter proposes
// tokens that may follow the context; the generation loop verifies them with the pending token in
// one batched forward pass (MoE experts are then read once for the union of the rows) and keeps
// the prefix the sampler agrees with. Drafting never changes what is generated, only how many
// forward passes it takes — and what they cost.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

// Fails (sluice::Error naming the flag) unless 0 ≤ min ≤ max ≤ kMaxDraft.
inline constexpr int kMaxDraft = 64;
void check_draft_options(const DraftOptions& o);

// Suffix lengths prompt lookup tries, longest first. A 2-token match is the least a draft may
// rest on; whether its drafts pay is for DraftPolicy to learn.
inline constexpr int kNgramMax = 4;
inline constexpr int kNgramMin = 2;
// MTP drafts have their own acceptance estimate in DraftPolicy, under a "match length" below the
// n-gram ones.
inline constexpr int kMtpMatch = 1;

struct NgramDraft {
  std::vector<int32_t> tokens;
  int match = 0;  // length of the matched suffix (kNgramMin..kNgramMax); 0: no draft
};
// Prompt lookup: finds the latest earlier occurrence of the context's last n tokens (n from
// kNgramMax down to kNgramMin) and proposes the `n_max` tokens that followed it, continuing the
// cycle from that occurrence to the end when the context ends first.
NgramDraft ngram_draft(std::span<const int32_t> ctx, int n_max);

// A drafter's offer for the next step: the match length its drafts rest on (kMtpMatch for the MTP
// block, kNgramMin..kNgramMax for prompt lookup, 0: no candidate) and how many tokens it can
// propose.
struct DraftOffer {
  int match = 0;
  int available = 0;
};
// What DraftPolicy chose: draft k tokens from the offer with this match length (k = 0: decode one
// token).
struct DraftChoice {
  int match = 0;
  int k = 0;
};

// Decides whether, from which drafter and how much to draft, from what drafting has cost and
// earned so far. It measures the seconds of one-row passes (t0) and, for each drafter apart (an
// MTP draft costs a pass of the block and the head; a prompt-lookup draft costs nothing), of steps
// with k drafts (for each k drafted so far), and estimates the per-token acceptance `a`
// separately for each match length (a geometric model: drafts stand with probability a each
// until the first rejection). A step with k drafts then yields E(k) = 1 + a + … + a^k tokens at
// cost(k) one-row passes: measured where k was drafted, else scaled from the nearest measured k
// as if every drafted row cost the same (pessimistic above it: a step's fixed part — a verify
// pass at all, an MTP block's catch-up — is spread over more rows as k grows). Lengths above
// twice the longest measured are not considered: one step within noise of a one-row pass would
// otherwise make every drafted row look free. Of the offers it
// takes the drafter and k that maximise E(k)/cost(k), and nothing unless that beats plain
// decoding by kMinGain: under `--draft auto` a file's MTP block drafts where it pays, repeated
// text is drafted by lookup, and free text that neither predicts well is decoded plainly. In RAM
// a verify row costs most of a one-row pass, so only long, reliable drafts pay; with streamed
// experts the rows share the expert reads and drafting pays sooner. A drafter's first drafting
// step drafts `min` tokens to measure; it runs cold (an MTP block first catches up on the
// prompt), so the next sample at that k replaces it. A sample more than kOutlier times the
// running mean (a pass the OS preempted) moves it as one of kOutlier times the mean would, so one
// stall does not make every draft look cheap for the rest of the request. Declined drafters are
// probed after 1, 2, 4 … kMaxPause declines each (the interval doubles after each rejected probe,
// halves after a probe that stood while drafts that stand would pay, and starts over once drafting
// pays again), so that estimates follow the text; and only while what its probes lost (their time
// beyond plain passes for the tokens they gave, its cold first step included) and what the next
// is expected to lose stay within 1/kProbeShare of the time measured: an unmeasured MTP block,
// expected to lose about a pass, is not tried before kProbeShare passes have run. A
// probe drafts `min` tokens, twice as many as the last one after each probe that stood (up to
// `max`), so the cost of long drafts is measured rather than extrapolated once short ones keep
// standing. Not adaptive (DraftOptions::adaptive false, `--draft-fixed`), it drafts every offer's
// candidates up to `max` at every step, the MTP block's when it offers, with no warm-up, pause or
// budget: a fixed length for measurements and tests, whatever the timings.
class DraftPolicy {
 public:
  static constexpr int kMaxPause = 64;
  static constexpr double kMinGain = 1.05;
  static constexpr double kOutlier = 2.0;
  static constexpr double kProbeShare = 40;
  explicit DraftPolicy(const DraftOptions& o);
  // The policy a session (or a scheduler slot) keeps across its requests in `kept`: what drafting
  // cost and earned is a property of the model, the machine and the text so far, not of one
  // request, so the next request starts from it instead of measuring again (an MTP block's first
  // step alone catches up on the whole prompt). Made afresh when the options differ.
  static DraftPolicy& kept(std::optional<DraftPolicy>& kept, const DraftOptions& o);

  // The offer and length to draft (offers without a candidate, or with fewer than `min` tokens,
  // are passed over).
  DraftChoice choose(std::span<const DraftOffer> offers);
  // One offer: the tokens to draft of `available` candidates whose suffix matched `match` tokens.
  int choose(int match, int available);
  // After each decode pass: the drafts it verified (0 for a one-row pass), how many stood, and
  // the pass's seconds (negative: not measured).
  void record(int drafted, int accepted, double seconds);

  double acceptance(int match) const;     // the current per-token estimate
  double cost(int match, int k) const;    // a pass with k drafts from that drafter, in one-row passes
  double cost(int k) const { return cost(kNgramMax, k); }  // of n-gram drafts

 private:
  struct Acceptance {
    double accepted = 1, stops = 1;  // decayed counts; the prior is a = 0.5
  };
  // Costs and probes of one drafter (n-gram lookup or the MTP block).
  struct Drafter {
    // Seconds of a step with k drafts (moving average) and the steps measured, by k.
    std::array<double, kMaxDraft + 1> step{};
    std::array<int, kMaxDraft + 1> n_step{};
    int declined = 0;  // candidates declined since the last probe
    int probe_every = 1;
    int probe_k = 1;  // drafts of the next probe
    double loss = 0;  // seconds its probes lost against plain passes
    int longest() const;  // the longest length whose steps were measured (0: none)
    bool step_known() const { return longest() > 0; }  // a step with drafts has been measured
  };
  DraftOptions options_;
  int min_;  // options_.min, at least 1
  std::array<Acceptance, kNgramMax + 1> by_match_{};
  std::array<Drafter, 2> drafters_;  // n-gram, MTP
  double t0_ = 0;  // seconds of a one-row pass (moving average)
  double elapsed_ = 0;  // seconds of every step measured
  int n_t0_ = 0;   // one-row passes measured
  int last_match_ = 0;    // match length of the drafts in flight
  bool probing_ = false;  // the drafts in flight are a probe
  bool measuring_ = false;  // … a drafter's first, which pauses it only if they do not stand

  Drafter& drafter(int match) { return drafters_[match == kMtpMatch ? 1 : 0]; }
  const Drafter& drafter(int match) const { return drafters_[match == kMtpMatch ? 1 : 0]; }
  // The k in [min, k_max] of best expected tokens per cost for drafts of that match length, and
  // that ratio (k = 0 and 0 when none beats kMinGain).
  std::pair<int, double> best(int match, int k_max) const;
  // Seconds a step of k drafts from that drafter is expected to lose against plain passes.
  double expected_loss(int match, int k) const;
};

}  // namespace sluice
