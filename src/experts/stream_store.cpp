// Streaming expert store (see stream_store.h).
//
// Slot life cycle: Empty → Loading (reads in flight) → Ready → (evicted) Empty. A slot is pinned
// while the current layer request still needs it (requested, not yet consumed); pinned and Loading
// slots are never evicted. Experts handed out by next() stay valid until the following next() or
// end(), so a cache smaller than one layer's set of experts still works: freed slots are refilled
// with the experts still waiting.
#include "experts/stream_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/aligned.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/units.h"
#include "experts/ssd_reader.h"

namespace sluice {

namespace {

uint64_t align_up(uint64_t v) { return (v + kDirectAlign - 1) / kDirectAlign * kDirectAlign; }
uint64_t align_down(uint64_t v) { return v / kDirectAlign * kDirectAlign; }
uint64_t widened(const FileRange& r) { return align_up(r.offset + r.length) - align_down(r.offset); }

enum class SlotState : uint8_t { kEmpty, kLoading, kReady, kFailed };

struct Slot {
  int32_t key = -1;
  SlotState state = SlotState::kEmpty;
  int pending = 0;       // reads in flight
  int pins = 0;          // current request still needs it
  bool prefetched = false;
  int8_t prefetch_rank = -1;  // rank of a ranked prediction, −1 for an unordered one
  bool demand = false;   // a request is waiting for it (for miss logging)
  double score = 0;      // eviction priority: last use (LRU) or decayed frequency (LFU)
  double submitted = 0;  // clock at submission, for read latency
  std::string error;
};

class StreamStore final : public ExpertStore {
 public:
  StreamStore(const ExpertLayout& layout, const ExpertFileMap& map, const StreamOptions& o, int n_used)
      : layout_(layout), map_(map), o_(o), reader_(make_ssd_reader(256)) {
    slot_bytes_ = stream_slot_bytes(map);
    const uint64_t n = o.cache_bytes / slot_bytes_;
    if (n < static_cast<uint64_t>(n_used))
      fail("expert cache of {} holds {} experts of {}; a token needs {} per layer: raise --ssd-streaming-cache-experts",
           format_bytes(o.cache_bytes), n, format_bytes(slot_bytes_), n_used);
    const uint64_t total = static_cast<uint64_t>(map.n_layer) * map.n_expert;
    n_slots_ = static_cast<int>(std::min<uint64_t>(n, total));
    arena_ = AlignedBuffer(static_cast<size_t>(n_slots_) * slot_bytes_, kDirectAlign);
    if (o.lock_memory) lock_arena(n_used);
    slots_.resize(n_slots_);
    key_slot_.assign(total, -1);
    heat_.assign(total, 0.0);
    use_w_.assign(total, 0.0);
    pass_w_.assign(map.n_layer, 0.0);
    pass_.assign(map.n_layer, 0);
    for (const auto& p : map.part_paths) {
      bool direct = false;
      fds_.push_back(open_for_streaming(p, &direct));
      direct_.push_back(direct);
    }
    load_heat();
    if (!o.cold) preload();
  }

  // mlock the slot arena so the cache is never swapped out. When the whole arena cannot be locked
  // (RLIMIT_MEMLOCK without CAP_IPC_LOCK), shrink the cache to the slots that can be, as long as
  // that still holds one token's experts of a layer; otherwise keep it whole and unlocked.
  void lock_arena(int n_used) {
    if (mlock(arena_.data(), arena_.size()) == 0) {
      locked_ = true;
      return;
    }
    const int err = errno;
    rlimit rl{};
    const uint64_t lockable = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 0;
    const uint64_t n = lockable / slot_bytes_;
    if (n >= static_cast<uint64_t>(n_used) && n < static_cast<uint64_t>(n_slots_) &&
        mlock(arena_.data(), n * slot_bytes_) == 0) {
      SLUICE_LOG_WARN("experts: only {} of memory can be locked (ulimit -l); the cache shrinks from {} to {} slots ({}). "
                      "Raise the limit, or pass --no-mlock to keep the full cache unlocked",
                      format_bytes(lockable), n_slots_, n, format_bytes(n * slot_bytes_));
      munlock(arena_.data(), n * slot_bytes_);
      n_slots_ = static_cast<int>(n);
      arena_ = AlignedBuffer(static_cast<size_t>(n_slots_) * slot_bytes_, kDirectAlign);
      locked_ = mlock(arena_.data(), arena_.size()) == 0;
      return;
    }
    SLUICE_LOG_WARN("experts: could not mlock the {} cache ({}; lockable: {}); it stays unlocked and may be swapped",
                    format_bytes(arena_.size()), std::strerror(err), lockable ? format_bytes(lockable) : "unknown");
  }

  ~StreamStore() override {
    std::vector<ReadCompletion> drain;
    while (reader_->in_flight() > 0) reader_->reap(drain, true);
    save_heat();
    for (int fd : fds_) close(fd);
    if (locked_) munlock(arena_.data(), arena_.size());
  }

  void begin(int il, std::span<const int32_t> ids) override {
    poll(false);
    il_ = il;
    ids_.assign(ids.begin(), ids.end());
    state_.assign(ids.size(), kWaiting);
    ready_.clear();
    deferred_.clear();
    handed_ = -1;
    n_handed_ = 0;
    ++tick_;
    const double pass_weight = count_pass(il);
    coverage_ = static_cast<double>(ids.size()) / map_.n_expert;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t key = il * map_.n_expert + ids[i];
      ++stats_.requests;
      heat_[key] += 1.0;
      use_w_[key] += pass_weight;
      int32_t s = key_slot_[key];
      if (s >= 0 && slots_[s].prefetched) {
        ++stats_.prefetch_used;
        if (slots_[s].prefetch_rank >= 0) rank_stats_[slots_[s].prefetch_rank].used += 1;
        slots_[s].prefetched = false;
      }
      if (s >= 0 && slots_[s].state == SlotState::kReady) {
        ++stats_.hits;
        touch(s);
        ++slots_[s].pins;
        ready_.push_back(static_cast<int>(i));
        if (o_.debug) SLUICE_LOG_INFO("[experts] hit L{}/E{}", il, ids[i]);
      } else if (s >= 0 && slots_[s].state == SlotState::kLoading) {
        ++stats_.hits;  // prefetch already in flight
        ++slots_[s].pins;
        slots_[s].demand = true;
      } else {
        ++stats_.misses;
        deferred_.push_back(static_cast<int>(i));
      }
    }
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
    const int32_t s = key_slot_[il_ * map_.n_expert + ids_[i]];
    state_[i] = kHanded;
    handed_ = s;
    ++n_handed_;
    *index = i;
    *w = weights_of(s, ids_[i]);
    return true;
  }

  void end() override {
    release_handed();
    for (size_t i = 0; i < ids_.size(); ++i)
      if (state_[i] != kHanded) {
        const int32_t s = key_slot_[il_ * map_.n_expert + ids_[i]];
        if (s >= 0 && slots_[s].pins > 0) --slots_[s].pins;
      }
    ids_.clear();
    state_.clear();
    ready_.clear();
    deferred_.clear();
  }

  // A wrong prediction costs a read and evicts an expert that may be needed, and when the disk is
  // the bottleneck the read delays the demand reads queued behind it. So for ranked predictions
  // each rank is issued only while its measured precision (decayed used / issued) is at least
  // kMinPrecision; every kExploreEvery-th call issues all ranks so a rank that improves (routing
  // that becomes predictable) is noticed.
  void prefetch(int il, std::span<const int32_t> ids, bool ranked) override {
    constexpr double kMinPrecision = 0.5, kDecay = 0.995, kMinSamples = 8;
    constexpr uint64_t kExploreEvery = 8;
    poll(false);
    const bool explore = ++prefetch_calls_ % kExploreEvery == 0;
    for (auto& r : rank_stats_) r.issued *= kDecay, r.used *= kDecay;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t key = il * map_.n_expert + ids[i];
      if (key_slot_[key] >= 0) continue;
      const int rank = ranked ? static_cast<int>(std::min(i, kRanks - 1)) : -1;
      if (rank >= 0 && !explore) {
        const RankStats& r = rank_stats_[rank];
        if (r.issued >= kMinSamples && r.used < kMinPrecision * r.issued) continue;
      }
      const int32_t s = victim();
      if (s < 0) return;
      load(s, key, /*demand=*/false);
      slots_[s].prefetched = true;
      slots_[s].prefetch_rank = static_cast<int8_t>(rank);
      if (rank >= 0) rank_stats_[rank].issued += 1;
      ++stats_.prefetch_issued;
    }
  }

  ExpertStoreStats stats() const override { return stats_; }

  std::string describe() const override {
    return fmt::format("experts: stream ({} reader{}, {} slots × {} = {}{}, policy {})", reader_->name(),
                       direct_.empty() || direct_[0] ? ", O_DIRECT" : "", n_slots_, format_bytes(slot_bytes_),
                       format_bytes(arena_.size()), locked_ ? ", locked" : "",
                       eviction_policy_name(o_.policy));
  }

 private:
  static constexpr uint8_t kWaiting = 0, kHanded = 2;

  void touch(int32_t s) {
    // LRU: score = last use. LFU: exponentially time-weighted count (half-life 256 requests),
    // stored as Σ 2^(tick/256) so comparing scores needs no per-slot decay arithmetic.
    if (o_.policy == EvictionPolicy::kLru) {
      slots_[s].score = static_cast<double>(tick_);
    } else {
      slots_[s].score += std::exp2(static_cast<double>(tick_) / 256.0);
    }
  }

  // The slot to refill: an empty one, else the unpinned, loaded slot the policy values least.
  int32_t victim() {
    int32_t best = -1;
    double best_score = 0;
    for (int32_t s = 0; s < n_slots_; ++s) {
      const Slot& sl = slots_[s];
      if (sl.state == SlotState::kEmpty) return s;
      if (sl.pins > 0 || sl.state == SlotState::kLoading) continue;
      const double score = o_.policy == EvictionPolicy::kNextUse ? -steps_to_next_use(sl.key) : sl.score;
      if (best < 0 || score < best_score) best = s, best_score = score;
    }
    return best;
  }

  // nextuse policy: the expected number of layer steps until `key` is needed again, from
  //  - d, how many layers the forward pass walks before it reaches the key's layer (the current
  //    layer's other experts come last: a whole pass away), and
  //  - p, the chance a pass uses the key: its decayed share of its layer's passes, but at least
  //    the share of experts the current request touches (a prefill batch routes to nearly all
  //    of them, so every expert will be needed on the next pass whatever its history).
  // T = d + n_layer · (1/p − 1). Evicting the largest T approximates Belady's optimal choice; for
  // a prefill that sweeps more experts than fit, it keeps a fixed set instead of cycling the cache
  // (where LRU and recency-weighted LFU evict exactly what the next layers need).
  double steps_to_next_use(int32_t key) const {
    const int n_layer = map_.n_layer;
    const int layer = key / map_.n_expert;
    const int d = il_ < 0 ? n_layer : ((layer - il_ - 1 + n_layer) % n_layer) + 1;
    const double freq = pass_w_[layer] > 0 ? use_w_[key] / pass_w_[layer] : 0.0;
    const double p = std::clamp(std::max(coverage_, freq), 1e-3, 1.0);
    return d + n_layer * (1.0 / p - 1.0);
  }

  // Counts a pass over layer il for the nextuse frequencies and returns this pass's weight:
  // 2^(pass/H) grows so older passes weigh half as much every H passes without touching every
  // key; both sums are rescaled before the weights could overflow.
  double count_pass(int il) {
    constexpr double kHalfLife = 32;  // passes (decode: tokens) over which a use counts half
    if (++pass_[il] >= 1024) {
      const double scale = std::exp2(-static_cast<double>(pass_[il]) / kHalfLife);
      for (int e = 0; e < map_.n_expert; ++e) use_w_[static_cast<size_t>(il) * map_.n_expert + e] *= scale;
      pass_w_[il] *= scale;
      pass_[il] = 0;
    }
    const double w = std::exp2(static_cast<double>(pass_[il]) / kHalfLife);
    pass_w_[il] += w;
    return w;
  }

  void load(int32_t s, int32_t key, bool demand) {
    Slot& sl = slots_[s];
    if (sl.key >= 0) key_slot_[sl.key] = -1;
    sl = Slot{};
    sl.key = key;
    sl.state = SlotState::kLoading;
    sl.demand = demand;
    sl.submitted = clock_.seconds();
    key_slot_[key] = s;
    touch(s);
    ReadRequest reqs[3];
    uint64_t at = 0;
    int n_reqs = 0;
    for (int r = 0; r < 3; ++r) {
      const FileRange& fr = map_.ranges[key][r];
      const uint64_t start = align_down(fr.offset);
      const uint64_t len = widened(fr);
      reqs[n_reqs++] = {fds_[fr.part], start, static_cast<uint32_t>(len),
                        arena_.data() + static_cast<uint64_t>(s) * slot_bytes_ + at, static_cast<uint64_t>(s) * 4 + r};
      at += len;
    }
    sl.pending = n_reqs;
    reader_->submit(std::span<const ReadRequest>(reqs, n_reqs));
  }

  void issue_deferred() {
    while (!deferred_.empty()) {
      const int i = deferred_.back();
      const int32_t s = victim();
      if (s < 0) return;
      deferred_.pop_back();
      load(s, il_ * map_.n_expert + ids_[i], true);
      ++slots_[s].pins;
    }
  }

  void poll(bool block) {
    done_.clear();
    reader_->reap(done_, block);
    for (const auto& c : done_) {
      const int32_t s = static_cast<int32_t>(c.tag / 4);
      const int r = static_cast<int>(c.tag % 4);
      Slot& sl = slots_[s];
      const FileRange& fr = map_.ranges[sl.key][r];
      // The widened read may stop early only at end of file, never inside the slice itself.
      const uint64_t needed = fr.offset + fr.length - align_down(fr.offset);
      if (c.result < 0 || static_cast<uint64_t>(c.result) < needed) {
        sl.error = c.result < 0 ? fmt::format("read error: {}", std::strerror(static_cast<int>(-c.result)))
                                : fmt::format("short read: {} of {} bytes (file truncated or replaced?)", c.result, needed);
        sl.error = fmt::format("{} at offset {} of '{}'", sl.error, fr.offset, map_.part_paths[fr.part]);
      }
      stats_.bytes_read += c.result > 0 ? static_cast<uint64_t>(c.result) : 0;
      if (sl.error.empty()) {
        // Without O_DIRECT the bytes also landed in the page cache: drop them there.
        if (!direct_[fr.part]) posix_fadvise(fds_[fr.part], static_cast<off_t>(align_down(fr.offset)), static_cast<off_t>(widened(fr)), POSIX_FADV_DONTNEED);
      }
      if (--sl.pending > 0) continue;
      const int layer = sl.key / map_.n_expert, e = sl.key % map_.n_expert;
      if (!sl.error.empty()) {
        sl.state = SlotState::kFailed;
        const std::string msg = fmt::format("expert L{}/E{}: {}", layer, e, sl.error);
        key_slot_[sl.key] = -1;
        sl = Slot{};
        if (!ids_.empty()) abort_request();
        fail("{}", msg);
      }
      sl.state = SlotState::kReady;
      const double ms = (clock_.seconds() - sl.submitted) * 1e3;
      stats_.read_seconds += ms / 1e3;
      if (o_.debug && !preloading_)
        SLUICE_LOG_INFO("[experts] {} L{}/E{} {:.2f} MB {:.1f} ms", sl.demand ? "miss" : "prefetch", layer, e,
                                    static_cast<double>(expert_bytes(sl.key)) / 1e6, ms);
      if (layer == il_ && !ids_.empty())
        for (size_t i = 0; i < ids_.size(); ++i)
          if (ids_[i] == e && state_[i] == kWaiting) {
            state_[i] = 1;
            ready_.push_back(static_cast<int>(i));
          }
    }
  }

  void abort_request() {
    for (size_t i = 0; i < ids_.size(); ++i) {
      const int32_t s = key_slot_[il_ * map_.n_expert + ids_[i]];
      if (s >= 0 && slots_[s].pins > 0) --slots_[s].pins;
    }
    ids_.clear();
    state_.clear();
    ready_.clear();
    deferred_.clear();
    handed_ = -1;
  }

  void release_handed() {
    if (handed_ >= 0 && slots_[handed_].pins > 0) --slots_[handed_].pins;
    handed_ = -1;
  }

  uint64_t expert_bytes(int32_t key) const {
    uint64_t b = 0;
    for (const auto& r : map_.ranges[key]) b += r.length;
    return b;
  }

  ExpertWeights weights_of(int32_t s, int32_t e) const {
    ExpertWeights w = layout_.in_place(il_, e);  // shapes, types and biases
    const std::byte* base = arena_.data() + static_cast<uint64_t>(s) * slot_bytes_;
    const auto& rr = map_.ranges[slots_[s].key];
    uint64_t at = 0;
    MatView* views[3] = {&w.gate, &w.up, &w.down};
    for (int r = 0; r < 3; ++r) {
      views[r]->data = base + at + (rr[r].offset - align_down(rr[r].offset));
      at += widened(rr[r]);
    }
    return w;
  }

  void preload() {
    std::vector<int32_t> order;
    for (int32_t k = 0; k < static_cast<int32_t>(key_slot_.size()); ++k)
      if (expert_bytes(k) > 0) order.push_back(k);
    const int64_t total = static_cast<int64_t>(order.size());
    if (have_heat_)
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return heat_[a] > heat_[b]; });
    int64_t n = std::min<int64_t>(n_slots_, total);
    if (o_.preload_limit >= 0) n = std::min(n, o_.preload_limit);
    Timer t;
    preloading_ = true;
    for (int64_t i = 0; i < n; ++i) {
      load(static_cast<int32_t>(i), order[i], false);
      if (reader_->in_flight() >= 192) poll(true);
    }
    while (reader_->in_flight() > 0) poll(true);
    preloading_ = false;
    if (n > 0)
      SLUICE_LOG_INFO("experts: preloaded {} experts ({}) in {:.2f} s from {}", n, format_bytes(stats_.bytes_read), t.seconds(),
                      have_heat_ ? "the heat profile" : "file order");
    stats_.bytes_read = 0;
    stats_.read_seconds = 0;
  }

  void load_heat() {
    if (o_.heat_path.empty()) return;
    std::ifstream in(o_.heat_path);
    std::string magic;
    int nl = 0, ne = 0;
    if (!(in >> magic >> nl >> ne) || magic != "sluice-heat-v1" || nl != map_.n_layer || ne != map_.n_expert) return;
    for (auto& h : heat_)
      if (!(in >> h)) {
        std::fill(heat_.begin(), heat_.end(), 0.0);
        return;
      }
    have_heat_ = true;
  }

  void save_heat() {
    if (o_.heat_path.empty()) return;
    // Decay: the saved profile is half the old one plus this run's counts (old counts were
    // loaded into heat_ and this run's were added to them).
    std::vector<double> old(heat_.size(), 0.0);
    {
      std::ifstream in(o_.heat_path);
      std::string magic;
      int nl = 0, ne = 0;
      if (in >> magic >> nl >> ne && magic == "sluice-heat-v1" && nl == map_.n_layer && ne == map_.n_expert)
        for (auto& h : old) in >> h;
    }
    const std::string tmp = o_.heat_path + ".tmp";
    std::ofstream out(tmp);
    out << "sluice-heat-v1 " << map_.n_layer << ' ' << map_.n_expert << '\n';
    for (size_t k = 0; k < heat_.size(); ++k) out << (heat_[k] - 0.5 * old[k]) << ((k + 1) % map_.n_expert ? ' ' : '\n');
    out.close();
    if (out) std::rename(tmp.c_str(), o_.heat_path.c_str());
  }

  const ExpertLayout& layout_;
  ExpertFileMap map_;
  StreamOptions o_;
  std::unique_ptr<SsdReader> reader_;
  uint64_t slot_bytes_ = 0;
  int n_slots_ = 0;
  AlignedBuffer arena_;
  bool locked_ = false;
  std::vector<Slot> slots_;
  std::vector<int32_t> key_slot_;
  std::vector<double> heat_;
  std::vector<double> use_w_;   // nextuse: per key, decayed passes that used it
  std::vector<double> pass_w_;  // nextuse: per layer, decayed passes
  std::vector<uint32_t> pass_;  // nextuse: per layer, passes since the last rescale
  double coverage_ = 0;         // share of the layer's experts the current request touches
  // Prefetch precision per prediction rank (decayed counts), for ranked predictions.
  static constexpr size_t kRanks = 32;
  struct RankStats {
    double issued = 0, used = 0;
  };
  std::array<RankStats, kRanks> rank_stats_{};
  uint64_t prefetch_calls_ = 0;
  bool have_heat_ = false;
  bool preloading_ = false;
  std::vector<int> fds_;
  std::vector<bool> direct_;
  Timer clock_;
  uint64_t tick_ = 0;

  // Current request.
  int il_ = -1;
  std::vector<int32_t> ids_;
  std::vector<uint8_t> state_;
  std::vector<int> ready_;
  std::vector<int> deferred_;
  int32_t handed_ = -1;
  size_t n_handed_ = 0;
  std::vector<ReadCompletion> done_;
  ExpertStoreStats stats_;
};

}  // namespace

uint64_t stream_slot_bytes(const ExpertFileMap& map) {
  uint64_t best = 0;
  for (const auto& r : map.ranges) best = std::max(best, widened(r[0]) + widened(r[1]) + widened(r[2]));
  return best;
}

std::unique_ptr<ExpertStore> make_stream_store(const ExpertLayout& layout, const ExpertFileMap& map,
                                               const StreamOptions& options, int n_expert_used) {
  return std::make_unique<StreamStore>(layout, map, options, n_expert_used);
}

}  // namespace sluice
