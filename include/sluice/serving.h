// sluice public API for serving many requests on one Engine: a continuous-batching Scheduler and
// chat prompt building. The scheduler owns one thread that runs every forward pass; requests join
// and leave its running batch at token boundaries, and each step evaluates one Batch holding a row
// per decoding request plus a bounded chunk of pending prompt tokens, so the MoE layer fetches each
// routed expert once per step for all requests. Callers (the HTTP server) talk to it only through
// submit() and the returned handle, from any thread.
//
//   sluice::Scheduler sched(*engine, {.n_parallel = 4});
//   auto sub = sched.submit({.prompt = engine->tokenize("Hello", true), .options = {}});
//   sluice::CompletionEvent ev;
//   while (sub.handle->next(ev, std::chrono::milliseconds(100)) || !sub.handle->finished()) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

struct SchedulerOptions {
  int n_parallel = 4;      // sequences decoded together; each owns one KV slot of the engine's n_ctx
  int max_queue = 64;      // requests waiting for a slot; submit() refuses more
  int prefill_chunk = 128;  // prompt tokens evaluated per step, shared by all prefilling requests
  std::string kv_disk_dir{};  // --kv-disk: evicted prefixes (and idle slots at stop) go here
  uint64_t kv_disk_max = 0;  // --kv-disk-max: bytes the directory may hold (0: unlimited)
  DraftOptions draft{};     // speculative decoding of every request (requests cannot choose)
  // Pipeline: requests are split into this many micro-batches that run through the stages at once
  // (0: one per stage; 1: one batch, each stage waits for the others). Every stage needs the same.
  int micro_batches = 0;
  // Pipeline stage 0: called once, on the scheduler's thread, when the pipeline failed (a stage
  // died, hung or disagreed); the requests it held have been answered with the error by then.
  std::function<void(const std::string& why)> on_pipeline_failure{};
};

struct CompletionRequest {
  std::vector<int32_t> prompt;
  GenerateOptions options;
  double timeout_seconds = 0;  // from submission to the last token; ≤ 0: none
};

struct CompletionEvent {
  enum class Kind { kText, kDone, kError };
  Kind kind = Kind::kText;
  std::string text;       // kText: new output (complete UTF-8, stop strings withheld); kError: message
  std::vector<TokenLogprob>
      logprobs;           // kText: tokens sampled since the previous event (when asked)
  GenerateResult result;  // kDone: the whole result (finish reason, tokens, counts, timings)
  bool timed_out = false;  // kDone: cancelled because the request's timeout passed
};

// The caller's side of one submitted request. Events arrive in order: any number of kText, then
// exactly one kDone or kError. Dropping the handle without cancel() lets the request run on.
class CompletionHandle {
 public:
  virtual ~CompletionHandle() = default;
  // Waits up to `wait` for the next event; false if none arrived (or all were consumed).
  virtual bool next(CompletionEvent& event, std::chrono::milliseconds wait) = 0;
  // Asks the scheduler to stop the request at the next token boundary and free its KV; a kDone
  // event with FinishReason::kCancelled follows (also sent, with timed_out, when the timeout passes).
  virtual void cancel() = 0;
  // Cancels the request and makes its next event a kError with `message` at once, without waiting
  // for the scheduler (which may be stuck on a dead pipeline stage); later events are dropped.
  virtual void abandon(const std::string& message) = 0;
  // True once the final event (kDone or kError) has been taken by next().
  virtual bool finished() const = 0;
};

enum class SubmitStatus { kOk, kQueueFull, kContextOverflow, kInvalid };

struct Submission {
  SubmitStatus status = SubmitStatus::kOk;
  std::string message;  // why it was refused
  std::shared_ptr<CompletionHandle> handle;  // set when accepted
};

// One KV slot as the scheduler last published it (llama-server's /slots).
struct SlotStats {
  int id = 0;
  bool busy = false;    // holds a request
  int n_ctx = 0;        // context of the slot
  int n_cached = 0;     // tokens whose KV the slot holds (kept after a request for prefix reuse)
  int n_prompt = 0;     // prompt tokens of its current (or last) request
  int n_reused = 0;     // of them, served from a cached prefix (this slot's, another's, the disk's)
};

struct SchedulerStats {
  uint64_t requests = 0;           // accepted
  uint64_t rejected = 0;           // refused by submit()
  uint64_t completed = 0, cancelled = 0, timed_out = 0, failed = 0;
  uint64_t prompt_tokens = 0;      // prompt tokens of accepted requests
  uint64_t reused_tokens = 0;      // of them, served from a cached prefix
  uint64_t generated_tokens = 0;
  uint64_t steps = 0;              // forward passes
  uint64_t batch_rows = 0;         // tokens over all steps
  uint64_t decode_rows = 0;        // of them, rows of decoding requests (pending tokens and drafts)
  uint64_t drafted_tokens = 0;     // draft tokens verified
  uint64_t accepted_tokens = 0;    // of them, accepted
  int queue_depth = 0;             // waiting for a slot
  int active = 0;                  // holding a slot
  int last_batch_rows = 0;
  int last_batch_sequences = 0;
  double busy_seconds = 0;         // inside forward passes
  uint64_t kv_bytes = 0;           // KV blocks allocated over all slots
  uint64_t kv_disk_hits = 0, kv_disk_misses = 0;  // --kv-disk lookups that restored a prefix / did not
  uint64_t kv_disk_bytes_read = 0, kv_disk_bytes_written = 0, kv_disk_bytes = 0, kv_disk_skipped = 0;
  ExpertStats experts;             // snapshot taken after the last step
  uint64_t routing_trace_rows = 0; // rows in the routing trace after the last step (--routing-trace)
  int pipeline_stages = 1;         // stages of the engine's pipeline (1: the whole model here)
  int micro_batches = 1;           // groups of requests in flight through the pipeline at once
  std::string pipeline_error;      // set when a stage failed; the scheduler has stopped
  std::vector<SlotStats> slots;    // every KV slot, as of the last admission, step or release
};

class Scheduler {
 public:
  // The engine must outlive the scheduler, and no Session of it may run while the scheduler does
  // (they would share the model's thread pool and expert store).
  Scheduler(Engine& engine, const SchedulerOptions& options);
  ~Scheduler();  // stops the thread; unfinished requests get kError
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Only on a pipeline's stage 0 (or without a pipeline); another stage throws sluice::Error.
  Submission submit(CompletionRequest request);
  SchedulerStats stats() const;
  // The expert cache map as of the last forward pass (taken after each one, before its tokens are
  // delivered, as SchedulerStats::experts is).
  std::shared_ptr<const ExpertCacheMap> expert_cache() const;
  int n_ctx() const;  // context per request
  // The embedding of `tokens`: every position's final hidden state after the output norm, pooled
  // and scaled to unit L2 norm (n_embd floats). Computed on the scheduler's thread between two
  // steps, in a KV cache of its own (no slot is taken); blocks until done. Throws sluice::Error
  // for an empty input, one longer than n_ctx(), in a pipeline, or when the scheduler stops.
  std::vector<float> embed(std::span<const int32_t> tokens, Pooling pooling);
  // Pipeline stages after the first follow stage 0's scheduler: they take no requests, run the
  // steps stage 0 orders and stop when it does. join() waits for that, and throws sluice::Error
  // with the reason when the pipeline failed instead. (Elsewhere it waits for the destructor.)
  bool follows() const;
  void join();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct ChatPromptOptions {
  bool add_generation_prompt = true;    // end with the assistant's turn opening
  std::optional<bool> enable_thinking;  // the template's thinking switch; unset: its default
  std::string reasoning_effort;  // the template's reasoning_effort (gpt-oss: low/medium/high);
                                 // empty: its default
};

// Chat prompt tokens for an OpenAI-style conversation — the one prompt builder of the server and
// `sluice chat`. `messages_json`: the `messages` array as JSON text; `tools_json`: the `tools`
// array or empty. Renders the model's chat template (tokenizer.chat_template) with bos/eos token
// texts; the tokenizer adds BOS unless the rendered text already starts with it. A model without
// a template gets the plain fallback: system text, then "User: ..." and "Assistant: ..." lines
// (a reply that starts with a space or newline follows "Assistant:" as it is, so a reply's
// tokens are reused as generated), ending with "Assistant:"; callers stop at
// chat_stop_strings(). Throws sluice::Error naming the problem when the template fails.
// `rendered` receives the prompt text.
std::vector<int32_t> chat_prompt_tokens(Engine& engine, std::string_view messages_json,
                                        std::string_view tools_json, std::string* rendered = nullptr,
                                        const ChatPromptOptions& options = {});
// Stop strings a chat reply needs: "\nUser:" for the fallback format (so the model does not
// write the user's next turn), none for a model with a chat template.
std::vector<std::string> chat_stop_strings(const Engine& engine);

}  // namespace sluice
