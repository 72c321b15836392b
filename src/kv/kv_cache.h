// KV cache: per sequence and layer, key and value rows stored as f32, f16, bf16, q8_0 or q4_0
// (K and V chosen separately), allocated in blocks of kBlock positions so memory follows the
// tokens actually held, not the maximum context. Several sequences share one cache object
// (batched decoding); each is addressed by a small integer id.
//
// Layers with a sliding window keep a ring of window + max_step rows instead of the whole context
// when the cache is told the most positions one forward step adds (KvCacheConfig::max_step): a
// step's own keys are written before its queries attend, so the ring must hold the window behind
// the step's first token while the step's last token is written.
//
// Architectures whose cache is not one K/V row per position (deepseek4: a window ring, pooled rows
// and compressor states) subclass it and override the sequence-management methods.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_pages.h"

#include "quant/types.h"
#include "sluice/types.h"

namespace sluice {

// What one layer caches per position.
struct KvLayerShape {
  int n_head = 0;      // KV heads (MLA: 1, the latent)
  int head_dim_k = 0;  // floats per head of K
  int head_dim_v = 0;  // floats per head of V; 0: no V cache (MLA reads values from the key rows)
  int window = 0;      // > 0: a query at p sees keys k with p − k < window
};

struct KvCacheConfig {
  KvType type_k = KvType::kF32;
  KvType type_v = KvType::kF32;
  // Most positions one forward step may add to a sequence. > 0 turns windowed layers into rings of
  // window + max_step rows (when shorter than the context); 0: every layer keeps full length and a
  // step may add any number of positions.
  int max_step = 0;
};

// The most positions the engine adds to one sequence per forward step (a session's prefill chunk;
// the scheduler caps its chunks to it), so that windowed layers keep rings of window + 512 rows.
constexpr int kEngineKvStep = 512;
inline KvCacheConfig engine_kv_config(KvType k, KvType v) { return {k, v, kEngineKvStep}; }

GgmlType kv_storage_type(KvType t);
// Floats a head of `dim` values occupies once padded to whole blocks of the type.
int kv_padded_dim(KvType t, int dim);
// Bytes of one head of `dim` values stored as `t` (padded to whole blocks).
uint64_t kv_head_bytes(KvType t, int dim);
// Converts `dim` floats into one stored head (zero padding to whole blocks), and back.
void kv_store_head(KvType t, const float* x, int dim, std::byte* dst);
void kv_load_head(KvType t, const std::byte* src, int dim, float* out);

// The sizes of a cache: the one rule the cache allocates by and `sluice inspect` and the memory
// planner count with.
struct KvLayout {
  std::vector<KvLayerShape> layers;
  KvCacheConfig config;
  int n_ctx = 0;

  uint64_t k_row_bytes(int il) const;
  uint64_t v_row_bytes(int il) const;
  // Rows of the layer's ring; 0: the layer grows with the sequence.
  int ring_slots(int il) const;
  uint64_t bytes_per_position() const;  // layers that grow with the sequence
  uint64_t fixed_bytes() const;         // rings: one sequence whatever its length
};

class KvCache {
 public:
  static constexpr int kBlock = 256;  // positions per allocation block

  KvCache(std::vector<KvLayerShape> layers, int n_ctx, KvCacheConfig config = {});
  virtual ~KvCache() = default;

  int n_ctx() const { return layout_.n_ctx; }
  int n_layer() const { return static_cast<int>(layout_.layers.size()); }
  const KvLayout& layout() const { return layout_; }
  const KvLayerShape& shape(int layer) const { return layout_.layers[layer]; }
  KvType type_k() const { return layout_.config.type_k; }
  KvType type_v() const { return layout_.config.type_v; }
  // Most positions a forward step may add to one sequence (the context when unbounded).
  int max_step() const { return layout_.config.max_step > 0 ? layout_.config.max_step : n_ctx(); }

  // Makes room for positions [0, n) of `seq` (allocating blocks); throws past n_ctx, and when a
  // ring would lose rows the step still needs (more than max_step new positions).
  virtual void reserve(int seq, int n);
  // Number of positions of `seq` whose K/V are valid (set by the caller after a forward step).
  virtual int length(int seq) const;
  virtual void set_length(int seq, int n);
  // Drops positions ≥ n (keeps the blocks for reuse); remove() frees the sequence's memory.
  // A cache that cannot roll back to n keeps a shorter prefix: callers continue from length().
  // Rings roll back as long as the window behind n is still held (at least max_step positions).
  virtual void truncate(int seq, int n);
  virtual void remove(int seq);
  // Copies the first n positions of `src` into `dst` (prefix reuse); as with truncate, length(dst)
  // may end up shorter than n.
  virtual void copy_prefix(int src, int dst, int n);

  // Stores position pos of layer `layer`: k (n_head·head_dim_k floats), v (n_head·head_dim_v;
  // ignored without a V cache), converted to the cache's types.
  void store(int seq, int layer, int pos, const float* k, const float* v);
  // The stored rows: n_head heads of kv_head_bytes(type, head_dim) bytes each.
  const std::byte* k_row(int seq, int layer, int pos) const { return row(seq, layer, pos, false); }
  const std::byte* v_row(int seq, int layer, int pos) const { return row(seq, layer, pos, true); }
  // The rows of positions [pos, pos + n), in order, into out[0, n): what k_row / v_row give each,
  // located once per stretch of rows that lie contiguously (an allocation block, or a ring up to
  // its wrap) rather than once per row. Attention locates every row it reads, two per position
  // and layer: one lookup each cost ~2 % of a small model's decode.
  void k_rows(int seq, int layer, int pos, int n, const std::byte** out) const {
    rows(seq, layer, pos, n, false, out);
  }
  void v_rows(int seq, int layer, int pos, int n, const std::byte** out) const {
    rows(seq, layer, pos, n, true, out);
  }

  virtual uint64_t bytes_per_position() const { return layout_.bytes_per_position(); }
  virtual uint64_t allocated_bytes() const;
  // Bytes one sequence of n positions occupies (planning): per-position rows plus fixed parts.
  virtual uint64_t bytes_for(int n) const {
    return layout_.fixed_bytes() + bytes_per_position() * static_cast<uint64_t>(n);
  }

  // The sequence's first `n` positions as bytes (kv/kv_state.h frames them with a header), and
  // back. export_prefix returns an empty vector when the rows of that prefix are no longer held
  // (a ring moved past them); import_prefix replaces the sequence.
  virtual std::vector<std::byte> export_prefix(int seq, int n) const;
  virtual void import_prefix(int seq, int n, const std::vector<std::byte>& data);
  // The layout in words ("k=q8_0 v=q8_0 step=512 layers=…"): exported rows are only meaningful to
  // a cache with the same id, so saved states are tagged with it.
  virtual std::string layout_id() const;
  // Most positions a sequence can be cut back by (truncate, or a restored state shortened to the
  // prefix a prompt shares) and keep the rest: rings hold only so many rows behind the last one.
  virtual int max_rollback() const;

 protected:
  // For subclasses that manage their own storage.
  explicit KvCache(int n_ctx);

 private:
  struct Seq {
    int length = 0;
    // blocks[layer]: kBlock key rows then kBlock value rows each; rings: one allocation of
    // ring_slots key rows then as many value rows.
    std::vector<std::vector<std::byte*>> blocks;
    std::vector<HugePageBuffer> memory;  // what blocks point into
    // Rings: the lowest position whose rows are still held, per layer (0 for other layers).
    std::vector<int> ring_lo;
  };
  // The row of `pos`, and in *contiguous (when non-null) how many rows from it on lie one after
  // another (to the end of its block, or of the ring): the one address rule row() and rows() share.
  std::byte* locate(int seq, int layer, int pos, bool value, int* contiguous) const;
  std::byte* row(int seq, int layer, int pos, bool value) const;
  void rows(int seq, int layer, int pos, int n, bool value, const std::byte** out) const;
  Seq& seq_ref(int seq);
  void allocate(Seq& s, int n);  // blocks for positions [0, n), rings whole
  const Seq* find(int seq) const;
  // Whether a sequence held from ring_lo can continue (or be copied) at length n.
  bool holds_window(const Seq& s, int n) const;

  KvLayout layout_;
  // Per layer, what row() needs, computed once: row() runs for every key and value an attention
  // reads, and deriving these from the layout there cost ~2 % of a prefill.
  struct RowGeometry {
    uint64_t k_bytes = 0;
    uint64_t v_bytes = 0;
    uint64_t v_offset = 0;  // of the value rows in a block (or ring) allocation
    int ring = 0;           // ring slots; 0: blocks of kBlock positions
  };
  std::vector<RowGeometry> geometry_;
  std::vector<std::unique_ptr<Seq>> seqs_;
};

}  // namespace sluice
