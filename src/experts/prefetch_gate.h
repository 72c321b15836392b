// The prefetch gate of the streaming expert cache. A wrong prediction costs a read and evicts an
// expert that may be needed, and when the disk is the bottleneck the read delays the demand reads
// queued behind it. So for ranked predictions (one token's top-k, most likely first) each rank is
// admitted only while its measured precision (decayed used / issued) is at least kMinPrecision;
// every kExploreEvery-th call admits all ranks so a rank that improves (routing that becomes
// predictable) is noticed. Unordered sets and certain predictions are not gated.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace sluice {

class PrefetchGate {
 public:
  static constexpr size_t kRanks = 32;  // ranks past the last share its statistics

  // Starts one prefetch call: decays the statistics and decides whether this call explores.
  void start_call();
  static int rank_of(size_t i) { return static_cast<int>(i < kRanks ? i : kRanks - 1); }
  // Whether a prediction at `rank` is worth its read in this call.
  bool admits(int rank) const;
  void issued(int rank) { ranks_[rank].issued += 1; }
  void used(int rank) { ranks_[rank].used += 1; }

 private:
  struct RankStats {
    double issued = 0, used = 0;
  };
  std::array<RankStats, kRanks> ranks_{};
  uint64_t calls_ = 0;
  bool explore_ = false;
};

}  // namespace sluice
