// KV cache of DeepSeek V4 (`deepseek4`). K is V and attention mixes three kinds of keys, so each
// layer keeps only what its kind needs, per sequence:
//   every layer      a ring of the last W + kRollback raw keys (D floats each);
//   ratio r ≠ 0      pooled rows, one per r positions (D floats), allocated in chunks of kBlock
//                    positions; and the compressor state: F32 kv and score rows (2·c·D floats,
//                    c = 2 for r = 4, 1 for r = 128) of the last 2r (r = 4) or r (r = 128)
//                    positions plus kRollback, in a ring indexed by position;
//   ratio 4          indexer keys, one per 4 positions (Id floats), and the indexer compressor
//                    state (4·Id floats per position) in the same kind of ring.
// Rings cannot be rewound arbitrarily: truncate() keeps the prefix when at most kRollback
// positions are dropped (enough for "re-run the last token") and otherwise empties the sequence;
// callers continue from length(). A forward step that fails half way has overwritten ring rows,
// so a step in flight (begin_step, ended by set_length) counts as an empty sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"

namespace sluice {

// The cache keeps its window ring, pooled rows and compressor states in f32 only: throws the
// refusal (the engine's and `sluice inspect`'s) for any other configured type.
void ds4_require_f32_kv(const KvCacheConfig& config);

struct Ds4CacheShape {
  std::vector<int> ratio;  // per layer: 0, 4 or 128
  int head_dim = 0;        // D: raw keys and pooled rows
  int index_dim = 0;       // Id: indexer keys (ratio-4 layers)
  int window = 0;          // W

  static constexpr int kRollback = 16;  // positions truncate() can drop without losing the prefix
  int window_slots() const { return window + kRollback; }
  // Compressor ring length of a layer of ratio r (r ≠ 0): a ratio-4 block also pools the previous
  // one.
  static int state_slots(int r) { return (r == 4 ? 8 : r) + kRollback; }
  static int state_width(int r) { return r == 4 ? 2 : 1; }  // c: channel groups per compressor row
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

  // Rings, pooled rows and compressor states have no exported form: sessions and the server's
  // disk cache skip deepseek4 (exportable() is false).
  bool exportable() const override { return false; }

  // Marks the sequence as being advanced by a forward step (the model calls it before any write).
  void begin_step(int seq) { seq_ref(seq).in_flight = true; }

  // Rows of sequence `seq` in layer `il` (the sequence must have been reserved).
  float* window_row(int seq, int il, int pos);       // (D) ring slot of position pos
  float* state_row(int seq, int il, int pos);        // (2·c·D) compressor kv then score
  float* index_state_row(int seq, int il, int pos);  // (4·Id) indexer compressor kv then score
  float* pooled_row(int seq, int il, int block);     // (D)
  float* index_row(int seq, int il, int block);      // (Id)

 private:
  struct Layer {
    std::unique_ptr<float[]> window, state, index_state;
    std::vector<std::unique_ptr<float[]>> chunks;  // kBlock/r pooled rows (D + Id each) per chunk
  };
  struct Seq {
    int length = 0;
    bool in_flight = false;  // rings written past `length` by a step that has not finished
    std::vector<Layer> layers;
  };
  Seq& seq_ref(int seq);
  Seq* find(int seq) const;
  int row_width(int il) const {
    return shape_.head_dim + (shape_.ratio[il] == 4 ? shape_.index_dim : 0);
  }
  float* chunk_row(int seq, int il, int block);

  Ds4CacheShape shape_;
  std::vector<std::unique_ptr<Seq>> seqs_;
};

}  // namespace sluice
