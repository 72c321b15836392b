// A request's event queue between the scheduler thread and its client (see completion_handle.h).
#include "runtime/completion_handle.h"

namespace sluice {

bool HandleState::next(CompletionEvent& event, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return false;
  event = std::move(events_.front());
  events_.pop_front();
  if (event.kind != CompletionEvent::Kind::kText) finished_ = true;
  return true;
}

void HandleState::abandon(const std::string& message) {
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

bool HandleState::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

void HandleState::push(CompletionEvent event) {
  if (!keep_events_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abandoned_) return;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

void HandleState::push_text(std::string text, std::vector<TokenLogprob> logprobs) {
  if (text.empty() && logprobs.empty()) return;
  CompletionEvent e;
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  push(std::move(e));
}

void HandleState::push_error(std::string message) {
  CompletionEvent e;
  e.kind = CompletionEvent::Kind::kError;
  e.text = std::move(message);
  push(std::move(e));
}

void HandleState::push_cancelled(bool timed_out) {
  CompletionEvent done;
  done.kind = CompletionEvent::Kind::kDone;
  done.result.finish = FinishReason::kCancelled;
  done.timed_out = timed_out;
  push(std::move(done));
}

}  // namespace sluice
