// Expert parallel: this process computes only the routed experts it owns, and the MoE block
// trades slot outputs with the processes owning the rest. The model sees this interface, never
// MPI (src/mpi implements it). Every process routes identically (it runs the same attention and
// router on the same inputs), so each knows without asking which process fills which slot; the
// block then sums every token's slots in slot order, so the output is bit-identical to one
// process computing all experts. A process may hold replicas of experts others own; which holder
// computes a replicated expert's slots is decided per layer from the routing, the same way on
// every process (ExpertPlacement::assign), so no message says it.
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

class ExpertShard {
 public:
  virtual ~ExpertShard() = default;
  // This process's index among those sharing the experts (its MPI rank).
  virtual int rank() const = 0;
  // Whether this process holds expert e of layer il (owns it or a replica of it): what it keeps in
  // memory or its cache, and may compute.
  virtual bool holds(int il, int e) const = 0;
  // The process computing each slot of layer il's routing `ids` (n_rows·n_used); rows with
  // active[t] == 0 (active non-null) get -1. Valid until the next call.
  virtual std::span<const int16_t> assign(int il, std::span<const int32_t> ids, int n_used,
                                          const uint8_t* active) = 0;
  // slot_out (n_rows·n_used, n_embd): this process has filled the slots `slot_rank` (from assign)
  // gives it; sends them to the other processes and fills the other slots from theirs. Throws
  // sluice::Error naming a process that does not answer within the deadline.
  virtual void exchange(int il, std::span<const int16_t> slot_rank, int64_t n_embd,
                        float* slot_out) = 0;
};

}  // namespace sluice
