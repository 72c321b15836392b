// Where every routed expert lies in the model files, and the bytes a cache slot needs to read it
// with direct I/O (each slice widened to the O_DIRECT alignment at both ends).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "experts/ssd_reader.h"

namespace sluice {

// File locations of every routed expert, indexed [layer · n_expert + expert][part].
struct ExpertFileMap {
  std::vector<std::string> part_paths;
  int n_layer = 0;
  int n_expert = 0;
  std::vector<ExpertRanges> ranges;
};

// The file map of `layout`'s experts, from its tensors' file ranges.
ExpertFileMap expert_file_map(const ExpertLayout& layout, int n_layer,
                              std::vector<std::string> part_paths);

inline uint64_t align_up_direct(uint64_t v) {
  return (v + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}
inline uint64_t align_down_direct(uint64_t v) {
  return v / kDirectAlign * kDirectAlign;
}
// Bytes a direct read of r covers.
inline uint64_t widened(const FileRange& r) {
  return r.length == 0 ? 0 : align_up_direct(r.offset + r.length) - align_down_direct(r.offset);
}
// Bytes a cache slot needs for expert `key`; 0 for a layer without routed experts.
inline uint64_t expert_slot_bytes(const ExpertFileMap& map, int32_t key) {
  uint64_t b = 0;
  for (const FileRange& r : map.ranges[key]) b += widened(r);
  return b;
}

}  // namespace sluice
