// The scheduler's side of a submitted request's CompletionHandle (sluice/serving.h): the scheduler
// thread pushes events, the client's thread takes them; cancel() and abandon() come from the
// client at any time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/serving.h"

namespace sluice {

class HandleState final : public CompletionHandle {
 public:
  // `keep_events` false: a pipeline stage's copy of stage 0's request, which has no client.
  explicit HandleState(bool keep_events = true) : keep_events_(keep_events) {}
  bool next(CompletionEvent& event, std::chrono::milliseconds wait) override;
  void cancel() override { cancelled_.store(true); }
  void abandon(const std::string& message) override;
  bool finished() const override;

  bool cancelled() const { return cancelled_.load(); }
  void push(CompletionEvent event);
  // A kText event, unless both are empty.
  void push_text(std::string text, std::vector<TokenLogprob> logprobs);
  void push_error(std::string message);
  // The final kDone event of a request that never ran (dropped from the queue).
  void push_cancelled(bool timed_out);

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<CompletionEvent> events_;
  std::atomic<bool> cancelled_{false};
  bool finished_ = false;
  bool abandoned_ = false;  // abandon(): its error is the last event
  const bool keep_events_;
};

}  // namespace sluice
