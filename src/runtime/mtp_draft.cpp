// MTP drafts (see mtp_draft.h).
#include "runtime/mtp_draft.h"

#include <algorithm>

#include "kv/kv_cache.h"
#include "sampling/sampler.h"

namespace sluice {

namespace {

// Rows of one catch-up pass: the engine's step bound, as a prefill chunk.
constexpr int kCatchUpRows = kEngineKvStep;

}  // namespace

MtpDrafter::MtpDrafter(Model& model, int n_ctx, const KvCacheConfig& config)
    : model_(model), kv_(model.make_mtp_kv_cache(n_ctx, config)), width_(model.hidden_width()) {}

void MtpDrafter::add_hidden(ThreadPool& pool, int pos, std::span<const float> rows) {
  if (pos > valid_) return;
  const int n = static_cast<int>(rows.size() / width_);
  hidden_.resize(static_cast<size_t>(pos + n) * width_);
  model_.mtp_hidden_rows(pool, rows.data(), n,
                         hidden_.data() + static_cast<ptrdiff_t>(pos) * width_);
  valid_ = pos + n;
}

void MtpDrafter::truncate(int len) {
  valid_ = std::min(valid_, len);
  kv_->truncate(0, std::max(0, len - 1));
}

std::vector<int32_t> MtpDrafter::draft(ThreadPool& pool, ExpertStore& experts,
                                       std::span<const int32_t> ctx, int k) {
  const int n_eval = static_cast<int>(ctx.size()) - 1;  // positions the main cache holds
  if (k <= 0 || n_eval < 1 || valid_ < n_eval) return {};
  std::vector<float> out, logits, h;
  std::vector<int32_t> drafts;
  Batch b;
  // Catch up: row t is position t's hidden state with token t + 1 (the pending token last);
  // only the last row's logits are needed, and they give the first draft. A cache already caught
  // up (drafting twice without evaluating) recomputes its last row.
  kv_->truncate(0, n_eval - 1);
  // A cache with rings (DeepSeek V4) may drop more than asked: continue from what it kept.
  for (int start = kv_->length(0); start < n_eval; start += kCatchUpRows) {
    const int end = std::min(n_eval, start + kCatchUpRows);
    b.clear();
    for (int t = start; t < end; ++t) b.add(ctx[t + 1], t, 0, t == n_eval - 1);
    model_.forward_mtp(pool, b, hidden_.data() + static_cast<ptrdiff_t>(start) * width_, *kv_,
                       experts, out, logits);
  }
  drafts.push_back(argmax(logits));
  h.assign(out.end() - width_, out.end());
  // Chain: draft i + 1 comes from the MTP output of draft i's row at the next position.
  for (int i = 1; i < k; ++i) {
    b.clear();
    b.add(drafts.back(), n_eval - 1 + i, 0, true);
    model_.forward_mtp(pool, b, h.data(), *kv_, experts, out, logits);
    drafts.push_back(argmax(logits));
    h.assign(out.begin(), out.end());
  }
  // The chain's rows are speculative: the next catch-up writes those positions from the main
  // model's hidden states.
  kv_->truncate(0, n_eval);
  return drafts;
}

}  // namespace sluice
