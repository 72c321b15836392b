// One scheduler step (see scheduler_impl.h): a batch of a decode row (and its drafts) per
// generating request of the step's micro-batch plus up to prefill_chunk prompt tokens of requests
// still in prefill, oldest first; one forward pass; the sampling of every request that got logits.
#include <algorithm>

#include "ops/matmul.h"
#include "runtime/scheduler_impl.h"
#include "runtime/step.h"

namespace sluice {

void Scheduler::Impl::step(Batch& batch, std::vector<float>& logits, std::vector<int>& rows) {
  batch.clear();
  rows.clear();
  segments.clear();
  const int group = static_cast<int>(n_steps++ % n_groups);
  int n_decode = 0, n_seq = 0;
  // Drafts are verified with ExactRows (every row as a one-token pass computes it, so drafting
  // never changes a token); a step that also prefills keeps its fast batched kernels and drafts
  // nothing.
  const bool prefill_step = std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.handle && !s.decoding; });
  bool any_drafts = false;
  for (Slot& s : slots) {
    if (!s.handle || !s.decoding || group_of(s) != group) continue;
    // The pending token (and more when a cache could not roll back all rejected drafts), then
    // this step's drafts: all verified in this one pass.
    const int n = static_cast<int>(s.ctx.size());
    if (!prefill_step) {
      Generation::MtpSource mtp_source;
      if (s.mtp)
        mtp_source = [&](int k) { return s.mtp->draft(*engine.pool, *engine.experts, s.ctx, k); };
      s.drafts = s.gen->propose(s.ctx, kv->n_ctx(), mtp_source);
    }
    any_drafts = any_drafts || !s.drafts.empty();
    segments.push_back({s.id, kv->length(s.id), static_cast<int>(batch.size())});
    for (int pos = kv->length(s.id); pos < n; ++pos) batch.add(s.ctx[pos], pos, s.id, pos + 1 == n);
    for (size_t j = 0; j < s.drafts.size(); ++j) batch.add(s.drafts[j], n + static_cast<int>(j), s.id, true);
    rows.push_back(s.id);
    n_decode += static_cast<int>(s.drafts.size()) + 1;
    ++n_seq;
  }
  std::vector<Slot*> prefilling;
  for (Slot& s : slots)
    if (s.handle && !s.decoding && group_of(s) == group) prefilling.push_back(&s);
  std::sort(prefilling.begin(), prefilling.end(), [](Slot* a, Slot* b) { return a->admitted < b->admitted; });
  int budget = std::max(1, options.prefill_chunk);
  for (Slot* s : prefilling) {
    const int pos = kv->length(s->id);
    // A sequence adds at most the cache's step bound per step (windowed layers keep rings).
    const int end = std::min<int>(s->ctx.size(), pos + std::min(budget, kv->max_step()));
    if (end <= pos) break;
    segments.push_back({s->id, pos, static_cast<int>(batch.size())});
    for (int i = pos; i < end; ++i) batch.add(s->ctx[i], i, s->id, i + 1 == static_cast<int>(s->ctx.size()));
    if (end == static_cast<int>(s->ctx.size())) rows.push_back(s->id);
    budget -= end - pos;
    ++n_seq;
  }
  if (batch.size() == 0) return;

  Timer t;
  try {
    const ExactRows exact_rows(any_drafts);
    engine_forward(engine, batch, *kv, logits, mtp_drafts() ? &hidden : nullptr);
  } catch (const std::exception& e) {
    if (link) throw;
    // The cache state of every sequence in the failed step is unknown: fail them all.
    fail_active(e.what());
    return;
  }
  const double secs = t.seconds();
  {
    // The expert store's counters and cache map as this pass left them, published before its
    // tokens go out: a client that has its reply sees the experts it used counted.
    const ExpertStats es = public_engine.expert_stats();
    const uint64_t trace_rows = public_engine.routing_trace_rows();
    auto map = std::make_shared<const ExpertCacheMap>(public_engine.expert_cache_map());
    std::lock_guard<std::mutex> lock(mutex);
    stats.experts = es;
    stats.routing_trace_rows = trace_rows;
    cache_map = std::move(map);
  }
  if (mtp_drafts()) {
    const int64_t width = engine.model->hidden_width();
    for (size_t i = 0; i < segments.size(); ++i) {
      const int end =
          i + 1 < segments.size() ? segments[i + 1].first_row : static_cast<int>(batch.size());
      const Segment& g = segments[i];
      slots[g.slot].mtp->add_hidden(*engine.pool, g.first_pos,
                                    std::span<const float>(hidden).subspan(
                                        g.first_row * width, (end - g.first_row) * width));
    }
  }
  if (link && !link->last() && n_groups > 1) {
    in_flight.push_back({rows, group});
  } else {
    settle(rows, logits);
  }

  std::lock_guard<std::mutex> lock(mutex);
  ++stats.steps;
  stats.batch_rows += batch.size();
  stats.decode_rows += n_decode;
  stats.last_batch_rows = static_cast<int>(batch.size());
  stats.last_batch_sequences = n_seq;
  stats.busy_seconds += secs;
  publish_locked();
}

void Scheduler::Impl::settle(const std::vector<int>& rows, std::span<const float> logits) {
  const size_t n_vocab = engine.model->hparams().n_vocab;
  std::vector<DecodeJob> jobs;
  size_t row = 0;
  for (int id : rows) {
    Slot& s = slots[id];
    if (!s.decoding) {
      s.decoding = true;
      s.prefill_seconds = s.timer.seconds();
      s.timer.reset();
    }
    const size_t n_rows = s.drafts.size() + 1;
    const std::span<const float> own =
        logits.empty() ? logits : logits.subspan(row * n_vocab, n_rows * n_vocab);
    jobs.push_back({&*s.gen, own, s.drafts, static_cast<int>(s.ctx.size()),
                    [&s](const Generation::Sampled& next) {
                      s.handle->push_text(next.text, s.gen->take_logprobs());
                      return true;
                    }});
    row += n_rows;
  }
  const std::vector<Generation::Step> taken = decode_steps(engine, jobs, kv->n_ctx());
  for (size_t i = 0; i < rows.size(); ++i) after_take(slots[rows[i]], taken[i]);
}

void Scheduler::Impl::after_take(Slot& s, const Generation::Step& step) {
  const int n_used = static_cast<int>(s.ctx.size());
  // KV positions past the last accepted draft hold rejected tokens.
  kv->truncate(s.id, n_used + step.n_accepted);
  sync_mtp(s);
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.generated_tokens += step.tokens.size();
    stats.drafted_tokens += s.drafts.size();
    stats.accepted_tokens += step.n_accepted;
  }
  // Finished: the evaluated drafts stay in the context (prefix reuse), the last token does not.
  const size_t n_keep = s.gen->finished() ? step.n_accepted : step.tokens.size();
  s.ctx.insert(s.ctx.end(), step.tokens.begin(), step.tokens.begin() + n_keep);
  s.drafts.clear();
  if (s.gen->finished()) return finish(s);
}

}  // namespace sluice
