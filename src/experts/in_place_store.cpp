// In-place expert store: every expert is "ready" at once because its bytes are addressable
// memory (loaded copies or the mmap). Used for --experts ram and --experts mmap.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "experts/expert_store.h"

namespace sluice {

namespace {

class InPlaceStore final : public ExpertStore {
 public:
  InPlaceStore(const ExpertLayout& layout, std::string mode)
      : layout_(layout), mode_(std::move(mode)), hits_(layout.layers.size() * layout.n_expert) {}

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
    *w = layout_.in_place(il_, ids_[next_]);
    ++next_;
    return true;
  }
  void end() override { ids_.clear(); }
  bool handed_weights_persist() const override { return true; }  // views of addressable memory
  ExpertStoreStats stats() const override { return stats_; }
  std::string describe() const override { return fmt::format("experts: {} (in place)", mode_); }
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
};

}  // namespace

std::unique_ptr<ExpertStore> make_in_place_store(const ExpertLayout& layout, std::string mode) {
  return std::make_unique<InPlaceStore>(layout, std::move(mode));
}

}  // namespace sluice
