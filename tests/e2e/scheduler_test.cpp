// The continuous-batching Scheduler through the public API on the shipped tiny model: requests
// batched together (with prefill chunked across steps, so prompts and decode rows share forward
// passes) produce exactly the tokens Session::generate produces for each alone; a shared prompt
// prefix is copied from a busy slot instead of being prefilled; cancelling frees the KV blocks.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "sluice/sluice.h"

namespace {

using namespace std::chrono_literals;
const std::string kModel = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";

std::unique_ptr<sluice::Engine> load() { return sluice::Engine::load({.model_path = kModel, .n_threads = 1}); }

sluice::GenerateOptions greedy(int n) {
  sluice::GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  return o;
}

// Waits for the final event; returns it (text events are accumulated into result.text anyway).
sluice::CompletionEvent wait(sluice::CompletionHandle& h) {
  sluice::CompletionEvent ev;
  for (int i = 0; i < 600; ++i)
    if (h.next(ev, 100ms) && ev.kind != sluice::CompletionEvent::Kind::kText) return ev;
  ADD_FAILURE() << "no final event within 60 s";
  return ev;
}

}  // namespace

TEST(Scheduler, BatchedGreedyEqualsSessionGenerate) {
  auto engine = load();
  const std::vector<std::string> prompts = {"And God said", "In the beginning God created the heaven",
                                            "The LORD is my shepherd; I shall not want", "Blessed"};
  std::vector<sluice::GenerateResult> alone;
  {
    for (const auto& p : prompts) {
      auto session = engine->new_session();
      alone.push_back(session->generate(engine->tokenize(p, true), greedy(20), nullptr));
    }
  }
  // Prefill chunk 3: longer prompts take several steps, mixed with the others' decode rows.
  sluice::Scheduler sched(*engine, {.n_parallel = 4, .max_queue = 4, .prefill_chunk = 3});
  std::vector<std::shared_ptr<sluice::CompletionHandle>> handles;
  for (const auto& p : prompts) {
    sluice::Submission s = sched.submit({.prompt = engine->tokenize(p, true), .options = greedy(20)});
    ASSERT_EQ(s.status, sluice::SubmitStatus::kOk) << s.message;
    handles.push_back(s.handle);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const sluice::CompletionEvent ev = wait(*handles[i]);
    ASSERT_EQ(ev.kind, sluice::CompletionEvent::Kind::kDone) << ev.text;
    EXPECT_EQ(ev.result.tokens, alone[i].tokens) << prompts[i];
    EXPECT_EQ(ev.result.text, alone[i].text) << prompts[i];
    EXPECT_EQ(ev.result.finish, sluice::FinishReason::kLength);
  }
  const sluice::SchedulerStats st = sched.stats();
  EXPECT_EQ(st.generated_tokens, 80u);
  EXPECT_LT(st.steps, 80u) << "requests were not batched";
  EXPECT_GT(st.batch_rows, st.steps) << "no step held more than one row";
}

TEST(Scheduler, SharedPrefixIsCopiedFromABusySlotAndCancelFreesKv) {
  auto engine = load();
  sluice::Scheduler sched(*engine, {.n_parallel = 2, .max_queue = 0, .prefill_chunk = 64});
  const auto prompt = engine->tokenize("And God said, Let there be light: and there was light", true);
  auto first = sched.submit({.prompt = prompt, .options = greedy(100)});
  ASSERT_EQ(first.status, sluice::SubmitStatus::kOk);
  sluice::CompletionEvent ev;
  ASSERT_TRUE(first.handle->next(ev, 10s));  // first text: its prompt is in the KV cache
  auto second = sched.submit({.prompt = prompt, .options = greedy(3)});
  ASSERT_EQ(second.status, sluice::SubmitStatus::kOk);
  auto third = sched.submit({.prompt = prompt, .options = greedy(3)});
  EXPECT_EQ(third.status, sluice::SubmitStatus::kQueueFull);
  const sluice::CompletionEvent done = wait(*second.handle);
  ASSERT_EQ(done.kind, sluice::CompletionEvent::Kind::kDone);
  EXPECT_EQ(done.result.n_reused, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(done.result.n_prompt, 1);
  const uint64_t both = sched.stats().kv_bytes;  // two sequences of one 256-position block each
  EXPECT_GT(both, 0u);
  first.handle->cancel();
  const sluice::CompletionEvent cancelled = wait(*first.handle);
  EXPECT_EQ(cancelled.result.finish, sluice::FinishReason::kCancelled);
  // The finished request keeps its block for prefix reuse; the cancelled one's is freed.
  uint64_t after = both;
  for (int i = 0; i < 100 && after == both; ++i) {
    std::this_thread::sleep_for(10ms);
    after = sched.stats().kv_bytes;
  }
  EXPECT_EQ(after, both / 2);
  const auto too_long = sched.submit({.prompt = std::vector<int32_t>(sched.n_ctx(), prompt[1]), .options = greedy(1)});
  EXPECT_EQ(too_long.status, sluice::SubmitStatus::kContextOverflow);
}

// The engine lends its expert store (and pool) to one user at a time: while a Scheduler runs, a
// Session's evaluation and a second Scheduler are refused instead of sharing the cache; once the
// scheduler is gone the session runs.
TEST(Scheduler, OwnsTheEnginesExpertStoreWhileItRuns) {
  auto engine = load();
  auto session = engine->new_session();
  const std::vector<int32_t> prompt = engine->tokenize("And God said", true);
  {
    sluice::Scheduler sched(*engine, {.n_parallel = 1});
    try {
      session->evaluate(prompt);
      ADD_FAILURE() << "a Session ran while the Scheduler held the expert store";
    } catch (const sluice::Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert store is in use"), std::string::npos) << e.what();
    }
    EXPECT_THROW(sluice::Scheduler(*engine, {.n_parallel = 1}), sluice::Error);
  }
  EXPECT_EQ(session->evaluate(prompt).size(), static_cast<size_t>(engine->info().n_vocab));
}
