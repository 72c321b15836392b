// The scheduler as a pipeline stage (see scheduler_impl.h). Stages after the first follow stage
// 0's orders (admissions, cancellations, timeouts, stop) on their own slots and build the same
// batch by the same rules. With several micro-batches a stage before the last sends a step on and
// computes the next group's step at once; it takes a step's tokens when that group's turn comes
// round again.
#include <algorithm>

#include "core/error.h"
#include "runtime/scheduler_impl.h"

namespace sluice {

bool Scheduler::Impl::follow() {
  std::vector<uint8_t> bytes;
  link->broadcast(bytes);
  StepOrders orders = decode_orders(bytes);
  if (orders.stop) {
    settle_due(true);
    return false;
  }
  apply(orders);
  return true;
}

void Scheduler::Impl::apply(StepOrders& orders) {
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

Slot& Scheduler::Impl::checked_slot(int id, bool active) {
  if (id < 0 || id >= static_cast<int>(slots.size()) || (slots[id].handle != nullptr) != active)
    fail("stage 0 ordered {} slot {}, which is {} here: the stages disagree",
         active ? "the end of" : "a request into", id,
         id >= 0 && id < static_cast<int>(slots.size()) && slots[id].handle ? "active"
                                                                            : "idle or missing");
  return slots[id];
}

bool Scheduler::Impl::awaits_token(const Slot& s) const {
  return std::any_of(in_flight.begin(), in_flight.end(), [&](const InFlight& f) {
    return std::find(f.rows.begin(), f.rows.end(), s.id) != f.rows.end();
  });
}

void Scheduler::Impl::settle_due(bool all) {
  const int group = static_cast<int>(n_steps % n_groups);
  while (!in_flight.empty() && (all || in_flight.front().group == group)) {
    const InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    settle(f.rows, {});
  }
}

}  // namespace sluice
