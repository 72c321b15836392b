// Names of the public option enums (sluice/types.h), the one place that spells them.
#include "sluice/types.h"

#include <array>

namespace sluice {

namespace {
constexpr std::array kModes = {ExpertMode::kAuto, ExpertMode::kRam, ExpertMode::kMmap, ExpertMode::kStream};
constexpr std::array kKvTypes = {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0};
constexpr std::array kDraftModes = {DraftMode::kAuto, DraftMode::kNone, DraftMode::kNgram,
                                    DraftMode::kMtp};
}  // namespace

const char* expert_mode_name(ExpertMode m) {
  switch (m) {
    case ExpertMode::kAuto: return "auto";
    case ExpertMode::kRam: return "ram";
    case ExpertMode::kMmap: return "mmap";
    case ExpertMode::kStream: return "stream";
  }
  return "?";
}

const char* eviction_policy_name(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kLru: return "lru";
    case EvictionPolicy::kLfu: return "lfu";
    case EvictionPolicy::kNextUse: return "nextuse";
  }
  return "?";
}

const char* draft_mode_name(DraftMode m) {
  switch (m) {
    case DraftMode::kAuto: return "auto";
    case DraftMode::kNone: return "none";
    case DraftMode::kNgram: return "ngram";
    case DraftMode::kMtp:
      return "mtp";
  }
  return "?";
}

std::optional<ExpertMode> parse_expert_mode(std::string_view name) {
  for (ExpertMode m : kModes)
    if (name == expert_mode_name(m)) return m;
  return std::nullopt;
}

std::optional<EvictionPolicy> parse_eviction_policy(std::string_view name) {
  for (EvictionPolicy p : kEvictionPolicies)
    if (name == eviction_policy_name(p)) return p;
  return std::nullopt;
}

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kBF16: return "bf16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  for (KvType t : kKvTypes)
    if (name == kv_type_name(t)) return t;
  return std::nullopt;
}

std::optional<DraftMode> parse_draft_mode(std::string_view name) {
  for (DraftMode m : kDraftModes)
    if (name == draft_mode_name(m)) return m;
  return std::nullopt;
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
    case Pooling::kCls: return "cls";
  }
  return "?";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::kMean, Pooling::kLast, Pooling::kCls})
    if (name == pooling_name(p)) return p;
  return std::nullopt;
}

}  // namespace sluice
