// The continuous-batching scheduler's state, shared by its translation units:
//   scheduler.cpp          the public API and the loop (orders, step, settle)
//   scheduler_slots.cpp    admission: queued requests into slots, their end, the gauges
//   scheduler_step.cpp     one step: the batch, the forward pass, the sampling of its rows
//   pipeline_follower.cpp  a pipeline stage: stage 0's orders applied, micro-batches in flight
// with the request handles (completion_handle.h) and the slots' KV on disk (slot_disk.h) beside.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/timer.h"
#include "runtime/completion_handle.h"
#include "runtime/embed.h"
#include "runtime/engine_impl.h"
#include "runtime/mtp_draft.h"
#include "runtime/request.h"
#include "runtime/slot_disk.h"
#include "runtime/step_orders.h"
#include "sluice/serving.h"

namespace sluice {

using SchedulerClock = std::chrono::steady_clock;

struct Pending {
  std::shared_ptr<HandleState> handle;
  CompletionRequest request;
  std::optional<SchedulerClock::time_point> deadline;
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
  std::optional<SchedulerClock::time_point> deadline;
  std::optional<Generation> gen;
  std::vector<int32_t> drafts;  // verified with the pending token in the current step
  // With the model's MTP block loaded: this sequence's MTP cache and the main pass's hidden rows.
  std::unique_ptr<MtpDrafter> mtp;
  // What drafting cost and earned over this slot's earlier requests (DraftPolicy::kept).
  std::optional<DraftPolicy> draft_policy;
  double prefill_seconds = 0;
  bool decoding = false;  // the first token has been sampled
  Timer timer;
  int n_prompt = 0, n_reused = 0;  // of the current (or last) request, for SlotStats
};

struct Scheduler::Impl {
  using Clock = SchedulerClock;

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
  std::unique_ptr<SlotDisk> disk;  // --kv-disk
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

  Impl(Engine& e, const SchedulerOptions& o);

  // --- the loop (scheduler.cpp) ---
  void run();
  // Stage 0 or the whole model: waits for work, ends expired requests, admits queued ones and
  // sends the orders to the other stages. False: stop.
  bool lead();
  // Runs `f`; on failure fails every active request and keeps serving, except in a pipeline,
  // where the failure ends the scheduler (rethrown).
  template <class F>
  void or_fail_active(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (link) throw;
      fail_active(e.what());
    }
  }
  void fail_active(const std::string& message);
  // Embeddings asked for since the last step, each in a KV cache of its own.
  void run_embeds();

  // --- admission and the end of requests (scheduler_slots.cpp) ---
  // MTP drafts need the block loaded and verification, which a pipeline does not do.
  bool mtp_drafts() const;
  // Slot s's drafter keeps the hidden rows its KV sequence keeps; `own_rows` false: the sequence's
  // prefix came from elsewhere (another slot, the disk) without hidden rows, so the slot drafts
  // with MTP again only once its context is evaluated anew.
  void sync_mtp(Slot& s, bool own_rows = true);
  bool any_active() const;
  // Tokens of `prompt` that slot s's evaluated context can serve.
  int common_prefix(const Slot& s, const std::vector<int32_t>& prompt) const;
  int group_of(const Slot& s) const { return s.id % n_groups; }
  // Takes queued requests into idle slots (recorded in `orders`); drops cancelled and expired
  // ones. Called unlocked.
  void admit(Clock::time_point now, StepOrders& orders);
  void start(Slot& s, Pending&& p);
  // Ends active requests whose client cancelled or whose deadline passed; stage 0 only.
  void end_expired(Clock::time_point now, StepOrders& orders);
  void end_slot(Slot& s, bool timed_out);
  // Ends the active request of slot s (its generation state says why) and sends its final event.
  void finish(Slot& s, bool timed_out = false);
  void fail_slot(Slot& s, const std::string& message);
  // Keeps only the evaluated context (for prefix reuse), or frees the slot's KV blocks.
  void release(Slot& s, bool drop);
  // Gauges that follow the slots; the caller holds `mutex`.
  void publish_locked();

  // --- one step (scheduler_step.cpp) ---
  // One forward pass over the active slots and its sampling. Throws when the pass fails in a
  // pipeline (the link is gone; the caller ends the scheduler); fails the step's requests
  // otherwise.
  void step(Batch& batch, std::vector<float>& logits, std::vector<int>& rows);
  // Samples (or, before the last pipeline stage, receives) the tokens of a step's `rows` from
  // `logits` (one row per draft plus one, per slot; empty without logits) and applies them.
  void settle(const std::vector<int>& rows, std::span<const float> logits);
  // What slot s's step sampled (the accepted drafts, then one more token): the KV positions of
  // rejected drafts go, the context grows, and the request may finish.
  void after_take(Slot& s, const Generation::Step& step);

  // --- a pipeline stage (pipeline_follower.cpp) ---
  // A stage after the first: receives stage 0's orders and applies them. False: stop.
  bool follow();
  // A later stage: stage 0's orders on this stage's slots.
  void apply(StepOrders& orders);
  Slot& checked_slot(int id, bool active);
  // A step of slot s has gone forward and its token is not in yet.
  bool awaits_token(const Slot& s) const;
  // Takes the tokens of the in-flight steps of the group whose turn is next (all: `all`).
  void settle_due(bool all = false);
};

}  // namespace sluice
