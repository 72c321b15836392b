// KV cache block management; see kv_cache.h. Within a block, position p's key row sits at
// p·k_dim and its value row after all keys, so attention scans contiguous memory per block.
#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sluice {

KvCache::KvCache(std::vector<int> k_dims, std::vector<int> v_dims, int n_ctx)
    : k_dims_(std::move(k_dims)), v_dims_(std::move(v_dims)), n_ctx_(n_ctx) {
  if (n_ctx_ <= 0) fail("context size must be positive, got {}", n_ctx_);
}

KvCache::KvCache(int n_ctx) : n_ctx_(n_ctx) {
  if (n_ctx_ <= 0) fail("context size must be positive, got {}", n_ctx_);
}

KvCache::Seq& KvCache::seq_ref(int seq) {
  if (seq < 0) fail("internal: negative sequence id {}", seq);
  if (static_cast<size_t>(seq) >= seqs_.size()) seqs_.resize(seq + 1);
  if (!seqs_[seq]) {
    seqs_[seq] = std::make_unique<Seq>();
    seqs_[seq]->blocks.resize(k_dims_.size());
  }
  return *seqs_[seq];
}

void KvCache::reserve(int seq, int n) {
  if (n > n_ctx_) fail("context overflow: {} positions requested, the context holds {}", n, n_ctx_);
  Seq& s = seq_ref(seq);
  const size_t n_blocks = (static_cast<size_t>(n) + kBlock - 1) / kBlock;
  for (size_t l = 0; l < k_dims_.size(); ++l) {
    auto& bl = s.blocks[l];
    const size_t per_block = static_cast<size_t>(kBlock) * (k_dims_[l] + v_dims_[l]);
    while (bl.size() < n_blocks) bl.emplace_back(new float[per_block]);
  }
}

int KvCache::length(int seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size() || !seqs_[seq]) return 0;
  return seqs_[seq]->length;
}

void KvCache::set_length(int seq, int n) {
  reserve(seq, n);
  seq_ref(seq).length = n;
}

void KvCache::truncate(int seq, int n) {
  Seq& s = seq_ref(seq);
  s.length = std::min(s.length, std::max(0, n));
}

void KvCache::remove(int seq) {
  if (seq >= 0 && static_cast<size_t>(seq) < seqs_.size()) seqs_[seq].reset();
}

void KvCache::copy_prefix(int src, int dst, int n) {
  if (n > length(src)) fail("internal: prefix of {} positions exceeds source length {}", n, length(src));
  reserve(dst, n);
  for (int l = 0; l < n_layer(); ++l)
    for (int p = 0; p < n; ++p) {
      std::memcpy(k(dst, l, p), k(src, l, p), sizeof(float) * k_dims_[l]);
      std::memcpy(v(dst, l, p), v(src, l, p), sizeof(float) * v_dims_[l]);
    }
  seq_ref(dst).length = n;
}

float* KvCache::row(int seq, int layer, int pos, bool value) {
  Seq& s = *seqs_[seq];
  float* block = s.blocks[layer][pos / kBlock].get();
  const int in_block = pos % kBlock;
  if (!value) return block + static_cast<size_t>(in_block) * k_dims_[layer];
  return block + static_cast<size_t>(kBlock) * k_dims_[layer] + static_cast<size_t>(in_block) * v_dims_[layer];
}

uint64_t KvCache::bytes_per_position() const {
  uint64_t b = 0;
  for (size_t l = 0; l < k_dims_.size(); ++l) b += sizeof(float) * (k_dims_[l] + v_dims_[l]);
  return b;
}

uint64_t KvCache::allocated_bytes() const {
  uint64_t b = 0;
  for (const auto& s : seqs_)
    if (s)
      for (size_t l = 0; l < s->blocks.size(); ++l)
        b += s->blocks[l].size() * sizeof(float) * kBlock * (k_dims_[l] + v_dims_[l]);
  return b;
}

}  // namespace sluice
