// What a routing trace says about streaming: how often a token's experts repeat those of the
// tokens before it, how concentrated the choices are, how each cache policy and Belady's optimum
// would fare (cache_sim.h) and how well the router lookahead predicted each layer. `sluice
// route-stats` prints these for a model's own routing beside the same figures for uniform
// routing (uniform_like), which is what every generated model has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experts/cache_sim.h"
#include "experts/routing_trace.h"
#include "sluice/types.h"

namespace sluice {

// The cache sizes simulated, as fractions of the routed experts (layers × experts per layer).
inline const std::vector<double> kCacheFractions{0.125, 0.25, 0.5, 0.75};

// The one rule that turns a trace into the store's requests: each forward pass of the trace, in
// order, asks each routed layer for the union of its rows' experts, in first-use order (rows in
// order, each row's experts in selection order), as the MoE block asks the store. With
// row_passes every row is a pass of its own (decode one token a step, whatever the trace
// recorded). Requests of the passes that start in rows [first_row, end_row) are the counted ones.
CacheRequests cache_requests(const RoutingTrace& trace, const std::vector<int>& routed_layers,
                             bool row_passes, size_t first_row = 0, size_t end_row = SIZE_MAX);

// A cache's hits pass by pass, for a plot over the run (route-stats --timeline): each counted
// pass's first trace row, the experts it asked for over its layers, and how many of them each
// policy and Belady found in memory, simulated with `slots` experts from the first pass on.
struct CacheTimeline {
  std::vector<std::string> policies;  // the store's policies, then "belady"
  struct Pass {
    size_t row = 0;
    uint64_t requested = 0;
    std::vector<uint64_t> hits;  // per policies entry
  };
  std::vector<Pass> passes;
};

struct RoutingStatsOptions;
CacheTimeline cache_timeline(const RoutingTrace& trace, const RoutingStatsOptions& options, int slots);

struct RoutingStatsOptions {
  bool row_passes = false;   // cache_requests' row_passes
  std::vector<int> slots;    // cache sizes (experts) simulated after the kCacheFractions ones
  size_t first_row = 0;      // the cache figures count the passes that start in these rows
  size_t end_row = SIZE_MAX;
};

struct RoutingFigures {
  uint64_t tokens = 0;    // rows routed at this layer (overall: rows)
  double reuse_prev = 0;  // share of a token's experts also chosen at its sequence's previous token
  double reuse_within_8 = 0;    // ... at any of its previous 8 (tokens with 8 before them)
  double experts_share_50 = 0;  // smallest share of experts that carries 50 % of the selections
  double experts_share_90 = 0;  // ... 90 % (overall: the mean over layers)
  // policy name ("lru", "lfu", "nextuse", "belady") → hit rate per RoutingStats::cache_keys entry
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
  // The simulated caches: kCacheFractions' (keys "0.125", ...), then RoutingStatsOptions::slots'
  // (keys "256 slots", ...), and the experts each holds.
  std::vector<std::string> cache_keys;
  std::vector<int> cache_slots;
  // The counted passes (RoutingStatsOptions' rows): passes, rows, layer requests, the experts
  // they asked for (each a pass's union) and the experts their rows chose (the bound without
  // sharing: rows × routed layers × n_used).
  uint64_t passes = 0, pass_rows = 0, layer_requests = 0, experts_requested = 0, row_experts = 0;
  RoutingFigures overall;
  std::vector<RoutingFigures> layers;  // per layer (empty figures for layers that do not route)
};

// Computes every figure. Rows are taken in trace order; reuse compares rows of the same sequence.
// Throws when the counted rows are out of the trace's range.
RoutingStats routing_stats(const RoutingTrace& trace, const RoutingStatsOptions& options = {});

// A trace of the same shape, rows and routed layers whose choices (and predictions) are drawn
// uniformly at random, distinct per token: the baseline a cache cannot beat by more than its share.
RoutingTrace uniform_like(const RoutingTrace& trace, uint64_t seed);

}  // namespace sluice
