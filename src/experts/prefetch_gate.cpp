// Precision-gated admission of ranked expert predictions (see prefetch_gate.h).
#include "experts/prefetch_gate.h"

namespace sluice {

namespace {
// Decay per call of a layer (about one per token): its statistics remember some hundred tokens,
// and a refused rank's exploring calls alone (1/kExploreEvery ÷ (1 − kDecay) = 12.5) keep more than
// kMinSamples, so it stays judged rather than readmitted for want of samples.
constexpr double kMinPrecision = 0.5, kDecay = 0.99, kMinSamples = 8;
constexpr uint64_t kExploreEvery = 8;
}  // namespace

PrefetchGate::PrefetchGate(int n_layer)
    : stats_(static_cast<size_t>(n_layer) * kRanks), sets_(static_cast<size_t>(n_layer)),
      calls_(static_cast<size_t>(n_layer), 0) {}

bool PrefetchGate::judged_fit(const RankStats& r) {
  return r.issued < kMinSamples || r.used >= kMinPrecision * r.issued;
}

void PrefetchGate::start_call(int il) {
  explore_ = ++calls_[static_cast<size_t>(il)] % kExploreEvery == 0;
  for (size_t r = 0; r < kRanks; ++r) {
    RankStats& s = at(il, static_cast<int>(r));
    s.issued *= kDecay;
    s.used *= kDecay;
  }
  RankStats& set = sets_[static_cast<size_t>(il)];
  set.issued *= kDecay;
  set.used *= kDecay;
}

bool PrefetchGate::admits(int il, int rank) const {
  return explore_ || judged_fit(at(il, rank));
}

}  // namespace sluice
