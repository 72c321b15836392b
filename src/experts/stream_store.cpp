// Streaming expert store (see stream_store.h): the request state machine over the slot arena,
// the eviction policy, the prefetch gate and the heat profile.
//
// Slot life cycle: Empty → Loading (reads in flight) → Ready → (evicted) Empty. A slot is pinned
// while the current layer request still needs it (requested, not yet consumed); pinned and Loading
// slots are never evicted, nor are slots a certain prefetch reserved until their layer runs; at
// most all but n_used slots of a size class are reserved, so demand reads always find a slot
// that will free up. Experts handed out by next() stay valid until the following next() or
// end(), so a cache smaller than one layer's set of experts still works: freed slots are refilled
// with the experts still waiting.
#include "experts/stream_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "core/units.h"
#include "experts/heat_profile.h"
#include "experts/prefetch_gate.h"
#include "experts/slot_arena.h"
#include "experts/ssd_reader.h"

namespace sluice {

namespace {

// Where each expert of the current request stands.
enum class RequestState : uint8_t { kWaiting, kReady, kHanded };

class StreamStore final : public ExpertStore {
 public:
  StreamStore(const ExpertLayout& layout, const ExpertFileMap& map, const StreamOptions& o,
              int n_used)
      : layout_(layout),
        map_(map),
        o_(o),
        n_used_(n_used),
        reader_(make_ssd_reader(256)),
        arena_(map_, o.cache_bytes, n_used, o.lock_memory),
        evictor_(make_evictor(o.policy, map.n_layer, map.n_expert, arena_.n_slots())),
        heat_(o.heat_path, map.n_layer, map.n_expert),
        gate_(map.n_layer),
        key_hits_(map_.ranges.size()),
        key_misses_(map_.ranges.size()),
        key_prefetches_(map_.ranges.size()) {
    for (const auto& p : map_.part_paths) {
      bool direct = false;
      fds_.push_back(open_for_streaming(p, &direct));
      direct_.push_back(direct);
    }
    stats_.cache_bytes = arena_.bytes();
    if (!o.cold) preload();
  }

  ~StreamStore() override {
    std::vector<ReadCompletion> drain;
    while (reader_->in_flight() > 0) reader_->reap(drain, true);
    heat_.save();
    for (int fd : fds_) close(fd);
  }

  void begin(int il, std::span<const int32_t> ids) override {
    poll(false);
    il_ = il;
    ids_.assign(ids.begin(), ids.end());
    state_.assign(ids.size(), RequestState::kWaiting);
    ready_.clear();
    deferred_.clear();
    handed_ = -1;
    n_handed_ = 0;
    evictor_->begin_request(il, ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t key = il * map_.n_expert + ids[i];
      ++stats_.requests;
      heat_.count(key);
      evictor_->requested(key);
      const int32_t s = arena_.slot_of(key);
      if (s >= 0) count_prefetch_use(arena_.slot(s));
      if (s >= 0 && arena_.slot(s).state != SlotState::kEmpty) ++key_hits_[key];
      else ++key_misses_[key];
      if (s >= 0 && arena_.slot(s).state == SlotState::kReady) {
        ++stats_.hits;
        evictor_->used(s);
        ++arena_.slot(s).pins;
        ready_.push_back(static_cast<int>(i));
        if (o_.debug) SLUICE_LOG_INFO("[experts] hit L{}/E{}", il, ids[i]);
      } else if (s >= 0 && arena_.slot(s).state == SlotState::kLoading) {
        ++stats_.hits;  // prefetch already in flight
        ++arena_.slot(s).pins;
      } else {
        ++stats_.misses;
        deferred_.push_back(static_cast<int>(i));
      }
    }
    release_reservations(il);
    issue_deferred();
  }

  bool next(int* index, ExpertWeights* w) override {
    release_handed();
    while (ready_.empty()) {
      if (n_handed_ == ids_.size()) return false;
      issue_deferred();
      Timer stall;
      poll(true);
      stats_.stall_seconds += stall.seconds();
    }
    const int i = ready_.back();
    ready_.pop_back();
    const int32_t s = arena_.slot_of(il_ * map_.n_expert + ids_[i]);
    state_[i] = RequestState::kHanded;
    handed_ = s;
    ++n_handed_;
    *index = i;
    *w = weights_of(s, ids_[i]);
    return true;
  }

  void end() override {
    release_handed();
    for (size_t i = 0; i < ids_.size(); ++i)
      if (state_[i] != RequestState::kHanded) unpin(il_ * map_.n_expert + ids_[i]);
    ids_.clear();
    state_.clear();
    ready_.clear();
    deferred_.clear();
  }

  void prefetch(int il, std::span<const int32_t> ids, PrefetchHint hint) override {
    prefetch_keys(il, ids,
                  hint == PrefetchHint::kRanked ? SlotOrigin::kRanked
                  : hint == PrefetchHint::kSet  ? SlotOrigin::kSet
                                                : SlotOrigin::kCertain);
  }

  ExpertStoreStats stats() const override { return stats_; }

  void cache_map(ExpertCacheMap& out) const override {
    out.n_layer = map_.n_layer;
    out.n_expert = map_.n_expert;
    out.state.assign(map_.ranges.size(), ExpertCacheMap::kOnDisk);
    for (size_t k = 0; k < map_.ranges.size(); ++k)
      if (arena_.class_of(static_cast<int32_t>(k)) < 0) out.state[k] = ExpertCacheMap::kNone;
    for (int32_t s = 0; s < arena_.n_slots(); ++s) {
      const Slot& sl = arena_.slot(s);
      if (sl.key < 0 || sl.state == SlotState::kEmpty) continue;
      out.state[sl.key] = sl.unused_prefetch             ? ExpertCacheMap::kPrefetched
                          : sl.state == SlotState::kReady ? ExpertCacheMap::kResident
                                                          : ExpertCacheMap::kLoading;
    }
    out.hits = key_hits_;
    out.misses = key_misses_;
    out.prefetches = key_prefetches_;
  }

  std::string describe() const override {
    return fmt::format("experts: stream ({} reader{}, {}{}, policy {})", reader_->name(),
                       direct_.empty() || direct_[0] ? ", O_DIRECT" : "", arena_.describe(),
                       arena_.locked() ? ", locked" : "", eviction_policy_name(o_.policy));
  }

 private:
  // Ranked predictions pass the gate rank by rank, sets layer by layer; certain ones are read
  // whatever the gate says and reserved until their layer runs (while their class has slots to
  // spare). A prediction already cached costs nothing (a certain one reserves its slot).
  void prefetch_keys(int il, std::span<const int32_t> ids, SlotOrigin origin) {
    poll(false);
    gate_.start_call(il);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t key = il * map_.n_expert + ids[i];
      if (const int32_t s = arena_.slot_of(key); s >= 0) {
        if (origin == SlotOrigin::kCertain && can_reserve(arena_.class_of(key))) reserve(s);
        continue;
      }
      const int rank = origin == SlotOrigin::kRanked ? PrefetchGate::rank_of(i) : -1;
      if (rank >= 0 && !gate_.admits(il, rank)) continue;
      if (origin == SlotOrigin::kSet && !gate_.admits_set(il)) continue;
      const int32_t s = victim(arena_.class_of(key));
      if (s < 0) continue;
      Slot& sl = load(s, key, origin);
      sl.unused_prefetch = true;
      sl.prefetch_rank = static_cast<int8_t>(rank);
      if (rank >= 0) gate_.issued(il, rank);
      if (origin == SlotOrigin::kSet) gate_.issued_set(il);
      ++key_prefetches_[key];
      if (origin == SlotOrigin::kCertain) {
        if (can_reserve(arena_.class_of(key))) reserve(s);
        ++stats_.certain_issued;
      }
      ++stats_.prefetch_issued;
    }
  }

  void count_prefetch_use(Slot& sl) {
    if (!sl.unused_prefetch) return;
    sl.unused_prefetch = false;
    ++stats_.prefetch_used;
    if (sl.origin == SlotOrigin::kRanked) gate_.used(sl.key / map_.n_expert, sl.prefetch_rank);
    if (sl.origin == SlotOrigin::kSet) gate_.used_set(sl.key / map_.n_expert);
    if (sl.origin == SlotOrigin::kCertain) ++stats_.certain_used;
  }

  // Reservations leave n_used slots of each class to the demand reads.
  bool can_reserve(int cls) const {
    const SizeClass& c = arena_.classes()[cls];
    const auto n = std::count_if(reserved_.begin(), reserved_.end(),
                                 [&](int32_t s) { return s >= c.first && s < c.first + c.count; });
    return n + n_used_ < c.count;
  }

  void reserve(int32_t s) {
    if (!arena_.slot(s).reserved) reserved_.push_back(s);
    arena_.slot(s).reserved = true;
  }

  // Layer il has run (its request pinned what it needs): its reservations end.
  void release_reservations(int il) {
    std::erase_if(reserved_, [&](int32_t s) {
      Slot& sl = arena_.slot(s);
      if (sl.reserved && sl.key >= 0 && sl.key / map_.n_expert != il) return false;
      sl.reserved = false;
      return true;
    });
  }

  // The slot of size class `cls` to refill: an empty one, else the unpinned, loaded, unreserved
  // slot the policy values least.
  int32_t victim(int cls) {
    const SizeClass& c = arena_.classes()[cls];
    int32_t best = -1;
    double best_value = 0;
    for (int32_t s = c.first; s < c.first + c.count; ++s) {
      const Slot& sl = arena_.slot(s);
      if (sl.state == SlotState::kEmpty) return s;
      if (sl.pins > 0 || sl.state == SlotState::kLoading || sl.reserved) continue;
      const double v = evictor_->keep_value(s, sl.key);
      if (best < 0 || v < best_value) best = s, best_value = v;
    }
    return best;
  }

  Slot& load(int32_t s, int32_t key, SlotOrigin origin) {
    Slot& sl = arena_.assign(s, key);
    sl.state = SlotState::kLoading;
    sl.origin = origin;
    sl.submitted = clock_.seconds();
    evictor_->filled(s, key);
    ReadRequest reqs[kExpertParts];
    uint64_t at = 0;
    int n_reqs = 0;
    for (int r = 0; r < kExpertParts; ++r) {
      const FileRange& fr = map_.ranges[key][r];
      if (fr.length == 0) continue;
      const uint64_t len = widened(fr);
      reqs[n_reqs++] = {fds_[fr.part], align_down_direct(fr.offset), static_cast<uint32_t>(len),
                        arena_.data(s) + at, static_cast<uint64_t>(s) * kTagStride + r};
      at += len;
    }
    sl.pending = n_reqs;
    reader_->submit(std::span<const ReadRequest>(reqs, n_reqs));
    return sl;
  }

  void issue_deferred() {
    while (!deferred_.empty()) {
      const int32_t key = il_ * map_.n_expert + ids_[deferred_.back()];
      const int32_t s = victim(arena_.class_of(key));
      if (s < 0) return;
      deferred_.pop_back();
      ++load(s, key, SlotOrigin::kDemand).pins;
    }
  }

  void poll(bool block) {
    done_.clear();
    reader_->reap(done_, block);
    for (const auto& c : done_) {
      const int32_t s = static_cast<int32_t>(c.tag / kTagStride);
      const int r = static_cast<int>(c.tag % kTagStride);
      Slot& sl = arena_.slot(s);
      const FileRange& fr = map_.ranges[sl.key][r];
      // The widened read may stop early only at end of file, never inside the slice itself.
      const uint64_t needed = fr.offset + fr.length - align_down_direct(fr.offset);
      if ((c.result < 0 || static_cast<uint64_t>(c.result) < needed) && sl.error.empty()) {
        sl.error = c.result < 0
                       ? fmt::format("read error: {}", std::strerror(static_cast<int>(-c.result)))
                       : fmt::format("short read: {} of {} bytes (file truncated or replaced?)",
                                     c.result, needed);
        sl.error =
            fmt::format("{} at offset {} of '{}'", sl.error, fr.offset, map_.part_paths[fr.part]);
      }
      stats_.bytes_read += c.result > 0 ? static_cast<uint64_t>(c.result) : 0;
      // Without O_DIRECT the bytes also landed in the page cache: drop them there.
      if (sl.error.empty() && !direct_[fr.part])
        posix_fadvise(fds_[fr.part], static_cast<off_t>(align_down_direct(fr.offset)),
                      static_cast<off_t>(widened(fr)), POSIX_FADV_DONTNEED);
      if (--sl.pending > 0) continue;
      const int layer = sl.key / map_.n_expert, e = sl.key % map_.n_expert;
      if (!sl.error.empty()) {
        const std::string msg = fmt::format("expert L{}/E{}: {}", layer, e, sl.error);
        arena_.forget(s);
        if (!ids_.empty()) abort_request();
        fail("{}", msg);
      }
      sl.state = SlotState::kReady;
      const double ms = (clock_.seconds() - sl.submitted) * 1e3;
      stats_.read_seconds += ms / 1e3;
      if (o_.debug && !preloading_)
        SLUICE_LOG_INFO("[experts] {} L{}/E{} {:.2f} MB {:.1f} ms",
                        sl.origin == SlotOrigin::kDemand ? "miss" : "prefetch", layer, e,
                        static_cast<double>(expert_slot_bytes(map_, sl.key)) / 1e6, ms);
      if (layer == il_ && !ids_.empty())
        for (size_t i = 0; i < ids_.size(); ++i)
          if (ids_[i] == e && state_[i] == RequestState::kWaiting) {
            state_[i] = RequestState::kReady;
            ready_.push_back(static_cast<int>(i));
          }
    }
  }

  void unpin(int32_t key) {
    const int32_t s = arena_.slot_of(key);
    if (s >= 0 && arena_.slot(s).pins > 0) --arena_.slot(s).pins;
  }

  void abort_request() {
    for (size_t i = 0; i < ids_.size(); ++i) unpin(il_ * map_.n_expert + ids_[i]);
    ids_.clear();
    state_.clear();
    ready_.clear();
    deferred_.clear();
    handed_ = -1;
  }

  void release_handed() {
    if (handed_ >= 0 && arena_.slot(handed_).pins > 0) --arena_.slot(handed_).pins;
    handed_ = -1;
  }

  ExpertWeights weights_of(int32_t s, int32_t e) {
    ExpertWeights w = layout_.in_place(il_, e);  // shapes and types
    std::byte* base = arena_.data(s);
    const auto& rr = map_.ranges[arena_.slot(s).key];
    uint64_t at = 0;
    const std::byte* part[kExpertParts] = {};
    for (int r = 0; r < kExpertParts; ++r) {
      if (rr[r].length == 0) continue;
      part[r] = base + at + (rr[r].offset - align_down_direct(rr[r].offset));
      at += widened(rr[r]);
    }
    w.gate.data = part[kGate];
    w.up.data = part[kUp];
    w.down.data = part[kDown];
    if (part[kGateBias]) w.gate_bias = reinterpret_cast<const float*>(part[kGateBias]);
    if (part[kUpBias]) w.up_bias = reinterpret_cast<const float*>(part[kUpBias]);
    if (part[kDownBias]) w.down_bias = reinterpret_cast<const float*>(part[kDownBias]);
    return w;
  }

  // Fills each size class with its hottest experts (file order without a heat profile).
  void preload() {
    std::vector<int32_t> order;
    for (int32_t k = 0; k < static_cast<int32_t>(map_.ranges.size()); ++k)
      if (arena_.class_of(k) >= 0 && (o_.owned.empty() || o_.owned[k])) order.push_back(k);
    heat_.order_hottest_first(order);
    std::vector<int32_t> next_free(arena_.classes().size());
    for (size_t c = 0; c < next_free.size(); ++c) next_free[c] = arena_.classes()[c].first;
    int64_t n = 0;
    Timer t;
    uint64_t slots = 0;
    for (const SizeClass& c : arena_.classes()) slots += static_cast<uint64_t>(c.count);
    Progress progress(
        "preloading experts",
        std::min<uint64_t>(
            {slots, order.size(),
             o_.preload_limit >= 0 ? static_cast<uint64_t>(o_.preload_limit) : slots}),
        "experts");
    preloading_ = true;
    for (int32_t key : order) {
      if (o_.preload_limit >= 0 && n >= o_.preload_limit) break;
      const int cls = arena_.class_of(key);
      const SizeClass& c = arena_.classes()[cls];
      if (next_free[cls] >= c.first + c.count) continue;
      load(next_free[cls]++, key, SlotOrigin::kSet);
      progress.update(static_cast<uint64_t>(++n));
      if (reader_->in_flight() >= 192) poll(true);
    }
    while (reader_->in_flight() > 0) poll(true);
    preloading_ = false;
    if (n > 0)
      SLUICE_LOG_INFO("experts: preloaded {} experts ({}) in {:.2f} s from {}", n,
                      format_bytes(stats_.bytes_read), t.seconds(),
                      heat_.loaded() ? "the heat profile" : "file order");
    stats_.bytes_read = 0;
    stats_.read_seconds = 0;
  }

  static constexpr uint64_t kTagStride = 8;  // read tag = slot · stride + part

  const ExpertLayout& layout_;
  ExpertFileMap map_;
  StreamOptions o_;
  int n_used_;
  std::unique_ptr<SsdReader> reader_;
  SlotArena arena_;
  std::unique_ptr<Evictor> evictor_;
  HeatProfile heat_;
  PrefetchGate gate_;
  std::vector<int32_t> reserved_;  // slots reserved by certain prefetches
  bool preloading_ = false;
  std::vector<int> fds_;
  std::vector<bool> direct_;
  Timer clock_;

  // Current request.
  int il_ = -1;
  std::vector<int32_t> ids_;
  std::vector<RequestState> state_;
  std::vector<int> ready_;
  std::vector<int> deferred_;
  int32_t handed_ = -1;
  size_t n_handed_ = 0;
  std::vector<ReadCompletion> done_;
  ExpertStoreStats stats_;
  // Per key (layer · n_expert + expert), for cache_map(): requests found in memory or in flight,
  // requests that needed a read, prefetches issued.
  std::vector<uint32_t> key_hits_, key_misses_, key_prefetches_;
};

}  // namespace

std::unique_ptr<ExpertStore> make_stream_store(const ExpertLayout& layout, const ExpertFileMap& map,
                                               const StreamOptions& options, int n_expert_used) {
  return std::make_unique<StreamStore>(layout, map, options, n_expert_used);
}

}  // namespace sluice
