// Draft tokens for speculative decoding and the cost-aware drafting policy. A drafter proposes
// tokens that may follow the context; the generation loop verifies them with the pending token in
// one batched forward pass (MoE experts are then read once for the union of the rows) and keeps
// the prefix the sampler agrees with. Drafting never changes what is generated, only how many
// forward passes it takes — and what they cost.
#pragma once

#include <array>
#include <cstdint>
#include <span>
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

// Decides whether and how much to draft from what drafting has cost and earned so far. It
// measures the seconds of one-row passes (t0) and of steps with k drafts (for each k drafted so
// far), and estimates the per-token acceptance `a` separately for each n-gram match length (a
// geometric model: drafts stand with probability a each until the first rejection). A step with k
// drafts then yields E(k) = 1 + a + … + a^k tokens at cost(k) one-row passes: measured where k
// was drafted, else scaled from the nearest measured k as if every drafted row cost the same
// (pessimistic above it: a step's fixed part — a verify pass at all, an MTP block's catch-up —
// is spread over more rows as k grows). It drafts the k that maximises E(k)/cost(k), and nothing
// unless that beats plain decoding by kMinGain. In RAM a verify row costs most of a one-row
// pass, so only long, reliable drafts pay; with streamed experts the rows share the expert reads
// and drafting pays sooner. The first step with drafts drafts `min` tokens to measure; it runs
// cold (an MTP block first catches up on the prompt), so the next sample at that k replaces it.
// Declined candidates are probed after 1, 2, 4 … kMaxPause declines (the interval doubles after
// each rejected probe, and starts over once drafting pays again or after a probe that stood while
// drafts that stand would pay), so that estimates follow the text. A probe drafts `min` tokens,
// twice as many as the last one after each probe that stood (up to `max`), so the cost of long
// drafts is measured rather than extrapolated once short ones keep standing.
class DraftPolicy {
 public:
  static constexpr int kMaxPause = 64;
  static constexpr double kMinGain = 1.05;
  explicit DraftPolicy(const DraftOptions& o);

  // Tokens to draft of `available` candidates whose suffix matched `match` tokens (0: none).
  int choose(int match, int available);
  // After each decode pass: the drafts it verified (0 for a one-row pass), how many stood, and
  // the pass's seconds (negative: not measured).
  void record(int drafted, int accepted, double seconds);

  double acceptance(int match) const;  // the current per-token estimate
  double cost(int k) const;            // a pass with k drafts, in one-row passes

 private:
  struct Acceptance {
    double accepted = 1, stops = 1;  // decayed counts; the prior is a = 0.5
  };
  int min_, max_;
  bool adaptive_;
  std::array<Acceptance, kNgramMax + 1> by_match_{};
  double t0_ = 0;  // seconds of a one-row pass (moving average)
  int n_t0_ = 0;   // one-row passes measured
  // Seconds of a step with k drafts (moving average) and the steps measured, by k.
  std::array<double, kMaxDraft + 1> step_{};
  std::array<int, kMaxDraft + 1> n_step_{};
  int last_match_ = 0;    // match length of the drafts in flight
  bool probing_ = false;  // the drafts in flight are a probe
  int declined_ = 0;      // candidates declined since the last probe
  int probe_every_ = 1;
  int probe_k_;  // drafts of the next probe

  bool step_known() const;  // a step with drafts has been measured
};

}  // namespace sluice
