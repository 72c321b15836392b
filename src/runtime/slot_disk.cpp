// Slots' KV contexts on disk (see slot_disk.h).
#include "runtime/slot_disk.h"

#include <algorithm>
#include <optional>

namespace sluice {

SlotDisk::SlotDisk(std::string dir, uint64_t max_bytes, std::string model_id, KvCache& kv)
    : disk_(std::move(dir), max_bytes, std::move(model_id), kv.layout_id()), kv_(kv) {}

void SlotDisk::persist(int seq, std::span<const int32_t> ctx) {
  const int n = std::min<int>(kv_.length(seq), static_cast<int>(ctx.size()));
  if (n < KvDisk::kMinTokens) return;
  disk_.put(std::vector<int32_t>(ctx.begin(), ctx.begin() + n), kv_.export_prefix(seq, n));
}

bool SlotDisk::swap_in(int seq, std::span<const int32_t> ctx, const std::vector<int32_t>& prompt,
                       int keep) {
  if (kv_.length(seq) > keep) persist(seq, ctx);
  int from_disk = 0;
  std::optional<KvState> st = disk_.take(prompt, keep, kv_.max_rollback(), &from_disk);
  if (!st) return false;
  kv_.import_prefix(seq, static_cast<int>(st->tokens.size()), st->kv);
  kv_.truncate(seq, from_disk);
  return true;
}

void SlotDisk::publish(SchedulerStats& stats) const {
  const KvDiskStats& d = disk_.stats();
  stats.kv_disk_hits = d.hits;
  stats.kv_disk_misses = d.misses;
  stats.kv_disk_bytes_read = d.bytes_read;
  stats.kv_disk_bytes_written = d.bytes_written;
  stats.kv_disk_bytes = d.bytes;
  stats.kv_disk_skipped = d.skipped;
}

}  // namespace sluice
