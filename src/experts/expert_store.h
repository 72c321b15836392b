// The expert store: the only way the model reaches routed-expert weights. The MoE block asks for
// the experts its tokens routed to and consumes them in the order they become ready, so experts
// already in memory are computed while missing ones are still being read from disk.
//
// Lifetime: weights handed out by next() stay valid until end() for that layer; a store may reuse
// their memory afterwards. Calls for one layer are not interleaved with another layer's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "ops/matmul.h"
#include "sluice/types.h"

namespace sluice {

// One routed expert of one layer. gate/up: (n_ff rows × n_embd); down: (n_embd rows × n_ff).
// Biases (gpt-oss) are F32 vectors or null.
struct ExpertWeights {
  MatView gate{}, up{}, down{};
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};

// Where one layer's routed experts live in the model file, as tensor views. Merged layouts hold
// (n_in, n_out, n_expert) tensors sliced per expert; the legacy Mixtral layout holds one tensor
// per expert and role.
struct ExpertLayerTensors {
  Tensor gate, up, down;                 // merged: 3-D; empty in the legacy layout
  Tensor gate_bias, up_bias, down_bias;  // merged biases (n_out, n_expert), optional
  std::vector<Tensor> gate_each, up_each, down_each;  // legacy: one 2-D tensor per expert
};

// An expert's slices: its three matrices, then their biases (gpt-oss); length 0 when absent.
enum ExpertPart { kGate, kUp, kDown, kGateBias, kUpBias, kDownBias, kExpertParts };
using ExpertRanges = std::array<FileRange, kExpertParts>;

// The one definition of a routed expert: its matrices and biases, in memory and in the files.
struct ExpertLayout {
  int n_expert = 0;
  std::vector<ExpertLayerTensors> layers;  // indexed by layer; non-MoE layers are empty
  bool has_layer(int il) const { return il < static_cast<int>(layers.size()) && (layers[il].gate || !layers[il].gate_each.empty()); }
  // The weights of expert e read in place from the tensors' memory.
  ExpertWeights in_place(int il, int e) const;
  // Where expert e of layer il lies in the model files, slice by slice.
  ExpertRanges file_ranges(int il, int e) const;
  // Bytes of every routed expert, biases included: what may stay on disk.
  uint64_t routed_bytes() const;
};

struct ExpertStoreStats {
  uint64_t requests = 0;      // expert acquisitions
  uint64_t hits = 0;          // served from memory
  uint64_t misses = 0;        // needed a read
  uint64_t bytes_read = 0;
  double read_seconds = 0;    // summed read latency
  double stall_seconds = 0;   // time the forward pass waited for reads
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;  // prefetched experts later requested
  uint64_t certain_issued = 0; // of prefetch_issued: certain predictions (hash-routed layers)
  uint64_t certain_used = 0;   // of prefetch_used: certain predictions
  uint64_t cache_bytes = 0;    // memory the store reads experts into (stream: the slot arena)
};

// What a prefetch knows about the experts it names.
enum class PrefetchHint : uint8_t {
  kRanked,   // one token's prediction, most likely first: the store may keep only the ranks whose
             // measured precision pays for their reads
  kSet,      // an unordered set of probable experts (several tokens' predictions)
  kCertain,  // known to be needed (hash-routed layers pick experts by token id): read whatever
             // the precision, and kept from eviction until the layer runs
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Starts making experts `ids` of layer `il` available (ids are distinct).
  virtual void begin(int il, std::span<const int32_t> ids) = 0;
  // Waits for one requested expert not yet handed out; sets its position in `ids` and weights.
  // Returns false when all have been handed out.
  virtual bool next(int* index, ExpertWeights* w) = 0;
  // The layer's experts are no longer used by the caller.
  virtual void end() = 0;
  // Whether weights handed out by next() stay valid until end(), rather than until the next call
  // (a streaming store recycles the previous expert's slot). When they do, a layer's experts can
  // be computed together in a few batches instead of one after another.
  virtual bool handed_weights_persist() const { return false; }
  // Experts layer `il` will probably (or, kCertain, surely) need soon; a store may start reading
  // them.
  virtual void prefetch(int il, std::span<const int32_t> ids, PrefetchHint hint) {}
  virtual ExpertStoreStats stats() const { return {}; }
  // Every expert's place and counts (sluice::ExpertCacheMap); on the thread that runs the store.
  // A store that keeps no per-expert state (a test's) leaves it empty.
  virtual void cache_map(ExpertCacheMap& out) const { out = {}; }
  virtual std::string describe() const = 0;
};

// Experts read in place from the model's memory (RAM or the OS page cache of the mmap).
std::unique_ptr<ExpertStore> make_in_place_store(const ExpertLayout& layout, std::string mode);
// An expert-parallel rank's experts in RAM: the experts `owned` selects ((n_layer · n_expert),
// nonzero: the experts this process holds, its own and its replicas) are copied into one buffer of 2 MiB pages and handed out from there
// (any other expert is read in place). Faulting in only a rank's own slices of the file mapping
// leaves them in 4 KiB pages, interleaved with the other ranks' slices, where a whole tensor read
// at once gets 2 MiB mappings; the TLB misses made a rank's experts about 1.5× slower per expert
// on the 16-layer preset. The copy holds exactly the rank's share, so its memory is unchanged; it
// costs load time (the fresh pages are zeroed, then filled).
std::unique_ptr<ExpertStore> make_packed_store(const ExpertLayout& layout,
                                               std::span<const uint8_t> held, std::string mode);

}  // namespace sluice
