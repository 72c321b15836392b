// Continuous-batching scheduler (see sluice/serving.h). One thread owns the model while serving:
// each step it admits queued requests into free KV slots, builds one Batch with a decode row per
// generating request plus up to prefill_chunk prompt tokens of requests still in prefill, runs one
// Model::forward over it, and samples each request that got logits with that request's own Sampler.
//
// Memory: one KvCache with a sequence per slot; blocks of 256 positions are allocated as a
// sequence grows (paged), kept after a request finishes so the next request sharing its prefix
// skips that prefill, and freed when a request is cancelled, times out or fails.
// Determinism: a request's tokens depend only on its own prompt, options and seed; every op works
// per row, so a greedy request produces the same tokens alone or batched.
// Pipeline (the engine is one stage of several): every stage runs a scheduler over its own layers'
// KV cache. Stage 0 (clients, clock) decides admissions, cancellations, timeouts and shutdown and
// sends them as StepOrders before each step — an empty message at least every second while idle,
// so the other stages' receive deadlines only fire when it is gone. The others apply the orders to
// their slots and build the same batch by the same rules; the last stage samples and shares the
// tokens (decode_steps). A failed link ends the scheduler: stage 0 answers its requests with the
// error and reports it (SchedulerStats::pipeline_error, SchedulerOptions::on_pipeline_failure);
// the others' join() throws it.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "ops/matmul.h"
#include "runtime/embed.h"
#include "runtime/engine_impl.h"
#include "runtime/kv_disk.h"
#include "runtime/mtp_draft.h"
#include "runtime/step_orders.h"
#include "sluice/serving.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

// Shared by the scheduler thread (producer) and the caller (consumer).
class HandleState final : public CompletionHandle {
 public:
  // `keep_events` false: a pipeline stage's copy of stage 0's request, which has no client.
  explicit HandleState(bool keep_events = true) : keep_events_(keep_events) {}
  bool next(CompletionEvent& event, std::chrono::milliseconds wait) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return false;
    event = std::move(events_.front());
    events_.pop_front();
    if (event.kind != CompletionEvent::Kind::kText) finished_ = true;
    return true;
  }
  void cancel() override { cancelled_.store(true); }
  void abandon(const std::string& message) override {
    cancelled_.store(true);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (abandoned_) return;
      events_.clear();
      CompletionEvent e;
      e.kind = CompletionEvent::Kind::kError;
      e.text = message;
      events_.push_back(std::move(e));
      abandoned_ = true;
    }
    cv_.notify_all();
  }
  bool finished() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }

  bool cancelled() const { return cancelled_.load(); }
  void push(CompletionEvent event) {
    if (!keep_events_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (abandoned_) return;
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  void push_text(std::string text, std::vector<TokenLogprob> logprobs) {
    if (text.empty() && logprobs.empty()) return;
    CompletionEvent e;
    e.text = std::move(text);
    e.logprobs = std::move(logprobs);
    push(std::move(e));
  }
  void push_error(std::string message) {
    CompletionEvent e;
    e.kind = CompletionEvent::Kind::kError;
    e.text = std::move(message);
    push(std::move(e));
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<CompletionEvent> events_;
  std::atomic<bool> cancelled_{false};
  bool finished_ = false;
  bool abandoned_ = false;  // abandon(): its error is the last event
  const bool keep_events_;
};

struct Pending {
  std::shared_ptr<HandleState> handle;
  CompletionRequest request;
  std::optional<Clock::time_point> deadline;
  std::shared_ptr<const grammar::TokenGrammar> grammar;  // request.options.grammar, compiled
};

// One KV sequence. ctx[0, kv.length(id)) is evaluated; an active request's unevaluated tail is
// the rest of its prompt (prefill) or the one token sampled last (decode).
struct Slot {
  int id = 0;
  std::vector<int32_t> ctx;
  uint64_t last_used = 0;  // admission counter, for least-recently-used choice among equals
  uint64_t admitted = 0;   // admission order: prefill budget goes to the oldest first

  std::shared_ptr<HandleState> handle;  // null: idle
  GenerateOptions options;
  std::optional<Clock::time_point> deadline;
  std::optional<Generation> gen;
  std::vector<int32_t> drafts;  // verified with the pending token in the current step
  // With the model's MTP block loaded: this sequence's MTP cache and the main pass's hidden rows.
  std::unique_ptr<MtpDrafter> mtp;
  double prefill_seconds = 0;
  bool decoding = false;  // the first token has been sampled
  Timer timer;
  int n_prompt = 0, n_reused = 0;  // of the current (or last) request, for SlotStats
};

}  // namespace

struct Scheduler::Impl {
  Engine& public_engine;  // for expert_stats()
  Engine::Impl& engine;
  ExpertsLease lease;  // the engine's expert store and pool are ours while the scheduler lives
  SchedulerOptions options;
  StageLink* link;      // this engine's pipeline stage; null: the whole model here
  bool follower;        // a pipeline stage after the first: applies stage 0's orders
  std::string failure;  // why the pipeline stopped (set on the scheduler thread before it ends)
  // Micro-batches: slot i belongs to group i % n_groups and step t runs group t % n_groups, so a
  // stage before the last computes the next group while later stages compute this one. Such a
  // stage takes a step's tokens only when the step's group comes round again (`in_flight`).
  int n_groups = 1;
  uint64_t n_steps = 0;  // steps begun, the same count on every stage
  struct InFlight {
    std::vector<int> rows;  // slots that get a token, in the step's order
    int group = 0;
  };
  std::deque<InFlight> in_flight;
  // Each slot's rows in the current step's batch (consecutive), for its MTP drafter.
  struct Segment {
    int slot = 0, first_pos = 0, first_row = 0;
  };
  std::vector<Segment> segments;
  std::vector<float> hidden;  // the step's final hidden rows, when slots draft with MTP
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<KvDisk> disk;  // --kv-disk
  std::vector<Slot> slots;
  uint64_t admissions = 0;

  mutable std::mutex mutex;  // guards queue, stop, in_system and stats
  std::condition_variable cv;
  std::deque<Pending> queue;
  bool stop = false;
  bool finished = false;  // run() has returned
  int in_system = 0;  // queued + active
  SchedulerStats stats;
  std::shared_ptr<const ExpertCacheMap> cache_map;  // guarded by mutex
  // Scheduler::embed's inputs waiting for the thread (guarded by mutex).
  struct EmbedTask {
    std::vector<int32_t> tokens;
    Pooling pooling = Pooling::kMean;
    std::promise<std::vector<float>> result;
  };
  std::deque<std::shared_ptr<EmbedTask>> embeds;
  std::thread thread;

  Impl(Engine& e, const SchedulerOptions& o)
      : public_engine(e),
        engine(engine_impl(e)),
        lease(engine, "a Scheduler"),
        options(o),
        link(engine.link.get()),
        follower(link && !link->first()) {
    if (link) {
      if (!o.kv_disk_dir.empty())
        fail("--kv-disk does not run in a pipeline: each stage holds only its layers' cache");
      options.draft.mode = DraftMode::kNone;  // a pipeline verifies no drafts
      stats.pipeline_stages = link->n_stages();
      n_groups =
          std::clamp(o.micro_batches > 0 ? o.micro_batches : link->n_stages(), 1, o.n_parallel);
      stats.micro_batches = n_groups;
    }
    kv = engine.make_kv_cache(engine.n_ctx);
    if (!o.kv_disk_dir.empty()) {
      disk = std::make_unique<KvDisk>(o.kv_disk_dir, o.kv_disk_max, engine.model_id(),
                                      kv->layout_id());
    }
    slots.resize(o.n_parallel);
    for (int i = 0; i < o.n_parallel; ++i) {
      slots[i].id = i;
      if (mtp_drafts())
        slots[i].mtp = std::make_unique<MtpDrafter>(*engine.model, engine.n_ctx, engine.kv_config);
    }
    cache_map = std::make_shared<const ExpertCacheMap>(public_engine.expert_cache_map());
    publish_locked();  // no other thread sees the scheduler yet
  }

  // MTP drafts need the block loaded and verification, which a pipeline does not do.
  bool mtp_drafts() const {
    return !link && engine.model->mtp_loaded() && options.draft.mode != DraftMode::kNone &&
           options.draft.max > 0;
  }

  // Slot s's drafter keeps the hidden rows its KV sequence keeps; `own_rows` false: the sequence's
  // prefix came from elsewhere (another slot, the disk) without hidden rows, so the slot drafts
  // with MTP again only once its context is evaluated anew.
  void sync_mtp(Slot& s, bool own_rows = true) {
    if (s.mtp) s.mtp->truncate(own_rows ? kv->length(s.id) : 0);
  }

  bool any_active() const {
    return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.handle != nullptr; });
  }

  // Tokens of `prompt` that slot s's evaluated context can serve.
  int common_prefix(const Slot& s, const std::vector<int32_t>& prompt) const {
    const size_t evaluated = std::min<size_t>(kv->length(s.id), s.ctx.size());
    return reusable_prefix(std::span<const int32_t>(s.ctx.data(), evaluated), prompt);
  }

  void start(Slot& s, Pending&& p) {
    const std::vector<int32_t>& prompt = p.request.prompt;
    int best = common_prefix(s, prompt);
    int source = -1;
    for (const Slot& o : slots) {
      if (o.id == s.id) continue;
      const int c = common_prefix(o, prompt);
      if (c > best) best = c, source = o.id;
    }
    // The slot's context past what this request keeps is evicted: to disk when asked.
    if (disk && kv->length(s.id) > best) persist(s);
    int from_disk = 0;
    std::optional<KvState> st =
        disk ? disk->take(prompt, best, kv->max_rollback(), &from_disk) : std::nullopt;
    if (st) {
      kv->import_prefix(s.id, static_cast<int>(st->tokens.size()), st->kv);
      kv->truncate(s.id, from_disk);
    } else if (source >= 0) {
      kv->copy_prefix(source, s.id, best);
    } else {
      kv->truncate(s.id, best);
    }
    sync_mtp(s, !st && source < 0);
    best = kv->length(s.id);  // a cache may keep less than asked (deepseek4 rings)
    s.ctx = prompt;
    s.options = p.request.options;
    s.options.draft = options.draft;  // the server's choice, not the client's
    s.drafts.clear();
    s.deadline = p.deadline;
    // Stage 0 compiled the grammar when the request came; other stages compile it here.
    std::shared_ptr<const grammar::TokenGrammar> grammar = p.grammar;
    if (!grammar && !s.options.grammar.empty()) grammar = engine.grammars->get(s.options.grammar);
    s.gen.emplace(*engine.tokenizer, s.options, prompt, best, std::move(grammar));
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
    publish_disk_locked();
  }

  // Ends the active request of slot s (its generation state says why) and sends its final event.
  void finish(Slot& s, bool timed_out = false) {
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

  void fail_slot(Slot& s, const std::string& message) {
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

  // Writes slot s's evaluated context to the disk cache.
  void persist(const Slot& s) {
    const int n = std::min<int>(kv->length(s.id), static_cast<int>(s.ctx.size()));
    if (n < KvDisk::kMinTokens) return;
    disk->put(std::vector<int32_t>(s.ctx.begin(), s.ctx.begin() + n), kv->export_prefix(s.id, n));
  }

  // Gauges that follow the slots; the caller holds `mutex`.
  void publish_locked() {
    stats.active = static_cast<int>(std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.handle != nullptr; }));
    stats.kv_bytes = kv->allocated_bytes();
    stats.queue_depth = static_cast<int>(queue.size());
    stats.slots.resize(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      const Slot& s = slots[i];
      stats.slots[i] = {s.id, s.handle != nullptr, kv->n_ctx(), kv->length(s.id), s.n_prompt, s.n_reused};
    }
  }

  // The disk cache's counters (it is only touched on the scheduler thread); the caller holds `mutex`.
  void publish_disk_locked() {
    if (disk) {
      const KvDiskStats& d = disk->stats();
      stats.kv_disk_hits = d.hits;
      stats.kv_disk_misses = d.misses;
      stats.kv_disk_bytes_read = d.bytes_read;
      stats.kv_disk_bytes_written = d.bytes_written;
      stats.kv_disk_bytes = d.bytes;
      stats.kv_disk_skipped = d.skipped;
    }
  }

  // Keeps only the evaluated context (for prefix reuse), or frees the slot's KV blocks.
  void release(Slot& s, bool drop) {
    s.gen.reset();
    if (drop) {
      kv->remove(s.id);
      sync_mtp(s);
      s.ctx.clear();
    } else {
      s.ctx.resize(std::min<size_t>(s.ctx.size(), kv->length(s.id)));
    }
  }

  // What slot s's step sampled (the accepted drafts, then one more token): the KV positions of
  // rejected drafts go, the context grows, and the request may finish.
  void after_take(Slot& s, const Generation::Step& step) {
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

  // Ends active requests whose client cancelled or whose deadline passed; stage 0 only.
  void end_expired(Clock::time_point now, StepOrders& orders) {
    for (Slot& s : slots) {
      if (!s.handle || awaits_token(s)) continue;  // ended once its token is in
      const bool timed_out = !s.handle->cancelled() && s.deadline && now >= *s.deadline;
      if (!s.handle->cancelled() && !timed_out) continue;
      (timed_out ? orders.timed_out : orders.cancelled).push_back(s.id);
      end_slot(s, timed_out);
    }
  }

  void end_slot(Slot& s, bool timed_out) {
    s.gen->cancel();
    finish(s, timed_out);
  }

  // A later stage: stage 0's orders on this stage's slots.
  void apply(StepOrders& orders) {
    for (int id : orders.cancelled) end_slot(checked_slot(id, true), false);
    for (int id : orders.timed_out) end_slot(checked_slot(id, true), true);
    for (StepOrders::Start& st : orders.started) {
      Slot& s = checked_slot(st.slot, false);
      Pending p;
      p.handle = std::make_shared<HandleState>(false);
      p.request = std::move(st.request);
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++in_system;
      }
      try {
        start(s, std::move(p));
      } catch (const std::exception&) {
        // Stage 0 failed the same start and answered its client; mirror it.
        release(s, true);
        std::lock_guard<std::mutex> lock(mutex);
        --in_system;
      }
    }
  }

  Slot& checked_slot(int id, bool active) {
    if (id < 0 || id >= static_cast<int>(slots.size()) || (slots[id].handle != nullptr) != active)
      fail("stage 0 ordered {} slot {}, which is {} here: the stages disagree",
           active ? "the end of" : "a request into", id,
           id >= 0 && id < static_cast<int>(slots.size()) && slots[id].handle ? "active"
                                                                              : "idle or missing");
    return slots[id];
  }

  // Takes queued requests into idle slots (recorded in `orders`); drops cancelled and expired
  // ones. Called unlocked.
  void admit(Clock::time_point now, StepOrders& orders) {
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
        CompletionEvent done;
        done.kind = CompletionEvent::Kind::kDone;
        done.result.finish = FinishReason::kCancelled;
        done.timed_out = timed_out;
        p.handle->push(std::move(done));
      }
  }

  int group_of(const Slot& s) const { return s.id % n_groups; }

  // A step of slot s has gone forward and its token is not in yet.
  bool awaits_token(const Slot& s) const {
    return std::any_of(in_flight.begin(), in_flight.end(), [&](const InFlight& f) {
      return std::find(f.rows.begin(), f.rows.end(), s.id) != f.rows.end();
    });
  }

  // Samples (or, before the last pipeline stage, receives) the tokens of a step's `rows` from
  // `logits` (one row per draft plus one, per slot; empty without logits) and applies them.
  void settle(const std::vector<int>& rows, std::span<const float> logits) {
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

  // Takes the tokens of the in-flight steps of the group whose turn is next (all: `all`).
  void settle_due(bool all = false) {
    const int group = static_cast<int>(n_steps % n_groups);
    while (!in_flight.empty() && (all || in_flight.front().group == group)) {
      const InFlight f = std::move(in_flight.front());
      in_flight.pop_front();
      settle(f.rows, {});
    }
  }

  // One forward pass over the active slots and its sampling. Throws when the pass fails in a
  // pipeline (the link is gone; the caller ends the scheduler); fails the step's requests
  // otherwise.
  void step(Batch& batch, std::vector<float>& logits, std::vector<int>& rows) {
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
      for (Slot& s : slots)
        if (s.handle) fail_slot(s, e.what());
      return;
    }
    const double secs = t.seconds();
    {
      // The expert store's counters and cache map as this pass left them, published before its
      // tokens go out: a client that has its reply sees the experts it used counted.
      const ExpertStats es = public_engine.expert_stats();
      auto map = std::make_shared<const ExpertCacheMap>(public_engine.expert_cache_map());
      std::lock_guard<std::mutex> lock(mutex);
      stats.experts = es;
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

  // Embeddings asked for since the last step, each in a KV cache of its own.
  void run_embeds() {
    std::deque<std::shared_ptr<EmbedTask>> todo;
    {
      std::lock_guard<std::mutex> lock(mutex);
      todo.swap(embeds);
    }
    for (auto& t : todo) {
      try {
        t->result.set_value(embed_tokens(engine, t->tokens, t->pooling));
      } catch (...) {
        t->result.set_exception(std::current_exception());
      }
    }
  }

  void run() {
    Batch batch;
    std::vector<float> logits;
    std::vector<int> rows;
    // Stage 0 of a pipeline sends orders at least this often, even with nothing to do.
    const auto tick = std::chrono::duration<double>(link ? std::min(1.0, link->timeout() / 4) : 0);
    try {
      for (;;) {
        StepOrders orders;
        settle_due();
        if (follower) {
          std::vector<uint8_t> bytes;
          link->broadcast(bytes);
          orders = decode_orders(bytes);
          if (orders.stop) {
            settle_due(true);
            break;
          }
          apply(orders);
        } else {
          {
            std::unique_lock<std::mutex> lock(mutex);
            auto ready = [&] { return stop || !queue.empty() || !embeds.empty() || any_active(); };
            if (!link)
              cv.wait(lock, ready);
            else
              cv.wait_for(lock, tick, ready);
            orders.stop = stop;
          }
          // Every token in before the stop order, as the other stages do after it.
          if (orders.stop) settle_due(true);
          if (!orders.stop) {
            try {
              end_expired(Clock::now(), orders);
              admit(Clock::now(), orders);
            } catch (const std::exception& e) {
              if (link) throw;
              for (Slot& s : slots)
                if (s.handle) fail_slot(s, e.what());
            }
          }
          if (link) {
            std::vector<uint8_t> bytes = encode_orders(orders);
            link->broadcast(bytes);
          }
          if (orders.stop) break;
        }
        if (!follower) run_embeds();
        try {
          step(batch, logits, rows);
        } catch (const std::exception& e) {
          if (link) throw;
          // Outside forward (prefix copy, allocation): fail what is running, keep serving.
          for (Slot& s : slots)
            if (s.handle) fail_slot(s, e.what());
        }
        std::lock_guard<std::mutex> lock(mutex);
        publish_locked();
      }
    } catch (const std::exception& e) {
      // Only a pipeline gets here: a stage is gone or the stages disagree. Nothing more can run.
      failure = e.what();
      for (Slot& s : slots)
        if (s.handle) fail_slot(s, fmt::format("the model's pipeline failed: {}", failure));
      std::lock_guard<std::mutex> lock(mutex);
      stats.pipeline_error = failure;
      for (Pending& p : queue)
        p.handle->push_error(fmt::format("the model's pipeline failed: {}", failure));
      queue.clear();
      stop = true;
    }
    if (!failure.empty() && options.on_pipeline_failure) options.on_pipeline_failure(failure);
    for (Slot& s : slots)
      if (s.handle) fail_slot(s, "the server is shutting down");
    std::lock_guard<std::mutex> lock(mutex);
    for (Pending& p : queue) p.handle->push_error("the server is shutting down");
    queue.clear();
    for (auto& t : embeds) t->result.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
    embeds.clear();
    finished = true;
    cv.notify_all();
  }
};

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options) {
  if (options.n_parallel < 1 || options.n_parallel > 256)
    fail("--parallel {}: expected 1 to 256 sequences", options.n_parallel);
  if (options.max_queue < 0) fail("--max-queue {}: expected 0 or more", options.max_queue);
  if (options.prefill_chunk < 1) fail("prefill chunk {}: expected at least 1 token", options.prefill_chunk);
  check_draft_options(options.draft);
  const Engine::Impl& e = engine_impl(engine);
  if (options.draft.mode == DraftMode::kMtp && (e.link || !e.model->mtp_loaded()))
    fail("--draft mtp: {}", e.link ? "a pipeline verifies no drafts"
                            : e.model->n_mtp_layers() == 0
                                ? "the model file has no MTP (nextn) layers"
                                : "the engine was loaded without the model's MTP layers");
  impl_ = std::make_unique<Impl>(engine, options);
  impl_->thread = std::thread([this] { impl_->run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
  // Idle slots' contexts survive a restart through the disk cache.
  if (impl_->disk)
    for (const auto& s : impl_->slots)
      if (!s.handle) impl_->persist(s);
}

int Scheduler::n_ctx() const { return impl_->kv->n_ctx(); }

std::vector<float> Scheduler::embed(std::span<const int32_t> tokens, Pooling pooling) {
  if (impl_->link) fail("embeddings do not run in a pipeline: the stages hold only their layers");
  if (tokens.empty()) fail("nothing to embed: the input has no tokens");
  if (static_cast<int>(tokens.size()) > n_ctx())
    fail("the input is {} tokens, more than the context of {}", tokens.size(), n_ctx());
  auto task = std::make_shared<Impl::EmbedTask>();
  task->tokens.assign(tokens.begin(), tokens.end());
  task->pooling = pooling;
  std::future<std::vector<float>> result = task->result.get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stop || impl_->finished) fail("the server is shutting down");
    impl_->embeds.push_back(std::move(task));
  }
  impl_->cv.notify_all();
  return result.get();
}

std::shared_ptr<const ExpertCacheMap> Scheduler::expert_cache() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->cache_map;
}

bool Scheduler::follows() const {
  return impl_->follower;
}

void Scheduler::join() {
  Impl& m = *impl_;
  {
    std::unique_lock<std::mutex> lock(m.mutex);
    m.cv.wait(lock, [&] { return m.finished; });
  }
  if (!m.failure.empty()) fail("{}", m.failure);
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

Submission Scheduler::submit(CompletionRequest request) {
  Impl& m = *impl_;
  Submission out;
  std::shared_ptr<const grammar::TokenGrammar> grammar;
  const int n_vocab = m.engine.model->hparams().n_vocab;
  if (m.follower)
    fail("only pipeline stage 0 takes requests; this is {}", m.link->describe(m.link->stage()));
  if (request.prompt.empty()) {
    out.status = SubmitStatus::kInvalid;
    out.message = "the prompt is empty";
  } else if (static_cast<int>(request.prompt.size()) >= m.kv->n_ctx()) {
    out.status = SubmitStatus::kContextOverflow;
    out.message = fmt::format("the prompt has {} tokens but the context holds {} (one position must remain to generate)",
                              request.prompt.size(), m.kv->n_ctx());
  } else if (m.link && request.options.logprobs >= 0) {
    out.status = SubmitStatus::kInvalid;
    out.message =
        "logprobs are not available while the model runs as a pipeline (only its last stage has "
        "logits)";
  } else if (request.options.max_tokens < 0) {
    out.status = SubmitStatus::kInvalid;
    out.message = fmt::format("max_tokens {} is negative", request.options.max_tokens);
  } else if (!request.options.grammar.empty()) {
    try {
      grammar = m.engine.grammars->get(request.options.grammar);
    } catch (const Error& e) {
      out.status = SubmitStatus::kInvalid;
      out.message = e.what();
    }
  }
  if (out.status == SubmitStatus::kOk) {
    for (int32_t t : request.prompt)
      if (t < 0 || t >= n_vocab) {
        out.status = SubmitStatus::kInvalid;
        out.message = fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
        break;
      }
  }
  if (out.status != SubmitStatus::kOk) {
    std::lock_guard<std::mutex> lock(m.mutex);
    ++m.stats.rejected;
    return out;
  }
  auto handle = std::make_shared<HandleState>();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.stop || m.in_system >= m.options.n_parallel + m.options.max_queue) {
      ++m.stats.rejected;
      out.status = SubmitStatus::kQueueFull;
      out.message = fmt::format("all {} slots are busy and {} requests are waiting", m.options.n_parallel,
                                m.options.max_queue);
      return out;
    }
    Pending p;
    p.handle = handle;
    p.grammar = std::move(grammar);
    if (request.timeout_seconds > 0)
      p.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(request.timeout_seconds));
    m.stats.prompt_tokens += request.prompt.size();
    p.request = std::move(request);
    m.queue.push_back(std::move(p));
    ++m.in_system;
    ++m.stats.requests;
    m.stats.queue_depth = static_cast<int>(m.queue.size());
  }
  m.cv.notify_all();
  out.handle = std::move(handle);
  return out;
}

}  // namespace sluice
