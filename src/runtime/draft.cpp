// n-gram drafts and the cost-aware drafting policy (see draft.h).
#include "runtime/draft.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

namespace {
// Weight of the newest sample in the moving averages and decay of the acceptance counts: recent
// passes and recent text count most.
constexpr double kTimeWeight = 0.25;
constexpr double kCountDecay = 0.9;
// One-row passes measured before the first draft: the first decode pass runs cold.
constexpr int kWarmupPasses = 2;
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
    : min_(std::max(1, o.min)), max_(o.max), adaptive_(o.adaptive), probe_k_(min_) {}

double DraftPolicy::acceptance(int match) const {
  const Acceptance& a = by_match_[std::clamp(match, 0, kNgramMax)];
  return a.accepted / (a.accepted + a.stops);
}

bool DraftPolicy::step_known() const {
  return std::any_of(n_step_.begin(), n_step_.end(), [](int n) { return n > 0; });
}

double DraftPolicy::cost(int k) const {
  k = std::clamp(k, 0, kMaxDraft);
  if (k == 0 || t0_ <= 0 || !step_known()) return 1.0;
  // At least a one-row pass: a step faster than the average one-row pass is noise.
  if (n_step_[k] > 0) return std::max(1.0, step_[k] / t0_);
  // The nearest measured k (the lower one on a tie), its drafted rows' cost scaled to k rows.
  int near = 0;
  for (int d = 1; near == 0; ++d) {
    if (k - d >= 1 && n_step_[k - d] > 0)
      near = k - d;
    else if (k + d <= kMaxDraft && n_step_[k + d] > 0)
      near = k + d;
  }
  return 1.0 + std::max(0.0, step_[near] / t0_ - 1.0) * k / near;
}

int DraftPolicy::choose(int match, int available) {
  const int k_max = std::min(available, max_);
  if (match <= 0 || k_max < min_) return 0;
  if (!adaptive_) return k_max;
  if (n_t0_ < kWarmupPasses) return 0;
  last_match_ = match;
  probing_ = false;
  // Until a step with drafts has been timed, draft the fewest: it measures what drafting costs,
  // at the least risk.
  if (!step_known()) return min_;
  const double a = acceptance(match);
  int best_k = 0;
  double best = kMinGain;
  double expected = 1, a_k = 1;  // E(k) and a^k
  for (int k = 1; k <= k_max; ++k) {
    a_k *= a;
    expected += a_k;
    const double gain = expected / cost(k);
    if (k >= min_ && gain > best) best = gain, best_k = k;
  }
  if (best_k > 0) {
    declined_ = 0;
    probe_every_ = 1;
    return best_k;
  }
  if (++declined_ < probe_every_) return 0;
  declined_ = 0;
  probing_ = true;
  return std::min(probe_k_, k_max);
}

void DraftPolicy::record(int drafted, int accepted, double seconds) {
  if (seconds >= 0) {
    if (drafted == 0) {
      t0_ = n_t0_ == 0 ? seconds : t0_ + kTimeWeight * (seconds - t0_);
      ++n_t0_;
    } else if (n_t0_ > 0 && drafted <= kMaxDraft) {
      // The first sample at k may be cold; the second replaces it, later ones average in.
      double& step = step_[drafted];
      step = n_step_[drafted] <= 1 ? seconds : step + kTimeWeight * (seconds - step);
      ++n_step_[drafted];
    }
  }
  if (drafted <= 0) return;
  Acceptance& a = by_match_[std::clamp(last_match_, 0, kNgramMax)];
  a.accepted = a.accepted * kCountDecay + accepted;
  a.stops = a.stops * kCountDecay + (accepted < drafted ? 1 : 0);
  // A probe that stood raised the estimate and doubles the next probe's drafts. When drafts that
  // all stand would pay at the estimated cost, the next candidate is probed again, so text that
  // turned predictable (a greedy loop, a quoted passage) wins drafting back within a few tokens.
  // A rejected probe, or one whose drafts cannot pay even when they stand (a drafter costing as
  // much as the pass it saves), backs off. Drafting resumes once the estimate says it pays.
  if (probing_) {
    const bool stood = accepted == drafted;
    probe_k_ = stood ? std::min(max_, 2 * probe_k_) : min_;
    const bool could_pay = (max_ + 1) / cost(max_) > kMinGain;
    probe_every_ = stood && could_pay ? 1 : std::min(kMaxPause, probe_every_ * 2);
  }
}

}  // namespace sluice
