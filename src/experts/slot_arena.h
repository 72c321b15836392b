// The slot arena of the streaming expert cache: one locked allocation cut into slots, each holding
// one expert. Experts of equal size form a size class with its own slots, so a file whose
// layers mix expert types (Q4_K layers among IQ2_XXS ones) wastes no bytes on small experts and
// the arena never fragments; the budget is shared among classes in proportion to their bytes in
// the file. The arena maps keys (layer · n_expert + expert) to slots and keeps each slot's state;
// which slot to refill is the store's and the eviction policy's decision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "experts/expert_file_map.h"

namespace sluice {

enum class SlotState : uint8_t { kEmpty, kLoading, kReady };

// How a slot's expert came to be read.
enum class SlotOrigin : uint8_t { kDemand, kRanked, kSet, kCertain };

struct Slot {
  int32_t key = -1;
  SlotState state = SlotState::kEmpty;
  SlotOrigin origin = SlotOrigin::kDemand;
  int8_t prefetch_rank = -1;     // rank of a ranked prediction
  bool unused_prefetch = false;  // prefetched and not yet requested
  bool reserved = false;         // certain prefetch: kept until its layer runs
  int pending = 0;               // reads in flight
  int pins = 0;                  // the current request still needs it
  double submitted = 0;          // clock at submission, for read latency
  std::string error;             // first failed read
};

struct SizeClass {
  uint64_t slot_bytes = 0;  // the class's largest expert widened for direct I/O
  int32_t first = 0;        // first slot
  int32_t count = 0;        // slots
  int64_t n_keys = 0;       // experts of this size in the file
};

class SlotArena {
 public:
  // Plans and allocates slots for `map` within `budget` bytes, at least min(min_slots, experts of
  // that size) per size class; throws when the budget cannot hold that. With `lock`, mlocks the
  // arena, shrinking it to what RLIMIT_MEMLOCK allows when that still holds the minimum.
  SlotArena(const ExpertFileMap& map, uint64_t budget, int min_slots, bool lock);
  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  int n_slots() const { return static_cast<int>(slots_.size()); }
  uint64_t bytes() const { return buf_.size(); }
  bool locked() const { return locked_; }
  const std::vector<SizeClass>& classes() const { return classes_; }
  // Size class of `key`, −1 for a layer without routed experts.
  int class_of(int32_t key) const { return key_class_[key]; }
  int32_t slot_of(int32_t key) const { return key_slot_[key]; }
  Slot& slot(int32_t s) { return slots_[s]; }
  const Slot& slot(int32_t s) const { return slots_[s]; }
  std::byte* data(int32_t s) { return buf_.data() + offset_[s]; }
  // Gives slot s to `key`, forgetting its previous expert; the slot's bookkeeping starts afresh.
  Slot& assign(int32_t s, int32_t key);
  // Empties slot s.
  void forget(int32_t s);
  // "4 slots × 1.2 MiB + 9 slots × 0.4 MiB = 8.4 MiB".
  std::string describe() const;

 private:
  void merge_classes_to_fit(uint64_t budget, int min_slots);
  void allocate(uint64_t budget, int min_slots);

  const ExpertFileMap& map_;
  std::vector<SizeClass> classes_;
  std::vector<int> key_class_;
  std::vector<int32_t> key_slot_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> offset_;  // per slot, into buf_
  AlignedBuffer buf_;
  bool locked_ = false;
};

}  // namespace sluice
