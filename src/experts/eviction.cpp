// The three eviction policies of the streaming expert cache (see eviction.h).
#include "experts/eviction.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sluice {

namespace {

// Shared by lru and lfu: a per-slot score and a request clock.
class ScoredEvictor : public Evictor {
 public:
  explicit ScoredEvictor(int n_slots) : score_(n_slots, 0.0) {}
  void begin_request(int, size_t) override { ++tick_; }
  void requested(int32_t) override {}
  double keep_value(int32_t s, int32_t) const override { return score_[s]; }

 protected:
  std::vector<double> score_;
  uint64_t tick_ = 0;
};

// Score = the request clock at the last use.
class LruEvictor final : public ScoredEvictor {
 public:
  using ScoredEvictor::ScoredEvictor;
  void filled(int32_t s, int32_t) override { used(s); }
  void used(int32_t s) override { score_[s] = static_cast<double>(tick_); }
};

// Score = exponentially time-weighted use count (half-life 256 requests), stored as Σ 2^(tick/256)
// so comparing scores needs no per-slot decay arithmetic. A refilled slot starts from zero.
class LfuEvictor final : public ScoredEvictor {
 public:
  using ScoredEvictor::ScoredEvictor;
  void filled(int32_t s, int32_t) override {
    score_[s] = 0;
    used(s);
  }
  void used(int32_t s) override { score_[s] += std::exp2(static_cast<double>(tick_) / 256.0); }
};

// The expected number of layer steps until a key is needed again, from
//  - d, how many layers the forward pass walks before it reaches the key's layer (the current
//    layer's other experts come last: a whole pass away), and
//  - p, the chance a pass uses the key, from two independent reasons: its history (f, its decayed
//    share of its layer's passes) and the request's breadth (c, the share of experts the current
//    request touches: a prefill batch routes to nearly all of them, so every expert will be needed
//    on the next pass whatever its history): p = 1 − (1 − c)(1 − f) = c + (1 − c)·f.
//    Taking max(c, f) instead tied every expert used less often than c (most of a large cache in
//    decode, where c = k/E), so the tie, not the history, chose among them. bench/policy-sweep,
//    sluice-moe-128 decoding held-out text without prefetch, cache of 75 % of the experts: prose
//    .973 → .984, code .931 → .960 (LRU: .984, .956); at 50 %: .878 → .909, .824 → .845.
// T = d + n_layer · (1/p − 1). Evicting the largest T approximates Belady's optimal choice; for
// a prefill that sweeps more experts than fit, it keeps a fixed set instead of cycling the cache
// (where LRU and recency-weighted LFU evict exactly what the next layers need).
class NextUseEvictor final : public Evictor {
 public:
  NextUseEvictor(int n_layer, int n_expert)
      : n_layer_(n_layer),
        n_expert_(n_expert),
        use_w_(static_cast<size_t>(n_layer) * n_expert, 0.0),
        pass_w_(n_layer, 0.0),
        pass_(n_layer, 0) {}

  void begin_request(int il, size_t n_ids) override {
    il_ = il;
    coverage_ = static_cast<double>(n_ids) / n_expert_;
    weight_ = count_pass(il);
  }
  void requested(int32_t key) override { use_w_[key] += weight_; }
  void filled(int32_t, int32_t) override {}
  void used(int32_t) override {}
  double keep_value(int32_t, int32_t key) const override { return -steps_to_next_use(key); }

 private:
  double steps_to_next_use(int32_t key) const {
    const int layer = key / n_expert_;
    const int d = il_ < 0 ? n_layer_ : ((layer - il_ - 1 + n_layer_) % n_layer_) + 1;
    const double freq = pass_w_[layer] > 0 ? use_w_[key] / pass_w_[layer] : 0.0;
    const double p = std::clamp(coverage_ + (1.0 - coverage_) * freq, 1e-3, 1.0);
    return d + n_layer_ * (1.0 / p - 1.0);
  }

  // Counts a pass over layer il and returns this pass's weight: 2^(pass/H) grows so older passes
  // weigh half as much every H passes without touching every key; both sums are rescaled before
  // the weights could overflow.
  double count_pass(int il) {
    // Passes (decode: tokens) over which a use counts half. 16 rather than 32: on sluice-moe-128's
    // held-out prose and code the hit rates at 12.5-75 % of the experts move by at most a point
    // either way, and after a switch from prose to code the miss burst ends after 67 tokens
    // instead of 77 (8 would end it after 52 but costs prose 1-2.5 points).
    constexpr double kHalfLife = 16;
    if (++pass_[il] >= 1024) {
      const double scale = std::exp2(-static_cast<double>(pass_[il]) / kHalfLife);
      for (int e = 0; e < n_expert_; ++e) use_w_[static_cast<size_t>(il) * n_expert_ + e] *= scale;
      pass_w_[il] *= scale;
      pass_[il] = 0;
    }
    const double w = std::exp2(static_cast<double>(pass_[il]) / kHalfLife);
    pass_w_[il] += w;
    return w;
  }

  int n_layer_, n_expert_;
  std::vector<double> use_w_;   // per key, decayed passes that used it
  std::vector<double> pass_w_;  // per layer, decayed passes
  std::vector<uint32_t> pass_;  // per layer, passes since the last rescale
  int il_ = -1;                 // layer of the current request
  double coverage_ = 0;         // share of the layer's experts the current request touches
  double weight_ = 0;           // this pass's weight
};

}  // namespace

std::unique_ptr<Evictor> make_evictor(EvictionPolicy p, int n_layer, int n_expert, int n_slots) {
  switch (p) {
    case EvictionPolicy::kLru:
      return std::make_unique<LruEvictor>(n_slots);
    case EvictionPolicy::kLfu:
      return std::make_unique<LfuEvictor>(n_slots);
    case EvictionPolicy::kNextUse:
      return std::make_unique<NextUseEvictor>(n_layer, n_expert);
  }
  fail("internal: unknown eviction policy");
}

}  // namespace sluice
