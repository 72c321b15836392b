// The expert cache simulated on a request sequence, without I/O: how often each eviction policy
// of the streaming store (the engine's own Evictor classes, driven as StreamStore drives them)
// and Belady's offline optimum would find a requested expert in memory. `sluice route-stats`
// runs it on routing traces; the retuning of the store's defaults is judged against it.
//
// The model: one cache of n_slots experts shared by every layer (one size class, as for files
// whose experts are all alike). Requests come one layer at a time, in the order the engine makes
// them: each forward pass walks its routed layers in order and asks each for the union of its
// rows' experts (routing_stats.h builds them from a trace). A hit is an expert in memory when its
// request begins. A request's experts are pinned until it ends, so one request never evicts its
// own experts while the cache has another choice; a miss fills an empty slot, else evicts the
// unpinned expert the policy values least (Belady: the one used farthest in the future, or
// never). A request larger than the cache (a prompt pass's union) recycles, as the store does,
// the slot of its own expert handed out first (its hits, then its misses in order). No prefetch
// and no timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sluice/types.h"

namespace sluice {

// The layer requests in order: request i asks layer[i] for ids[begin[i] .. begin[i+1]).
struct CacheRequests {
  int n_layer = 0;
  int n_expert = 0;
  std::vector<int32_t> layer;
  std::vector<uint32_t> begin{0};
  std::vector<int32_t> ids;
  // Requests counted in the results: [count_begin, count_end) (a measured part of a run); the
  // cache is simulated from the first request either way.
  size_t count_begin = 0, count_end = SIZE_MAX;
  void add(int il, const int32_t* e, int n) {
    layer.push_back(il);
    ids.insert(ids.end(), e, e + n);
    begin.push_back(static_cast<uint32_t>(ids.size()));
  }
  size_t size() const { return layer.size(); }
};

struct CacheSimResult {
  // Counted from the first counted request (CacheRequests::count_begin) after the cache was full
  // (warm-up excluded, as published figures are), or from count_begin when it is not full by
  // count_end.
  uint64_t requests = 0, hits = 0;
  std::vector<uint64_t> layer_requests, layer_hits;  // per layer, same counting
  uint64_t warmup_requests = 0;  // counted layer requests before the cache was full
  // Per request, every one (counted or not): how many of its experts were found in memory.
  std::vector<uint32_t> request_hits;
  double hit_rate() const { return requests ? static_cast<double>(hits) / requests : 0.0; }
  double layer_hit_rate(int il) const {
    return layer_requests[il] ? static_cast<double>(layer_hits[il]) / layer_requests[il] : 0.0;
  }
};

// One of the store's policies. Throws when n_slots < 1.
CacheSimResult simulate_cache(const CacheRequests& reqs, int n_slots, EvictionPolicy policy);
// Belady's offline optimum on the same model: the best any policy could do without prefetch.
CacheSimResult simulate_belady(const CacheRequests& reqs, int n_slots);

}  // namespace sluice
