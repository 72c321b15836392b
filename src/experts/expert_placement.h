// Expert parallel (--split-mode experts): which process computes each routed expert. Every process
// runs the whole model (attention, norms, router, shared experts, head) and the routed experts it
// owns; the owners' slot outputs are exchanged each layer (experts/expert_shard.h). The placement
// is a pure function of the expert counts and the heat profile, so a test checks it without MPI.
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
  int owner_of(int il, int e) const { return owner[il][e]; }
  // Experts of `rank` over all layers, and the share of all routed experts that is.
  int64_t owned(int rank) const;
  int64_t total() const;  // routed experts over all layers
  double owned_fraction(int rank) const;
  // One line per rank: experts owned and the expected share of routed work (heat), for messages.
  std::string summary(std::span<const double> heat) const;
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
ExpertPlacement place_experts(const std::vector<bool>& moe_layer, int n_expert, int n_ranks,
                              std::span<const double> heat);

}  // namespace sluice
