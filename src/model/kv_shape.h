// A model's KV cache as its architecture's rule states it from the file's keys (kv_shape in
// archs/registry.h): the one description that the planner sizes (plan/sizing.h, estimate_kv) and
// Model::make_kv_cache allocates by, so the estimate and the cache cannot drift apart.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/ds4_cache.h"
#include "kv/kv_cache.h"

namespace sluice {

// Blocks beyond any real model (a corrupt or hostile header): no shape rather than per-layer
// tables of that size; loading such a file fails on its missing tensors anyway.
constexpr int64_t kMaxKvBlocks = 1 << 16;

struct KvShape {
  // Per block of the file (block_count: the main layers, then any MTP blocks), for caches of K/V
  // rows (KvKind::kHeads, kLatent).
  std::vector<KvLayerShape> layers;
  // DeepSeek V4's cache (KvKind::kCompressed): a ratio per block; its row type is the
  // configuration's (ds4_row_type), set when a cache is made.
  std::optional<Ds4CacheShape> compressed;
  // Neither: the keys the rule needs are missing or out of range.
  bool empty() const { return layers.empty() && !compressed; }
};

}  // namespace sluice
