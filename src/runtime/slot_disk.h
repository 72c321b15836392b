// The scheduler's slots over the KV-on-disk cache (--kv-disk, runtime/kv_disk.h): a slot's context
// that a new request is about to overwrite goes to disk, a prompt that shares a longer prefix with
// a file than with any slot is restored from it, and idle slots are written when the scheduler
// stops.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "runtime/kv_disk.h"
#include "sluice/serving.h"

namespace sluice {

class SlotDisk {
 public:
  SlotDisk(std::string dir, uint64_t max_bytes, std::string model_id, KvCache& kv);

  // Writes sequence `seq`'s evaluated context (`ctx` is its token history) to disk.
  void persist(int seq, std::span<const int32_t> ctx);
  // Before sequence `seq` takes `prompt`, keeping `keep` of its own positions: writes the context
  // that goes, then restores the file sharing a longer prefix than `keep` (true), if any.
  bool swap_in(int seq, std::span<const int32_t> ctx, const std::vector<int32_t>& prompt, int keep);
  // The disk counters into `stats` (kv_disk_*).
  void publish(SchedulerStats& stats) const;

 private:
  KvDisk disk_;
  KvCache& kv_;
};

}  // namespace sluice
