// KV cache of DeepSeek V4 (`deepseek4`). K is V and attention mixes three kinds of keys, so each
// layer keeps only what its kind needs, per sequence:
//   every layer      a ring of the last W + kRollback raw keys (D values each);
//   ratio r ≠ 0      pooled rows, one per r positions (D values), allocated in chunks of kBlock
//                    positions; and the compressor state: F32 kv and score rows (2·c·D floats,
//                    c = 2 for r = 4, 1 for r = 128) of the last 2r (r = 4) or r (r = 128)
//                    positions plus kRollback, in a ring indexed by position;
//   ratio 4          indexer keys, one per 4 positions (Id values), and the indexer compressor
//                    state (4·Id floats per position) in the same kind of ring.
// Raw keys, pooled rows and indexer keys are stored as the configured key type (--cache-type-k;
// they are the values too, so there is no separate value type). The compressor states stay f32:
// they are running softmax-pooled sums, small and fixed per sequence.
// Rings cannot be rewound arbitrarily: truncate() keeps the prefix when at most kRollback
// positions are dropped (enough for "re-run the last token") and otherwise empties the sequence;
// callers continue from length(). A forward step that fails half way has overwritten ring rows,
// so a step in flight (begin_step, ended by set_length) counts as an empty sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"

namespace sluice {

// The stored row type of a configuration (the key type): throws the refusal (the engine's and
// `sluice inspect`'s) when --cache-type-v asks for a different value type, since values are keys.
KvType ds4_row_type(const KvCacheConfig& config);

struct Ds4CacheShape {
  std::vector<int> ratio;             // per layer: 0, 4 or 128; kAbsent: held by another cache
  static constexpr int kAbsent = -1;  // the MTP block's cache skips the main layers
  int head_dim = 0;        // D: raw keys and pooled rows
  int index_dim = 0;       // Id: indexer keys (ratio-4 layers)
  int window = 0;          // W
  KvType type = KvType::kF32;  // raw keys, pooled rows and indexer keys

  static constexpr int kRollback = 16;  // positions truncate() can drop without losing the prefix
  int window_slots() const { return window + kRollback; }
  // Compressor ring length of a layer of ratio r (r ≠ 0): a ratio-4 block also pools the previous
  // one.
  static int state_slots(int r) { return (r == 4 ? 8 : r) + kRollback; }
  static int state_width(int r) { return r == 4 ? 2 : 1; }  // c: channel groups per compressor row
  // Floats of a layer's compressor ring (ratio r ≠ 0) and of a ratio-4 layer's indexer ring.
  uint64_t state_floats(int r) const {
    return static_cast<uint64_t>(state_slots(r)) * 2 * state_width(r) * head_dim;
  }
  uint64_t index_state_floats() const {
    return static_cast<uint64_t>(state_slots(4)) * 4 * index_dim;
  }
  uint64_t key_bytes() const { return kv_head_bytes(type, head_dim); }  // a raw key or pooled row
  uint64_t index_bytes() const { return kv_head_bytes(type, index_dim); }  // an indexer key
  // Growth per position in bytes, and the fixed bytes of one sequence (rings and states): the
  // single rule `sluice inspect` and the engine both use.
  uint64_t bytes_per_position() const;
  uint64_t fixed_bytes() const;
};

class Ds4KvCache final : public KvCache {
 public:
  Ds4KvCache(Ds4CacheShape shape, int n_ctx);

  const Ds4CacheShape& shape() const { return shape_; }

  void reserve(int seq, int n) override;
  int length(int seq) const override;
  void set_length(int seq, int n) override;
  void truncate(int seq, int n) override;
  void remove(int seq) override;
  void copy_prefix(int src, int dst, int n) override;
  uint64_t bytes_per_position() const override { return shape_.bytes_per_position(); }
  uint64_t allocated_bytes() const override;
  uint64_t bytes_for(int n) const override {
    return shape_.fixed_bytes() + bytes_per_position() * static_cast<uint64_t>(n);
  }

  // A saved sequence is its rings and compressor states whole (they are indexed by position, so
  // they restore exactly) and its pooled and indexer rows up to the prefix. Only a prefix the rings
  // still hold can be exported: at most kRollback positions behind the sequence's length.
  std::vector<std::byte> export_prefix(int seq, int n) const override;
  void import_prefix(int seq, int n, const std::vector<std::byte>& data) override;
  std::string layout_id() const override;
  int max_rollback() const override { return Ds4CacheShape::kRollback; }

  // Marks the sequence as being advanced by a forward step (the model calls it before any write).
  void begin_step(int seq) { seq_ref(seq).in_flight = true; }

  // Rows of sequence `seq` in layer `il` (the sequence must have been reserved). Key rows are
  // stored as shape().type (kv_store_head / kv_load_head convert); compressor states are f32.
  std::byte* window_row(int seq, int il, int pos);    // (D) ring slot of position pos
  std::byte* pooled_row(int seq, int il, int block);  // (D)
  std::byte* index_row(int seq, int il, int block);   // (Id)
  float* state_row(int seq, int il, int pos);        // (2·c·D) compressor kv then score
  float* index_state_row(int seq, int il, int pos);  // (4·Id) indexer compressor kv then score

 private:
  struct Layer {
    std::unique_ptr<std::byte[]> window;  // (W + kRollback) key rows
    std::unique_ptr<float[]> state, index_state;
    std::vector<std::unique_ptr<std::byte[]>> chunks;  // kBlock/r pooled (+ indexer) rows per chunk
  };
  struct Seq {
    int length = 0;
    bool in_flight = false;  // rings written past `length` by a step that has not finished
    std::vector<Layer> layers;
  };
  Seq& seq_ref(int seq);
  Seq* find(int seq) const;
  uint64_t chunk_row_bytes(int il) const {
    return shape_.key_bytes() + (shape_.ratio[il] == 4 ? shape_.index_bytes() : 0);
  }
  std::byte* chunk_row(int seq, int il, int block);
  // The sequence's storage in saved order, as (pointer, bytes) spans: per layer the window ring,
  // the compressor rings, then the pooled (+ indexer) rows of the blocks [0, ceil(n / r)). The
  // pointers are writable even for a const Seq (they are owned through unique_ptr), which import
  // and copy_prefix rely on: export, import and copy all walk this one layout.
  template <class Fn>
  void for_each_span(const Seq& s, int n, Fn&& fn) const;

  Ds4CacheShape shape_;
  std::vector<std::unique_ptr<Seq>> seqs_;
};

}  // namespace sluice
