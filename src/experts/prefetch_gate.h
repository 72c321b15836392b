// The prefetch gate of the streaming expert cache. A wrong prediction costs a read and evicts an
// expert that may be needed, and when the disk is the bottleneck the read delays the demand reads
// queued behind it. So for ranked predictions (one token's top-k, most likely first) each
// (layer, rank) is admitted only while its measured precision (decayed used / issued) is at
// least kMinPrecision: the lookahead's precision differs by layer more than by rank (on the
// trained sluice-moe-128 it is 14 % into layer 1, whose router reads a hidden state layer 0 has
// barely changed, and 73–84 % into the others), so a per-rank gate alone kept reading layer 1's
// mostly wrong guesses. Every kExploreEvery-th call of a layer admits all its ranks so that a
// rank that improves (routing that becomes predictable) is noticed. An unordered set (the
// lookahead of several rows) is judged the same way, per layer: a prefill chunk's set is mostly
// used, but a draft-verify pass's holds every draft's guesses, and rejected drafts' guesses are
// wasted reads (on sluice-moe-128 streamed at 25 % they doubled the prefetches of free text under
// `--draft auto`). Certain predictions are not gated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class PrefetchGate {
 public:
  static constexpr size_t kRanks = 32;  // ranks past the last share its statistics

  explicit PrefetchGate(int n_layer);
  // Starts one prefetch call for layer `il`: decays that layer's statistics and decides whether
  // this call explores.
  void start_call(int il);
  static int rank_of(size_t i) { return static_cast<int>(i < kRanks ? i : kRanks - 1); }
  // Whether a prediction for layer `il` at `rank` is worth its read in this call.
  bool admits(int il, int rank) const;
  void issued(int il, int rank) { at(il, rank).issued += 1; }
  void used(int il, int rank) { at(il, rank).used += 1; }
  // The same for a member of an unordered set predicted for layer `il`.
  bool admits_set(int il) const { return explore_ || judged_fit(sets_[static_cast<size_t>(il)]); }
  void issued_set(int il) { sets_[static_cast<size_t>(il)].issued += 1; }
  void used_set(int il) { sets_[static_cast<size_t>(il)].used += 1; }

 private:
  struct RankStats {
    double issued = 0, used = 0;
  };
  static bool judged_fit(const RankStats& r);  // too few samples, or precise enough
  RankStats& at(int il, int rank) { return stats_[static_cast<size_t>(il) * kRanks + rank]; }
  const RankStats& at(int il, int rank) const { return stats_[static_cast<size_t>(il) * kRanks + rank]; }

  std::vector<RankStats> stats_;  // (n_layer, kRanks)
  std::vector<RankStats> sets_;   // (n_layer)
  std::vector<uint64_t> calls_;   // per layer
  bool explore_ = false;
};

}  // namespace sluice
