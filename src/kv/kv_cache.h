// KV cache: per sequence and layer, keys and values in fp32, allocated in blocks of kBlock
// positions so memory follows the tokens actually held, not the maximum context. Several
// sequences share one cache object (batched decoding); each is addressed by a small integer id.
// Architectures whose cache is not one K/V row per position (deepseek4: a window ring, pooled rows
// and compressor states) subclass it and override the sequence-management methods.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace sluice {

class KvCache {
 public:
  static constexpr int kBlock = 256;  // positions per allocation block

  // k_dims[l] / v_dims[l]: floats per position in layer l (n_head_kv × head size, or the MLA
  // latent width). n_ctx: the most positions one sequence may hold.
  KvCache(std::vector<int> k_dims, std::vector<int> v_dims, int n_ctx);
  virtual ~KvCache() = default;

  int n_ctx() const { return n_ctx_; }
  int n_layer() const { return static_cast<int>(k_dims_.size()); }
  int k_dim(int layer) const { return k_dims_[layer]; }
  int v_dim(int layer) const { return v_dims_[layer]; }

  // Makes room for positions [0, n) of `seq` (allocating blocks); throws past n_ctx.
  virtual void reserve(int seq, int n);
  // Number of positions of `seq` whose K/V are valid (set by the caller after a forward step).
  virtual int length(int seq) const;
  virtual void set_length(int seq, int n);
  // Drops positions ≥ n (keeps the blocks for reuse); remove() frees the sequence's memory.
  // A cache that cannot roll back to n keeps a shorter prefix: callers continue from length().
  virtual void truncate(int seq, int n);
  virtual void remove(int seq);
  // Copies the first n positions of `src` into `dst` (prefix reuse); as with truncate, length(dst)
  // may end up shorter than n.
  virtual void copy_prefix(int src, int dst, int n);

  float* k(int seq, int layer, int pos) { return row(seq, layer, pos, false); }
  float* v(int seq, int layer, int pos) { return row(seq, layer, pos, true); }
  const float* k(int seq, int layer, int pos) const { return const_cast<KvCache*>(this)->row(seq, layer, pos, false); }
  const float* v(int seq, int layer, int pos) const { return const_cast<KvCache*>(this)->row(seq, layer, pos, true); }

  virtual uint64_t bytes_per_position() const;
  virtual uint64_t allocated_bytes() const;
  // Bytes one sequence of n positions occupies (planning): per-position rows plus fixed parts.
  virtual uint64_t bytes_for(int n) const { return bytes_per_position() * static_cast<uint64_t>(n); }

 protected:
  // For subclasses that manage their own storage.
  explicit KvCache(int n_ctx);

 private:
  struct Seq {
    int length = 0;
    // blocks[layer] holds block pointers; each block: kBlock × (k_dim + v_dim) floats.
    std::vector<std::vector<std::unique_ptr<float[]>>> blocks;
  };
  float* row(int seq, int layer, int pos, bool value);
  Seq& seq_ref(int seq);

  std::vector<int> k_dims_, v_dims_;
  int n_ctx_;
  std::vector<std::unique_ptr<Seq>> seqs_;
};

}  // namespace sluice
