// What the first stage's batch scheduler decides before each step, as the other stages of a
// pipeline receive it. Only stage 0 has clients and a clock, so only it admits requests, notices
// cancellations and timeouts, and stops; every other stage's scheduler applies these orders to its
// own slots and then builds the same batch by the same rules (runtime/scheduler.cpp). Requests
// travel whole (prompt, sampling options, stop strings), so the last stage can sample them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/serving.h"

namespace sluice {

struct StepOrders {
  struct Start {
    int slot = 0;
    CompletionRequest request;  // timeout_seconds is stage 0's business and not sent
  };
  std::vector<int> cancelled;  // active slots whose client went away, ended before the step
  std::vector<int> timed_out;  // active slots past their deadline
  std::vector<Start> started;  // in admission order
  bool stop = false;           // the scheduler is shutting down: no step follows

  bool empty() const { return cancelled.empty() && timed_out.empty() && started.empty() && !stop; }
};

std::vector<uint8_t> encode_orders(const StepOrders& orders);
// Fails (sluice::Error) on bytes that encode_orders did not write.
StepOrders decode_orders(std::span<const uint8_t> bytes);

}  // namespace sluice
