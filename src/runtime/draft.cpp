// n-gram drafts and the cost-aware drafting policy (see draft.h).
#include "runtime/draft.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace sluice {

namespace {
// Weight of the newest sample in the moving averages and decay of the acceptance counts: recent
// passes and recent text count most.
constexpr double kTimeWeight = 0.25;
constexpr double kCountDecay = 0.9;
// One-row passes measured before the first draft: the first decode pass runs cold.
constexpr int kWarmupPasses = 2;

// E(k) = 1 + a + … + a^k: the tokens a step with k drafts yields, each draft standing with
// probability a until the first rejection.
double expected_tokens(double a, int k) {
  double expected = 1, a_j = 1;
  for (int j = 1; j <= k; ++j) expected += a_j *= a;
  return expected;
}
}  // namespace

void check_draft_options(const DraftOptions& o) {
  if (o.max < 0 || o.max > kMaxDraft)
    fail("--draft-max {}: expected 0 to {} tokens", o.max, kMaxDraft);
  if (o.min < 0 || o.min > o.max)
    fail("--draft-min {}: expected 0 to --draft-max ({})", o.min, o.max);
}

NgramDraft ngram_draft(std::span<const int32_t> ctx, int n_max) {
  const int n_ctx = static_cast<int>(ctx.size());
  if (n_max <= 0) return {};
  for (int n = std::min(kNgramMax, n_ctx - 1); n >= kNgramMin; --n) {
    const std::span<const int32_t> suffix = ctx.subspan(n_ctx - n);
    // Latest occurrence first: recent text predicts the continuation best.
    for (int start = n_ctx - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), ctx.begin() + start)) continue;
      // The suffix recurs `period` tokens back: the text since then repeats, so the draft runs
      // through the context's end and on around that cycle (a greedy loop shorter than n_max
      // still fills the draft).
      const int from = start + n;
      const int period = n_ctx - from;
      NgramDraft d{std::vector<int32_t>(static_cast<size_t>(n_max)), n};
      for (int i = 0; i < n_max; ++i) d.tokens[i] = ctx[from + i % period];
      return d;
    }
  }
  return {};
}

DraftPolicy::DraftPolicy(const DraftOptions& o)
    : options_(o), min_(std::max(1, o.min)) {
  for (Drafter& d : drafters_) d.probe_k = min_;
}

DraftPolicy& DraftPolicy::kept(std::optional<DraftPolicy>& kept, const DraftOptions& o) {
  const DraftOptions& k = kept ? kept->options_ : o;
  if (!kept || k.mode != o.mode || k.min != o.min || k.max != o.max || k.adaptive != o.adaptive) kept.emplace(o);
  return *kept;
}

double DraftPolicy::acceptance(int match) const {
  const Acceptance& a = by_match_[std::clamp(match, 0, kNgramMax)];
  return a.accepted / (a.accepted + a.stops);
}

int DraftPolicy::Drafter::longest() const {
  for (int k = kMaxDraft; k > 0; --k)
    if (n_step[k] > 0) return k;
  return 0;
}

double DraftPolicy::cost(int match, int k) const {
  const Drafter& d = drafter(match);
  k = std::clamp(k, 0, kMaxDraft);
  if (k == 0 || t0_ <= 0 || !d.step_known()) return 1.0;
  // At least a one-row pass: a step faster than the average one-row pass is noise.
  if (d.n_step[k] > 0) return std::max(1.0, d.step[k] / t0_);
  // The nearest measured k (the lower one on a tie), its drafted rows' cost scaled to k rows.
  int near = 0;
  for (int j = 1; near == 0; ++j) {
    if (k - j >= 1 && d.n_step[k - j] > 0)
      near = k - j;
    else if (k + j <= kMaxDraft && d.n_step[k + j] > 0)
      near = k + j;
  }
  return 1.0 + std::max(0.0, d.step[near] / t0_ - 1.0) * k / near;
}

std::pair<int, double> DraftPolicy::best(int match, int k_max) const {
  const double a = acceptance(match);
  // At most twice the longest length measured: longer drafts are reached by doubling, each length
  // measured on the way, never on an extrapolation from one short step (whose time, within noise
  // of a one-row pass, would make every drafted row look free).
  k_max = std::min(k_max, std::max(min_, 2 * drafter(match).longest()));
  std::pair<int, double> best{0, 0.0};
  for (int k = 1; k <= k_max; ++k) {
    const double gain = expected_tokens(a, k) / cost(match, k);
    if (k >= min_ && gain > kMinGain && gain > best.second) best = {k, gain};
  }
  return best;
}

double DraftPolicy::expected_loss(int match, int k) const {
  const Drafter& d = drafter(match);
  // Before its first step: lookup's drafts cost only their verified rows, while an MTP draft runs
  // the block and its head besides (and first catches up on the context): about a pass more.
  if (!d.step_known()) return match == kMtpMatch ? t0_ : 0.0;
  return t0_ * std::max(0.0, cost(match, k) - expected_tokens(acceptance(match), k));
}

int DraftPolicy::choose(int match, int available) {
  const DraftOffer offer{match, available};
  return choose(std::span<const DraftOffer>(&offer, 1)).k;
}

DraftChoice DraftPolicy::choose(std::span<const DraftOffer> offers) {
  std::vector<DraftOffer> open;  // offers with at least `min` candidates, capped at max
  for (const DraftOffer& o : offers)
    if (o.match > 0 && std::min(o.available, options_.max) >= min_)
      open.push_back({o.match, std::min(o.available, options_.max)});
  if (open.empty()) return {};
  if (!options_.adaptive) {
    // --draft-fixed: every candidate, from the MTP block when it is offered (the file's own
    // drafter), whatever the timings. record() still measures, under the drafter that drafted.
    const auto mtp = std::find_if(open.begin(), open.end(), [](const DraftOffer& o) { return o.match == kMtpMatch; });
    const DraftOffer& o = mtp != open.end() ? *mtp : open.front();
    last_match_ = o.match;
    return {o.match, o.available};
  }
  if (n_t0_ < kWarmupPasses) return {};
  probing_ = measuring_ = false;
  // The best paying offer of the drafters already measured.
  DraftChoice choice;
  double best_gain = 0;
  for (const DraftOffer& o : open) {
    if (!drafter(o.match).step_known()) continue;
    const auto [k, gain] = best(o.match, o.available);
    if (k > 0 && gain > best_gain) best_gain = gain, choice = {o.match, k};
  }
  if (choice.k > 0) {
    Drafter& d = drafter(choice.match);
    d.declined = 0;
    d.probe_every = 1;
    last_match_ = choice.match;
    return choice;
  }
  // Else a drafter whose drafting steps have not been timed drafts the fewest: it measures what
  // its drafts cost, at the least risk (and only now: while lookup pays on repeated text, the
  // MTP block's first step, which catches up on the whole prompt, is not spent). Each drafter
  // measures and probes only while what its own probes lost, and what this one is expected to
  // lose, stay within 1/kProbeShare of the time: an MTP block whose probes cost several passes
  // does not stop lookup from probing, and a short request never pays for a block's first step.
  const auto within_budget = [&](const DraftOffer& o, int k) {
    return drafter(o.match).loss + expected_loss(o.match, k) <= elapsed_ / kProbeShare;
  };
  for (const DraftOffer& o : open)
    if (!drafter(o.match).step_known() && within_budget(o, min_)) {
      probing_ = measuring_ = true;  // a probe too, should its drafts not stand
      last_match_ = o.match;
      return {o.match, min_};
    }
  // Nothing pays: each declined drafter is probed when its pause is over.
  for (const DraftOffer& o : open) {
    Drafter& d = drafter(o.match);
    const int k = std::min(d.probe_k, o.available);
    if (!within_budget(o, k) || ++d.declined < d.probe_every) continue;
    d.declined = 0;
    probing_ = true;
    last_match_ = o.match;
    return {o.match, k};
  }
  return {};
}

void DraftPolicy::record(int drafted, int accepted, double seconds) {
  // A moving average whose new sample counts at most as kOutlier times the mean would.
  auto average = [](double mean, double sample) {
    return mean + kTimeWeight * (std::min(sample, kOutlier * mean) - mean);
  };
  Drafter& d = drafter(last_match_);
  if (seconds >= 0) {
    elapsed_ += seconds;
    if (drafted == 0) {
      t0_ = n_t0_ == 0 ? seconds : average(t0_, seconds);
      ++n_t0_;
    } else if (n_t0_ > 0 && drafted <= kMaxDraft) {
      // The first sample at k may be cold; the second replaces it, later ones average in. A
      // length's first sample, once the drafter has other lengths measured, counts at most as
      // kOutlier times what they predict for it: one stalled step would otherwise price that
      // length out for the rest of the request, since it is never drafted to be measured again.
      double& step = d.step[drafted];
      const double sample =
          d.n_step[drafted] == 0 && d.step_known() ? std::min(seconds, kOutlier * t0_ * cost(last_match_, drafted)) : seconds;
      step = d.n_step[drafted] <= 1 ? sample : average(step, sample);
      ++d.n_step[drafted];
    }
  }
  if (drafted <= 0) return;
  Acceptance& a = by_match_[std::clamp(last_match_, 0, kNgramMax)];
  a.accepted = a.accepted * kCountDecay + accepted;
  a.stops = a.stops * kCountDecay + (accepted < drafted ? 1 : 0);
  // A probe that stood raised the estimate and doubles the next probe's drafts. When drafts that
  // all stand would pay at the estimated cost, it also halves the pause, so text that turned
  // predictable (a greedy loop, a quoted passage) wins drafting back within a few probes. A
  // rejected probe, or one whose drafts cannot pay even when they stand (a drafter costing as
  // much as the pass it saves), doubles the pause. Drafting resumes once the estimate says it
  // pays. Whatever the pauses, choose() probes only while the probes' losses stay within
  // 1/kProbeShare of the time: on free text, where short drafts often stand but drafting does
  // not pay, and for an MTP block whose streamed experts make a probe cost several passes.
  const bool stood = accepted == drafted;
  // A probe's loss: its time beyond what plain passes would have taken for the tokens it gave.
  // A drafter's first step counts too, cold as it may run (an MTP block's catches up on the whole
  // prompt): that is what drafting cost the request, and it bars the drafter until the request
  // has run kProbeShare times as long.
  if (probing_ && seconds >= 0) d.loss += std::max(0.0, seconds - (accepted + 1) * t0_);
  if (probing_ && !(measuring_ && stood)) {
    d.probe_k = stood ? std::min(options_.max, 2 * d.probe_k) : min_;
    const bool could_pay = (options_.max + 1) / cost(last_match_, options_.max) > kMinGain;
    d.probe_every = stood && could_pay ? std::max(1, d.probe_every / 2) : std::min(kMaxPause, d.probe_every * 2);
  }
}

}  // namespace sluice
