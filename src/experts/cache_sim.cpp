// The expert cache simulated without I/O (see cache_sim.h).
#include "experts/cache_sim.h"

#include <limits>

#include "core/error.h"
#include "experts/eviction.h"

namespace sluice {

namespace {

// Belady's choice as an Evictor: it reads the future from the request sequence. requested() is
// called once per id in sequence order, so a running position finds each use's next use.
class BeladyEvictor final : public Evictor {
 public:
  explicit BeladyEvictor(const CacheRequests& reqs)
      : next_(reqs.ids.size()), next_use_(static_cast<size_t>(reqs.n_layer) * reqs.n_expert) {
    constexpr double kNever = std::numeric_limits<double>::infinity();
    std::vector<double> seen(next_use_.size(), kNever);
    for (size_t i = reqs.size(); i-- > 0;)
      for (uint32_t p = reqs.begin[i]; p < reqs.begin[i + 1]; ++p) {
        const size_t key = static_cast<size_t>(reqs.layer[i]) * reqs.n_expert + reqs.ids[p];
        next_[p] = seen[key];
        seen[key] = static_cast<double>(i);
      }
  }
  void begin_request(int, size_t) override {}
  void requested(int32_t key) override { next_use_[key] = next_[pos_++]; }
  void filled(int32_t, int32_t) override {}
  void used(int32_t) override {}
  double keep_value(int32_t, int32_t key) const override { return -next_use_[key]; }

 private:
  std::vector<double> next_;      // per position in reqs.ids: the request that next uses its key
  std::vector<double> next_use_;  // per key: its next use after the latest request of it
  size_t pos_ = 0;
};

// Drives `ev` as StreamStore does: requested() for each id, used() on a hit, and for the misses
// (after all hits are pinned) filled() into an empty slot or the least valued unpinned one. When
// every slot holds one of the request's own experts, the one handed out first gives up its slot.
CacheSimResult run(const CacheRequests& reqs, int n_slots, Evictor& ev) {
  if (n_slots < 1) fail("a simulated cache needs at least 1 slot, not {}", n_slots);
  const size_t n_keys = static_cast<size_t>(reqs.n_layer) * reqs.n_expert;
  CacheSimResult all, warm;
  for (CacheSimResult* r : {&all, &warm}) {
    r->layer_requests.assign(reqs.n_layer, 0);
    r->layer_hits.assign(reqs.n_layer, 0);
  }
  std::vector<int32_t> key_slot(n_keys, -1), slot_key(n_slots, -1);
  std::vector<uint8_t> pinned(n_slots, 0);
  std::vector<int32_t> missing;
  std::vector<int32_t> own;  // slots the request holds, in hand-out order: hits, then misses
  std::vector<uint32_t> request_hits(reqs.size(), 0);
  int filled = 0;
  bool counting = false;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const bool in_window = i >= reqs.count_begin && i < reqs.count_end;
    if (!counting && in_window && filled == n_slots) {
      counting = true;
      warm.warmup_requests = i - reqs.count_begin;
    }
    const int il = reqs.layer[i];
    const uint32_t b = reqs.begin[i], e = reqs.begin[i + 1];
    ev.begin_request(il, e - b);
    missing.clear();
    own.clear();
    for (uint32_t p = b; p < e; ++p) {
      const int32_t key = il * reqs.n_expert + reqs.ids[p];
      ev.requested(key);
      const int32_t s = key_slot[key];
      const bool hit = s >= 0;
      request_hits[i] += hit;
      if (hit) {
        ev.used(s);
        pinned[s] = 1;
        own.push_back(s);
      } else {
        missing.push_back(key);
      }
      for (CacheSimResult* r : {&all, &warm}) {
        if (!in_window || (r == &warm && !counting)) continue;
        ++r->requests;
        ++r->layer_requests[il];
        r->hits += hit;
        r->layer_hits[il] += hit;
      }
    }
    size_t handed = 0;  // own[0 .. handed) gave their slots back
    for (const int32_t key : missing) {
      int32_t s = -1;
      if (filled < n_slots) {
        s = filled++;
      } else {
        double best = 0;
        for (int32_t c = 0; c < n_slots; ++c) {
          if (pinned[c]) continue;
          const double v = ev.keep_value(c, slot_key[c]);
          if (s < 0 || v < best) s = c, best = v;
        }
        if (s < 0) {  // a request larger than the cache: recycle its earliest handed-out expert
          s = own[handed++];
          pinned[s] = 0;
        }
        key_slot[slot_key[s]] = -1;
      }
      slot_key[s] = key;
      key_slot[key] = s;
      pinned[s] = 1;
      own.push_back(s);
      ev.filled(s, key);
    }
    for (const int32_t s : own) pinned[s] = 0;
  }
  CacheSimResult& result = counting ? warm : all;
  result.request_hits = std::move(request_hits);
  return result;
}

}  // namespace

CacheSimResult simulate_cache(const CacheRequests& reqs, int n_slots, EvictionPolicy policy) {
  const std::unique_ptr<Evictor> ev = make_evictor(policy, reqs.n_layer, reqs.n_expert, n_slots);
  return run(reqs, n_slots, *ev);
}

CacheSimResult simulate_belady(const CacheRequests& reqs, int n_slots) {
  BeladyEvictor ev(reqs);
  return run(reqs, n_slots, ev);
}

}  // namespace sluice
