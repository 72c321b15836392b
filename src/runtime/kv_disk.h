// The server's KV prefixes on disk (--kv-disk DIR [--kv-disk-max SIZE]): a context a slot is about
// to overwrite, and every idle slot's context when the scheduler stops, is written as a KV state
// file (runtime/kv_state.h) named by a hash of its tokens; a request whose prompt shares a longer
// prefix with a file than with any slot restores it and prefills only the rest. Files of another
// model or KV layout are left alone; unreadable ones are skipped with a warning. Over the size
// limit the least recently used files are deleted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kv_state.h"

namespace sluice {

struct KvDiskStats {
  uint64_t hits = 0, misses = 0;            // lookups that restored a prefix / found none
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t bytes = 0;                        // held in the directory now (this model's files)
  uint64_t skipped = 0;                      // files skipped as unreadable
};

class KvDisk {
 public:
  // Contexts shorter than this are not worth a file.
  static constexpr int kMinTokens = 64;

  // Scans `dir` (created when missing) for this model's states.
  KvDisk(std::string dir, uint64_t max_bytes, std::string model_id, std::string kv_id);

  // The state sharing the longest reusable prefix with `prompt`, when longer than `than` tokens
  // (its reusable length in *common); counts a hit or a miss. A state is only usable when cutting
  // it back to that prefix drops at most `max_drop` positions (the cache's max_rollback).
  std::optional<KvState> take(const std::vector<int32_t>& prompt, int than, int max_drop,
                              int* common);
  // Stores a context unless the same tokens are already on disk.
  void put(const std::vector<int32_t>& tokens, std::vector<std::byte> kv);
  const KvDiskStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::string path;
    std::vector<int32_t> tokens;
    uint64_t bytes = 0;
    uint64_t used = 0;  // recency
  };
  void evict();

  std::string dir_;
  uint64_t max_bytes_;
  std::string model_id_, kv_id_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  KvDiskStats stats_;
};

}  // namespace sluice
