// The scheduler's admission side (see scheduler_impl.h): queued requests into KV slots, by shared
// prefix, micro-batch load and recency; the end of a request (done, cancelled, timed out, failed);
// the gauges that follow the slots.
#include <algorithm>

#include "core/error.h"
#include "runtime/scheduler_impl.h"

namespace sluice {

bool Scheduler::Impl::mtp_drafts() const {
  return !link && engine.model->mtp_loaded() && options.draft.mode != DraftMode::kNone &&
         options.draft.max > 0;
}

void Scheduler::Impl::sync_mtp(Slot& s, bool own_rows) {
  if (s.mtp) s.mtp->truncate(own_rows ? kv->length(s.id) : 0);
}

bool Scheduler::Impl::any_active() const {
  return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.handle != nullptr; });
}

int Scheduler::Impl::common_prefix(const Slot& s, const std::vector<int32_t>& prompt) const {
  const size_t evaluated = std::min<size_t>(kv->length(s.id), s.ctx.size());
  return reusable_prefix(std::span<const int32_t>(s.ctx.data(), evaluated), prompt);
}

void Scheduler::Impl::admit(Clock::time_point now, StepOrders& orders) {
  std::vector<Pending> dropped_cancel, dropped_timeout;
  for (;;) {
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = queue.begin(); it != queue.end();) {
        if (it->handle->cancelled() || (it->deadline && now >= *it->deadline)) {
          (it->handle->cancelled() ? dropped_cancel : dropped_timeout).push_back(std::move(*it));
          it = queue.erase(it);
          --in_system;
        } else {
          ++it;
        }
      }
      if (queue.empty()) break;
      if (std::none_of(slots.begin(), slots.end(), [](const Slot& s) { return !s.handle; })) break;
      p = std::move(queue.front());
      queue.pop_front();
    }
    // The idle slot sharing the longest prefix, else one of the micro-batch with the fewest
    // requests (so the pipeline's stages have work at once), else the least recently used one.
    std::vector<int> load(n_groups, 0);
    for (const Slot& s : slots)
      if (s.handle) ++load[group_of(s)];
    Slot* best = nullptr;
    int best_common = -1;
    for (Slot& s : slots) {
      if (s.handle) continue;
      const int c = common_prefix(s, p.request.prompt);
      const bool better =
          c > best_common ||
          (c == best_common &&
           (load[group_of(s)] < load[group_of(*best)] ||
            (load[group_of(s)] == load[group_of(*best)] && s.last_used < best->last_used)));
      if (better) best = &s, best_common = c;
    }
    if (link) orders.started.push_back({best->id, p.request});
    try {
      start(*best, std::move(p));
    } catch (const std::exception& e) {
      release(*best, true);
      p.handle->push_error(e.what());
      std::lock_guard<std::mutex> lock(mutex);
      --in_system;
      ++stats.failed;
    }
  }
  for (auto& [list, timed_out] : {std::pair{&dropped_cancel, false}, std::pair{&dropped_timeout, true}})
    for (Pending& p : *list) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++(timed_out ? stats.timed_out : stats.cancelled);
      }
      p.handle->push_cancelled(timed_out);
    }
}

void Scheduler::Impl::start(Slot& s, Pending&& p) {
  const std::vector<int32_t>& prompt = p.request.prompt;
  int best = common_prefix(s, prompt);
  int source = -1;
  for (const Slot& o : slots) {
    if (o.id == s.id) continue;
    const int c = common_prefix(o, prompt);
    if (c > best) best = c, source = o.id;
  }
  // The slot's context past what this request keeps is evicted: to disk when asked, and a longer
  // prefix on disk comes back.
  const bool from_disk = disk && disk->swap_in(s.id, s.ctx, prompt, best);
  if (!from_disk) {
    if (source >= 0)
      kv->copy_prefix(source, s.id, best);
    else
      kv->truncate(s.id, best);
  }
  sync_mtp(s, !from_disk && source < 0);
  best = kv->length(s.id);  // a cache may keep less than asked (deepseek4 rings)
  s.ctx = prompt;
  s.options = p.request.options;
  s.options.draft = options.draft;  // the server's choice, not the client's
  s.drafts.clear();
  s.deadline = p.deadline;
  // Stage 0 compiled the grammar when the request came; other stages compile it here.
  std::shared_ptr<const grammar::TokenGrammar> grammar = p.grammar;
  if (!grammar && !s.options.grammar.empty()) grammar = engine.grammars->get(s.options.grammar);
  s.gen.emplace(*engine.tokenizer, s.options, prompt, best, std::move(grammar),
                &DraftPolicy::kept(s.draft_policy, s.options.draft));
  s.prefill_seconds = 0;
  s.decoding = false;
  s.timer.reset();
  s.last_used = s.admitted = ++admissions;
  s.n_prompt = static_cast<int>(prompt.size());
  s.n_reused = best;
  s.handle = std::move(p.handle);  // last: if anything above throws, the caller still holds it
  std::lock_guard<std::mutex> lock(mutex);
  stats.reused_tokens += best;
  publish_locked();
  if (disk) disk->publish(stats);  // its counters change only here, on the scheduler thread
}

void Scheduler::Impl::end_expired(Clock::time_point now, StepOrders& orders) {
  for (Slot& s : slots) {
    if (!s.handle || awaits_token(s)) continue;  // ended once its token is in
    const bool timed_out = !s.handle->cancelled() && s.deadline && now >= *s.deadline;
    if (!s.handle->cancelled() && !timed_out) continue;
    (timed_out ? orders.timed_out : orders.cancelled).push_back(s.id);
    end_slot(s, timed_out);
  }
}

void Scheduler::Impl::end_slot(Slot& s, bool timed_out) {
  s.gen->cancel();
  finish(s, timed_out);
}

void Scheduler::Impl::finish(Slot& s, bool timed_out) {
  std::string tail;
  std::vector<TokenLogprob> logprobs = s.gen->take_logprobs();
  GenerateResult result = s.gen->finish(&tail);
  s.handle->push_text(std::move(tail), std::move(logprobs));
  result.prefill_seconds = s.prefill_seconds;
  (s.decoding ? result.decode_seconds : result.prefill_seconds) = s.timer.seconds();
  const FinishReason reason = result.finish;
  release(s, reason == FinishReason::kCancelled);
  CompletionEvent done;
  done.kind = CompletionEvent::Kind::kDone;
  done.timed_out = timed_out;
  done.result = std::move(result);
  std::shared_ptr<HandleState> handle = std::move(s.handle);  // the slot is idle from here
  {
    // Stats first: a client that sees the final event also sees it counted.
    std::lock_guard<std::mutex> lock(mutex);
    --in_system;
    if (timed_out) ++stats.timed_out;
    else if (reason == FinishReason::kCancelled) ++stats.cancelled;
    else ++stats.completed;
    publish_locked();
  }
  handle->push(std::move(done));
}

void Scheduler::Impl::fail_slot(Slot& s, const std::string& message) {
  release(s, true);
  std::shared_ptr<HandleState> handle = std::move(s.handle);
  {
    std::lock_guard<std::mutex> lock(mutex);
    --in_system;
    ++stats.failed;
    publish_locked();
  }
  handle->push_error(message);
}

void Scheduler::Impl::release(Slot& s, bool drop) {
  s.gen.reset();
  if (drop) {
    kv->remove(s.id);
    sync_mtp(s);
    s.ctx.clear();
  } else {
    s.ctx.resize(std::min<size_t>(s.ctx.size(), kv->length(s.id)));
  }
}

void Scheduler::Impl::publish_locked() {
  stats.active = static_cast<int>(std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.handle != nullptr; }));
  stats.kv_bytes = kv->allocated_bytes();
  stats.queue_depth = static_cast<int>(queue.size());
  stats.slots.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    stats.slots[i] = {s.id, s.handle != nullptr, kv->n_ctx(), kv->length(s.id), s.n_prompt, s.n_reused};
  }
}

}  // namespace sluice
