// Slot arena planning and allocation (see slot_arena.h).
#include "experts/slot_arena.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "core/units.h"

namespace sluice {

namespace {

// Slots per class for `budget`: every class gets its minimum, then the budget is shared in
// proportion to each class's bytes in the file (what a cache of one slot size would hold of it),
// then leftover bytes buy more slots, largest class first. Never more slots than experts.
std::vector<int32_t> plan_counts(const std::vector<SizeClass>& cls, uint64_t budget,
                                 int min_slots) {
  std::vector<int32_t> n(cls.size(), 0);
  uint64_t need = 0, file_bytes = 0;
  for (size_t c = 0; c < cls.size(); ++c) {
    n[c] = static_cast<int32_t>(std::min<int64_t>(min_slots, cls[c].n_keys));
    need += n[c] * cls[c].slot_bytes;
    file_bytes += cls[c].n_keys * cls[c].slot_bytes;
  }
  if (need > budget) {
    if (cls.size() == 1)
      fail(
          "expert cache of {} holds {} experts of {}; a token needs {} per layer: raise "
          "--ssd-streaming-cache-experts",
          format_bytes(budget), budget / cls[0].slot_bytes, format_bytes(cls[0].slot_bytes),
          min_slots);
    std::string sizes;
    for (const auto& c : cls) sizes += (sizes.empty() ? "" : ", ") + format_bytes(c.slot_bytes);
    fail(
        "expert cache of {} cannot hold {} experts of each size in the file ({}): that needs {}; "
        "raise "
        "--ssd-streaming-cache-experts",
        format_bytes(budget), min_slots, sizes, format_bytes(need));
  }
  uint64_t used = 0;
  for (size_t c = 0; c < cls.size(); ++c) {
    const double share = static_cast<double>(budget) * static_cast<double>(cls[c].n_keys) /
                         static_cast<double>(file_bytes);
    n[c] =
        static_cast<int32_t>(std::clamp<int64_t>(static_cast<int64_t>(share), n[c], cls[c].n_keys));
    used += n[c] * cls[c].slot_bytes;
  }
  // Minimums raised above a class's share can overshoot: give back slots of classes above their
  // minimum, largest slots first.
  for (size_t c = cls.size(); c-- > 0 && used > budget;)
    while (used > budget && n[c] > std::min<int64_t>(min_slots, cls[c].n_keys))
      --n[c], used -= cls[c].slot_bytes;
  for (size_t c = cls.size(); c-- > 0;)
    while (n[c] < cls[c].n_keys && used + cls[c].slot_bytes <= budget)
      ++n[c], used += cls[c].slot_bytes;
  return n;
}

}  // namespace

SlotArena::SlotArena(const ExpertFileMap& map, uint64_t budget, int min_slots, bool lock)
    : map_(map), key_class_(map.ranges.size(), -1), key_slot_(map.ranges.size(), -1) {
  // Experts of one size (the bytes of their slices) form a class; its slots fit the largest
  // of them once widened for direct I/O, which depends on where each slice starts.
  std::map<uint64_t, int> cls_of_size;
  for (int32_t k = 0; k < static_cast<int32_t>(map.ranges.size()); ++k) {
    uint64_t raw = 0;
    for (const FileRange& r : map.ranges[k]) raw += r.length;
    if (raw > 0) cls_of_size.emplace(raw, 0);
  }
  for (auto& [raw, c] : cls_of_size) {
    c = static_cast<int>(classes_.size());
    classes_.push_back({});
  }
  for (int32_t k = 0; k < static_cast<int32_t>(map.ranges.size()); ++k) {
    uint64_t raw = 0;
    for (const FileRange& r : map.ranges[k]) raw += r.length;
    if (raw == 0) continue;
    SizeClass& c = classes_[key_class_[k] = cls_of_size.at(raw)];
    c.slot_bytes = std::max(c.slot_bytes, expert_slot_bytes(map, k));
    ++c.n_keys;
  }
  if (classes_.empty()) fail("internal: the expert file map holds no routed experts");
  merge_classes_to_fit(budget, min_slots);
  allocate(budget, min_slots);
  if (!lock) return;
  if (mlock(buf_.data(), buf_.size()) == 0) {
    locked_ = true;
    return;
  }
  // When the whole arena cannot be locked (RLIMIT_MEMLOCK without CAP_IPC_LOCK), shrink the cache
  // to what can be, as long as that still holds the minimum; otherwise keep it whole and unlocked.
  const int err = errno;
  rlimit rl{};
  const uint64_t lockable =
      getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 0;
  if (lockable > 0 && lockable < buf_.size()) {
    const uint64_t before = buf_.size();
    const int n_before = n_slots();
    try {
      allocate(lockable, min_slots);
      locked_ = mlock(buf_.data(), buf_.size()) == 0;
      SLUICE_LOG_WARN(
          "experts: only {} of memory can be locked (ulimit -l); the cache shrinks from {} slots "
          "({}) to {} "
          "({}). Raise the limit, or pass --no-mlock to keep the full cache unlocked",
          format_bytes(lockable), n_before, format_bytes(before), n_slots(),
          format_bytes(buf_.size()));
      return;
    } catch (const Error&) {
      allocate(budget, min_slots);
    }
  }
  SLUICE_LOG_WARN(
      "experts: could not mlock the {} cache ({}; lockable: {}); it stays unlocked and may be "
      "swapped",
      format_bytes(buf_.size()), std::strerror(err), lockable ? format_bytes(lockable) : "unknown");
}

// Each class needs its own minimum of slots, so a small budget over many sizes can hold the
// minimum with one class of the widest slots but not with a class per size. Then the smallest
// class joins the next larger one (its experts take the larger slots) until the minimum fits:
// size classes save bytes when the budget allows, and never need more than one slot size would.
void SlotArena::merge_classes_to_fit(uint64_t budget, int min_slots) {
  auto need = [&] {
    uint64_t b = 0;
    for (const SizeClass& c : classes_) b += std::min<int64_t>(min_slots, c.n_keys) * c.slot_bytes;
    return b;
  };
  while (classes_.size() > 1 && need() > budget) {
    // Classes are ordered by raw expert size; the widened slot sizes follow that order closely but
    // not exactly, so join the class with the smallest slots into the one with the next larger.
    size_t small = 0;
    for (size_t c = 1; c < classes_.size(); ++c)
      if (classes_[c].slot_bytes < classes_[small].slot_bytes) small = c;
    size_t into = small == 0 ? 1 : 0;
    for (size_t c = 0; c < classes_.size(); ++c)
      if (c != small && classes_[c].slot_bytes < classes_[into].slot_bytes) into = c;
    classes_[into].n_keys += classes_[small].n_keys;
    for (int& k : key_class_) {
      if (k == static_cast<int>(small)) k = static_cast<int>(into);
      if (k > static_cast<int>(small)) --k;
    }
    classes_.erase(classes_.begin() + static_cast<std::ptrdiff_t>(small));
  }
}

SlotArena::~SlotArena() {
  if (locked_) munlock(buf_.data(), buf_.size());
}

void SlotArena::allocate(uint64_t budget, int min_slots) {
  const std::vector<int32_t> counts = plan_counts(classes_, budget, min_slots);
  offset_.clear();
  uint64_t at = 0;
  for (size_t c = 0; c < classes_.size(); ++c) {
    classes_[c].first = static_cast<int32_t>(offset_.size());
    classes_[c].count = counts[c];
    for (int32_t i = 0; i < counts[c]; ++i, at += classes_[c].slot_bytes) offset_.push_back(at);
  }
  slots_.assign(offset_.size(), Slot{});
  std::fill(key_slot_.begin(), key_slot_.end(), -1);
  buf_ = AlignedBuffer(static_cast<size_t>(at), kDirectAlign);
}

Slot& SlotArena::assign(int32_t s, int32_t key) {
  forget(s);
  slots_[s].key = key;
  key_slot_[key] = s;
  return slots_[s];
}

void SlotArena::forget(int32_t s) {
  if (slots_[s].key >= 0) key_slot_[slots_[s].key] = -1;
  slots_[s] = Slot{};
}

std::string SlotArena::describe() const {
  std::string out;
  for (const auto& c : classes_)
    if (c.count > 0)
      out += fmt::format("{}{} slots × {}", out.empty() ? "" : " + ", c.count,
                         format_bytes(c.slot_bytes));
  return fmt::format("{} = {}", out, format_bytes(bytes()));
}

}  // namespace sluice
