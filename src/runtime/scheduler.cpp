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
// This file holds the public API and the loop; scheduler_impl.h lists the parts beside it.
#include <algorithm>

#include "core/error.h"
#include "runtime/scheduler_impl.h"

namespace sluice {

Scheduler::Impl::Impl(Engine& e, const SchedulerOptions& o)
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
        std::clamp(o.micro_batches > 0 ? o.micro_batches : link->splits_layers() ? link->n_stages() : 1,
                   1, o.n_parallel);
    stats.micro_batches = n_groups;
  }
  kv = engine.make_kv_cache(engine.n_ctx);
  if (!o.kv_disk_dir.empty())
    disk = std::make_unique<SlotDisk>(o.kv_disk_dir, o.kv_disk_max, engine.model_id(), *kv);
  slots.resize(o.n_parallel);
  for (int i = 0; i < o.n_parallel; ++i) {
    slots[i].id = i;
    if (mtp_drafts())
      slots[i].mtp = std::make_unique<MtpDrafter>(*engine.model, engine.n_ctx, engine.kv_config);
  }
  cache_map = std::make_shared<const ExpertCacheMap>(public_engine.expert_cache_map());
  publish_locked();  // no other thread sees the scheduler yet
}

// Each turn: the tokens due from earlier steps, then what changes (stage 0 decides, later stages
// follow), then one step.
void Scheduler::Impl::run() {
  Batch batch;
  std::vector<float> logits;
  std::vector<int> rows;
  try {
    for (;;) {
      settle_due();
      if (!(follower ? follow() : lead())) break;
      if (!follower) run_embeds();
      // Outside forward (prefix copy, allocation): fail what is running, keep serving.
      or_fail_active([&] { step(batch, logits, rows); });
      std::lock_guard<std::mutex> lock(mutex);
      publish_locked();
    }
  } catch (const std::exception& e) {
    // Only a pipeline gets here: a stage is gone or the stages disagree. Nothing more can run.
    failure = e.what();
    fail_active(fmt::format("the model's pipeline failed: {}", failure));
    std::lock_guard<std::mutex> lock(mutex);
    stats.pipeline_error = failure;
    for (Pending& p : queue)
      p.handle->push_error(fmt::format("the model's pipeline failed: {}", failure));
    queue.clear();
    stop = true;
  }
  if (!failure.empty() && options.on_pipeline_failure) options.on_pipeline_failure(failure);
  fail_active("the server is shutting down");
  std::lock_guard<std::mutex> lock(mutex);
  for (Pending& p : queue) p.handle->push_error("the server is shutting down");
  queue.clear();
  for (auto& t : embeds)
    t->result.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
  embeds.clear();
  finished = true;
  cv.notify_all();
}

bool Scheduler::Impl::lead() {
  // Stage 0 of a pipeline sends orders at least this often, even with nothing to do.
  const auto tick = std::chrono::duration<double>(link ? std::min(1.0, link->timeout() / 4) : 0);
  StepOrders orders;
  {
    std::unique_lock<std::mutex> lock(mutex);
    auto ready = [&] { return stop || !queue.empty() || !embeds.empty() || any_active(); };
    if (!link)
      cv.wait(lock, ready);
    else
      cv.wait_for(lock, tick, ready);
    orders.stop = stop;
  }
  if (orders.stop) {
    // Every token in before the stop order, as the other stages do after it.
    settle_due(true);
  } else {
    or_fail_active([&] {
      end_expired(Clock::now(), orders);
      admit(Clock::now(), orders);
    });
  }
  if (link) {
    std::vector<uint8_t> bytes = encode_orders(orders);
    link->broadcast(bytes);
  }
  return !orders.stop;
}

void Scheduler::Impl::run_embeds() {
  std::deque<std::shared_ptr<EmbedTask>> asked;
  {
    std::lock_guard<std::mutex> lock(mutex);
    asked.swap(embeds);
  }
  for (auto& t : asked) {
    try {
      t->result.set_value(embed_tokens(engine, t->tokens, t->pooling));
    } catch (...) {
      t->result.set_exception(std::current_exception());
    }
  }
}

void Scheduler::Impl::fail_active(const std::string& message) {
  for (Slot& s : slots)
    if (s.handle) fail_slot(s, message);
}

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
      if (!s.handle) impl_->disk->persist(s.id, s.ctx);
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
      p.deadline = SchedulerClock::now() + std::chrono::duration_cast<SchedulerClock::duration>(
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
