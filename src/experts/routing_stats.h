// What a routing trace says about streaming: how often a token's experts repeat those of the
// tokens before it, how concentrated the choices are, how each cache policy and Belady's optimum
// would fare (cache_sim.h) and how well the router lookahead predicted each layer. `sluice
// route-stats` prints these for a model's own routing beside the same figures for uniform
// routing (uniform_like), which is what every generated model has.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experts/routing_trace.h"
#include "sluice/types.h"

namespace sluice {

// The cache sizes simulated, as fractions of the routed experts (layers × experts per layer).
inline const std::vector<double> kCacheFractions{0.125, 0.25, 0.5, 0.75};

struct RoutingFigures {
  uint64_t tokens = 0;    // rows routed at this layer (overall: rows)
  double reuse_prev = 0;  // share of a token's experts also chosen at its sequence's previous token
  double reuse_within_8 = 0;    // ... at any of its previous 8 (tokens with 8 before them)
  double experts_share_50 = 0;  // smallest share of experts that carries 50 % of the selections
  double experts_share_90 = 0;  // ... 90 % (overall: the mean over layers)
  // policy name ("lru", "lfu", "nextuse", "belady") → hit rate per kCacheFractions entry
  std::map<std::string, std::vector<double>> hit_rate;
  // Router lookahead (traces with predictions; layers after the first routed one):
  bool has_lookahead = false;
  double lookahead_precision = 0;                // predicted experts that the token then chose
  double lookahead_recall = 0;                   // chosen experts that had been predicted
  std::vector<double> lookahead_rank_precision;  // per rank: that rank's prediction was chosen
};

struct RoutingStats {
  int n_layer = 0, n_expert = 0, n_used = 0;
  std::vector<int> routed_layers;  // layers that route (the others are dense or absent)
  std::vector<int> cache_slots;    // per kCacheFractions entry: experts the simulated cache holds
  RoutingFigures overall;
  std::vector<RoutingFigures> layers;  // per layer (empty figures for layers that do not route)
};

// Computes every figure. Rows are taken in trace order; reuse compares rows of the same sequence.
RoutingStats routing_stats(const RoutingTrace& trace);

// A trace of the same shape, rows and routed layers whose choices (and predictions) are drawn
// uniformly at random, distinct per token: the baseline a cache cannot beat by more than its share.
RoutingTrace uniform_like(const RoutingTrace& trace, uint64_t seed);

}  // namespace sluice
