// Streaming expert store: routed experts live on SSD and are read on demand into a fixed RAM
// cache (the slot arena: one size class per expert size, a hard byte budget), with an eviction
// policy (lru, lfu, nextuse), io_uring/O_DIRECT reads, precision-gated lookahead prefetch and a
// persisted heat profile for warm starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/eviction.h"
#include "experts/expert_file_map.h"
#include "experts/expert_store.h"
#include "sluice/types.h"

namespace sluice {

struct StreamOptions {
  uint64_t cache_bytes = 0;
  EvictionPolicy policy = EvictionPolicy::kNextUse;
  bool cold = false;           // skip the warm-start preload
  int64_t preload_limit = -1;  // most experts to preload (−1: fill the cache)
  std::string heat_path;       // heat profile file ("" disables persistence)
  bool lock_memory = true;     // mlock the slot arena
  bool debug = false;          // one log line per hit and miss
  // Expert parallel: (n_layer · n_expert) flags of the experts this process computes; only those
  // are preloaded. Empty: all.
  std::vector<uint8_t> owned{};
};

// Throws when the budget holds fewer slots of some expert size than one token's experts of a layer.
std::unique_ptr<ExpertStore> make_stream_store(const ExpertLayout& layout, const ExpertFileMap& map,
                                               const StreamOptions& options, int n_expert_used);

}  // namespace sluice
