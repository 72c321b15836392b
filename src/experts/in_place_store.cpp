// In-place expert store: every expert is "ready" at once because its bytes are addressable
// memory (loaded copies or the mmap). Used for --experts ram and --experts mmap, and, packed into
// one buffer of huge pages, for an expert-parallel rank's own experts and replicas in RAM.
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "experts/expert_store.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4
#endif

namespace sluice {

namespace {

// Faults in [data, data + n) of the model's mapping in one call (the kernel reads ahead over the
// whole range) rather than page by page as the copy touches it (a 2-rank load of the 16-layer
// preset: 9.0 s without, 6.3 s with; 1.9 s before the copy, most of the rest is the kernel zeroing
// the fresh huge pages).
void populate(const void* data, uint64_t n) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~uintptr_t{4095};
  madvise(reinterpret_cast<void*>(begin), n + (reinterpret_cast<uintptr_t>(data) - begin),
          MADV_POPULATE_READ);
}

// Asks the kernel to drop the pages wholly inside [data, data + n) of the model's mapping: once
// copied, a rank's experts would otherwise stay in the page cache as well, charged to its host
// (and cgroup) twice. Advice only; pages another process maps are kept.
void page_out(const void* data, uint64_t n) {
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
}

class InPlaceStore final : public ExpertStore {
 public:
  InPlaceStore(const ExpertLayout& layout, std::string mode)
      : layout_(layout), mode_(std::move(mode)), hits_(layout.layers.size() * layout.n_expert) {}
  InPlaceStore(const InPlaceStore&) = delete;
  InPlaceStore& operator=(const InPlaceStore&) = delete;

  // Copies the experts `held` selects ((n_layer · n_expert), nonzero: copy) into one anonymous
  // buffer aligned to and advised for 2 MiB pages, and hands those copies out from then on.
  void pack(std::span<const uint8_t> held) {
    const size_t n = layout_.layers.size() * static_cast<size_t>(layout_.n_expert);
    if (held.size() != n) fail("internal: a held-experts mask of {} experts for {}", held.size(), n);
    auto matrix_bytes = [](const MatView& v) { return v.row_stride * static_cast<uint64_t>(v.n_out); };
    // Each part starts on a 64-byte boundary, as a tensor in the file does.
    auto padded = [](uint64_t b) { return (b + 63) & ~uint64_t{63}; };
    auto bias_bytes = [](const MatView& v, const float* b) { return b ? v.n_out * sizeof(float) : 0; };
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!held[i]) continue;
      const ExpertWeights w = layout_.in_place(static_cast<int>(i / layout_.n_expert),
                                               static_cast<int>(i % layout_.n_expert));
      total += padded(matrix_bytes(w.gate)) + padded(matrix_bytes(w.up)) +
               padded(matrix_bytes(w.down)) + padded(bias_bytes(w.gate, w.gate_bias)) +
               padded(bias_bytes(w.up, w.up_bias)) + padded(bias_bytes(w.down, w.down_bias));
    }
    if (total == 0) return;
    // Where transparent huge pages are off, the copy still holds only this rank's experts, in 4 KiB
    // pages.
    buffer_ = HugePageBuffer(total, "experts: this rank's packed experts");
    std::byte* at = buffer_.data();
    auto copy = [&](const void* from, uint64_t bytes) {
      populate(from, bytes);
      std::memcpy(at, from, bytes);
      page_out(from, bytes);
      const std::byte* to = at;
      at += padded(bytes);
      return to;
    };
    packed_.assign(n, ExpertWeights{});
    for (size_t i = 0; i < n; ++i) {
      if (!held[i]) continue;
      const ExpertWeights w = layout_.in_place(static_cast<int>(i / layout_.n_expert),
                                               static_cast<int>(i % layout_.n_expert));
      ExpertWeights& c = packed_[i];
      c = w;
      c.gate.data = copy(w.gate.data, matrix_bytes(w.gate));
      c.up.data = copy(w.up.data, matrix_bytes(w.up));
      c.down.data = copy(w.down.data, matrix_bytes(w.down));
      auto copy_bias = [&](const MatView& v, const float* b) {
        return b ? reinterpret_cast<const float*>(copy(b, bias_bytes(v, b))) : nullptr;
      };
      c.gate_bias = copy_bias(w.gate, w.gate_bias);
      c.up_bias = copy_bias(w.up, w.up_bias);
      c.down_bias = copy_bias(w.down, w.down_bias);
    }
    packed_bytes_ = total;
    n_packed_ = static_cast<int64_t>(std::count_if(held.begin(), held.end(), [](uint8_t o) { return o != 0; }));
  }

  void begin(int il, std::span<const int32_t> ids) override {
    if (!layout_.has_layer(il)) fail("internal: layer {} has no routed experts", il);
    il_ = il;
    ids_.assign(ids.begin(), ids.end());
    next_ = 0;
    stats_.requests += ids.size();
    stats_.hits += ids.size();
    for (int32_t e : ids) ++hits_[static_cast<size_t>(il) * layout_.n_expert + e];
  }
  bool next(int* index, ExpertWeights* w) override {
    if (next_ >= ids_.size()) return false;
    *index = static_cast<int>(next_);
    const size_t at = static_cast<size_t>(il_) * layout_.n_expert + ids_[next_];
    *w = at < packed_.size() && packed_[at].gate.data ? packed_[at] : layout_.in_place(il_, ids_[next_]);
    ++next_;
    return true;
  }
  void end() override { ids_.clear(); }
  bool handed_weights_persist() const override { return true; }  // views of addressable memory
  ExpertStoreStats stats() const override { return stats_; }
  std::string describe() const override {
    if (packed_bytes_)
      return fmt::format("experts: {} (this process's {} experts copied into {:.2f} GiB of huge pages)",
                         mode_, n_packed_, static_cast<double>(packed_bytes_) / (1 << 30));
    return fmt::format("experts: {} (in place)", mode_);
  }
  void cache_map(ExpertCacheMap& out) const override {
    out.n_layer = static_cast<int>(layout_.layers.size());
    out.n_expert = layout_.n_expert;
    out.state.assign(hits_.size(), ExpertCacheMap::kResident);
    for (int il = 0; il < out.n_layer; ++il)
      if (!layout_.has_layer(il))
        std::fill_n(out.state.begin() + static_cast<size_t>(il) * out.n_expert, out.n_expert, ExpertCacheMap::kNone);
    out.hits = hits_;
    out.misses.assign(hits_.size(), 0);
    out.prefetches.assign(hits_.size(), 0);
  }

 private:
  const ExpertLayout& layout_;
  std::string mode_;
  int il_ = 0;
  std::vector<int32_t> ids_;
  size_t next_ = 0;
  ExpertStoreStats stats_;
  std::vector<uint32_t> hits_;  // per layer · n_expert + expert
  // Packed copies (per layer · n_expert + expert; gate.data null: read in place) and their buffer.
  std::vector<ExpertWeights> packed_;
  HugePageBuffer buffer_;
  uint64_t packed_bytes_ = 0;
  int64_t n_packed_ = 0;
};

}  // namespace

std::unique_ptr<ExpertStore> make_in_place_store(const ExpertLayout& layout, std::string mode) {
  return std::make_unique<InPlaceStore>(layout, std::move(mode));
}

std::unique_ptr<ExpertStore> make_packed_store(const ExpertLayout& layout,
                                               std::span<const uint8_t> held, std::string mode) {
  auto store = std::make_unique<InPlaceStore>(layout, std::move(mode));
  store->pack(held);
  return store;
}

}  // namespace sluice
