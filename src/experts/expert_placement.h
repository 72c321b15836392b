// Expert parallel (--split-mode experts): which process computes each routed expert. Every process
// runs the whole model (attention, norms, router, shared experts, head) and the routed experts it
// owns; the owners' slot outputs are exchanged each layer (experts/expert_shard.h). A rank may also
// hold replicas of the hottest experts others own: every rank routes identically, so each computes
// the same choice of holder for every slot (assign), and the replicas even out a layer's uneven
// routing without a message. The placement and the assignment are pure functions of the expert
// counts, the heat profile and the routing, so tests check them without MPI.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice {

struct ExpertPlacement {
  int n_ranks = 1;
  int n_expert = 0;
  // (n_layer, n_expert) flattened: the rank computing expert e of layer il; empty for a layer
  // without routed experts.
  std::vector<std::vector<int16_t>> owner;
  // (n_layer, n_expert): bit r set where rank r holds a replica of the expert (the owner's bit is
  // never set); empty: no replicas.
  std::vector<std::vector<uint64_t>> replicas;
  int owner_of(int il, int e) const { return owner[il][e]; }
  // Whether `rank` holds expert e of layer il (owns it or a replica of it).
  bool holds(int il, int e, int rank) const {
    return owner[il][e] == rank || (!replicas.empty() && (replicas[il][e] >> rank & 1));
  }
  // Experts of `rank` over all layers, and the share of all routed experts that is.
  int64_t owned(int rank) const;
  int64_t replicated(int rank) const;  // replicas `rank` holds over all layers
  int64_t total() const;               // routed experts over all layers
  double owned_fraction(int rank) const;
  // The share of all routed experts `rank` holds in memory: its own and its replicas.
  double held_fraction(int rank) const;
  // One line per rank: experts owned, replicas and the expected share of routed work (heat), for
  // messages.
  std::string summary(std::span<const double> heat) const;
  // Which rank computes each slot of layer il's routing `ids` (n_rows·n_used; rows with
  // active[t] == 0, active non-null, get -1). A slot of an expert without replicas goes to its
  // owner. Then the replicated experts the routing chose, most rows first (ties: lower index), go
  // each with all its rows to the holder with the fewest slots so far (ties: lower rank). Every
  // rank computes the same answer from the same routing; an expert's rows stay together, so each
  // computes them as one process would.
  void assign(int il, std::span<const int32_t> ids, int n_used, const uint8_t* active,
              std::vector<int16_t>& slot_rank) const;
  // Text form every rank can rebuild the same placement from (rank 0 computes, all read it).
  std::string encode() const;
  static ExpertPlacement decode(const std::string& text);
};

// Partitions each MoE layer's experts among `n_ranks` processes. Every rank gets the same number
// of experts per layer (±1: memory stays even), and within that the expected load is balanced:
// experts go hottest first to the rank with the least heat so far that still has room, so the hot
// experts spread across ranks instead of clustering by index. `heat` is (n_layer · n_expert)
// request counts (a saved heat profile); empty or all zero: uniform, which deals experts out
// round-robin. `moe_layer[il]` says which layers have routed experts.
// `replicas`: each rank also holds copies of that many experts per layer it does not own, the
// hottest first (without heat: the lowest indices), at most all the others (an error beyond that).
ExpertPlacement place_experts(const std::vector<bool>& moe_layer, int n_expert, int n_ranks,
                              std::span<const double> heat, int replicas = 0);
// The most replicas per layer a rank can hold: the experts of a layer it does not own.
int max_expert_replicas(int n_expert, int n_ranks);

}  // namespace sluice
