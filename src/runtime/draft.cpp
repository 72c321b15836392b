// n-gram drafts and the adaptive draft length (see draft.h).
#include "runtime/draft.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

namespace {
// Suffix lengths tried, longest first: a 1-token match proposes too much that is wrong.
constexpr int kNgramMax = 4;
constexpr int kNgramMin = 2;
}  // namespace

void check_draft_options(const DraftOptions& o) {
  if (o.max < 0 || o.max > kMaxDraft)
    fail("--draft-max {}: expected 0 to {} tokens", o.max, kMaxDraft);
  if (o.min < 0 || o.min > o.max)
    fail("--draft-min {}: expected 0 to --draft-max ({})", o.min, o.max);
}

std::vector<int32_t> ngram_draft(std::span<const int32_t> ctx, int n_max) {
  const int n_ctx = static_cast<int>(ctx.size());
  if (n_max <= 0) return {};
  for (int n = std::min(kNgramMax, n_ctx - 1); n >= kNgramMin; --n) {
    const std::span<const int32_t> suffix = ctx.subspan(n_ctx - n);
    // Latest occurrence first: recent text predicts the continuation best.
    for (int start = n_ctx - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), ctx.begin() + start)) continue;
      const int from = start + n;
      const int count = std::min(n_max, n_ctx - from);
      return {ctx.begin() + from, ctx.begin() + from + count};
    }
  }
  return {};
}

DraftLength::DraftLength(const DraftOptions& o)
    : min_(std::max(1, o.min)), max_(o.max), current_(o.max) {}

int DraftLength::next() {
  if (max_ <= 0) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return current_;
}

void DraftLength::record(int drafted, int accepted) {
  if (drafted <= 0) return;
  if (accepted == 0) {
    pause_ = next_pause_;
    next_pause_ = std::min(kMaxPause, next_pause_ * 2);
    current_ = min_;
    return;
  }
  next_pause_ = 1;
  current_ = accepted == drafted ? std::min(max_, current_ + 1) : std::max(min_, accepted + 1);
}

}  // namespace sluice
