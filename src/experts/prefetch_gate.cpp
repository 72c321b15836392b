// Precision-gated admission of ranked expert predictions (see prefetch_gate.h).
#include "experts/prefetch_gate.h"

namespace sluice {

namespace {
constexpr double kMinPrecision = 0.5, kDecay = 0.995, kMinSamples = 8;
constexpr uint64_t kExploreEvery = 8;
}  // namespace

void PrefetchGate::start_call() {
  explore_ = ++calls_ % kExploreEvery == 0;
  for (auto& r : ranks_) r.issued *= kDecay, r.used *= kDecay;
}

bool PrefetchGate::admits(int rank) const {
  if (explore_) return true;
  const RankStats& r = ranks_[rank];
  return r.issued < kMinSamples || r.used >= kMinPrecision * r.issued;
}

}  // namespace sluice
