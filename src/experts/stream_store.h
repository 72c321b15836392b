// Streaming expert store: routed experts live on SSD and are read on demand into a fixed RAM
// cache of equal-size slots (no fragmentation, a hard byte budget), with nextuse (default), LRU
// or decayed-LFU eviction, io_uring/O_DIRECT reads, lookahead prefetch and a persisted heat profile for warm
// starts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "sluice/types.h"

namespace sluice {

// Where one slice (gate, up or down) of one expert lies in the model files.
struct FileRange {
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// File locations of every routed expert, indexed [layer · n_expert + expert][gate, up, down].
struct ExpertFileMap {
  std::vector<std::string> part_paths;
  int n_layer = 0;
  int n_expert = 0;
  std::vector<std::array<FileRange, 3>> ranges;
};

// EvictionPolicy (sluice/types.h) — lru: least recently used. lfu: decayed use count
// (recency-weighted). nextuse: estimated layer steps until the next use, from decayed frequency
// and layer order (see stream_store.cpp).

struct StreamOptions {
  uint64_t cache_bytes = 0;
  EvictionPolicy policy = EvictionPolicy::kNextUse;
  bool cold = false;              // skip the warm-start preload
  int64_t preload_limit = -1;     // most experts to preload (−1: fill the cache)
  std::string heat_path;          // heat profile file ("" disables persistence)
  bool lock_memory = true;        // mlock the slot arena
  bool debug = false;             // one log line per hit and miss
};

// Bytes one cache slot needs: the largest expert with each slice widened to O_DIRECT alignment.
uint64_t stream_slot_bytes(const ExpertFileMap& map);

// Throws when the budget holds fewer slots than one token's experts of a layer.
std::unique_ptr<ExpertStore> make_stream_store(const ExpertLayout& layout, const ExpertFileMap& map,
                                               const StreamOptions& options, int n_expert_used);

}  // namespace sluice
