// Vocabulary shared by the public API and the layers below it: the error type every sluice call
// throws for bad input, and the option enums that front ends parse once from their flags.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Every failure caused by input (a file, a flag, a request) is a sluice::Error with a precise,
// user-facing message; front ends catch it at the top and print it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Where routed experts live: chosen from the memory budget (auto), kept in RAM, left to the page
// cache of the mmap, or streamed from SSD through a RAM cache.
enum class ExpertMode { kAuto, kRam, kMmap, kStream };

// Expert-cache eviction in stream mode. lru: least recently used; lfu: decayed use count
// (recency-weighted); nextuse: estimated layer steps until the next use (the default: fastest in
// bench/stream-sweep except Zipf-routed decode at 2 GB, where lfu led).
enum class EvictionPolicy { kLru, kLfu, kNextUse };
inline constexpr EvictionPolicy kEvictionPolicies[] = {EvictionPolicy::kLru, EvictionPolicy::kLfu,
                                                       EvictionPolicy::kNextUse};

// Storage type of cached keys or values (--cache-type-k / --cache-type-v). q8_0 and q4_0 store
// blocks of 32 values with one f16 scale; a head whose size is not a multiple of 32 is padded with
// zeros to whole blocks.
enum class KvType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };
// Speculative decoding: where draft tokens come from. auto: the file's MTP layers when it has
// them and the engine loaded them (EngineOptions::draft), else n-gram lookup; ngram: continuations
// of earlier occurrences of the context's last tokens (prompt lookup, no extra weights); mtp: the
// file's multi-token-prediction (nextn) block; none: one token per forward pass.
enum class DraftMode { kAuto, kNone, kNgram, kMtp };

// How an embedding pools the final hidden states of its input's tokens (serve --pooling): their
// mean, the last token's, or the first token's (cls: the BOS a tokenizer adds, as BERT's [CLS]).
enum class Pooling { kMean, kLast, kCls };

// The routed-expert cache as it stands, one entry per (layer, expert) at key layer · n_expert +
// expert: where the expert is now, and how often it was found in memory, read on demand and
// prefetched since the engine loaded (warm-start preloads not counted). In ram and mmap modes
// every expert is resident and every request a hit.
struct ExpertCacheMap {
  enum State : uint8_t {
    kOnDisk = 0,      // not in the cache
    kLoading = 1,     // a demand read in flight
    kResident = 2,    // in the cache
    kPrefetched = 3,  // read (or being read) ahead of use, not yet used
    kNone = 4,        // the layer has no routed experts here (dense layer, another pipeline stage)
  };
  int n_layer = 0, n_expert = 0;
  std::vector<uint8_t> state;                      // (n_layer · n_expert) State
  std::vector<uint32_t> hits, misses, prefetches;  // (n_layer · n_expert) counts since load
};

const char* expert_mode_name(ExpertMode m);          // "auto", "ram", "mmap", "stream"
const char* eviction_policy_name(EvictionPolicy p);  // "lru", "lfu", "nextuse"
const char* draft_mode_name(DraftMode m);            // "auto", "none", "ngram", "mtp"
// nullopt for any other spelling.
std::optional<ExpertMode> parse_expert_mode(std::string_view name);
std::optional<EvictionPolicy> parse_eviction_policy(std::string_view name);
const char* kv_type_name(KvType t);  // "f32", "f16", "bf16", "q8_0", "q4_0"
std::optional<KvType> parse_kv_type(std::string_view name);
std::optional<DraftMode> parse_draft_mode(std::string_view name);
const char* pooling_name(Pooling p);  // "mean", "last", "cls"
std::optional<Pooling> parse_pooling(std::string_view name);

}  // namespace sluice
