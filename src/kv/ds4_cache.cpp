// DeepSeek V4 cache storage; see ds4_cache.h. Pooled rows of a ratio-r layer live in chunks of
// kBlock/r rows so memory follows the positions held, like the plain cache's blocks.
#include "kv/ds4_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sluice {

void ds4_require_f32_kv(const KvCacheConfig& config) {
  if (config.type_k != KvType::kF32 || config.type_v != KvType::kF32)
    fail("deepseek4 keeps its KV cache (window ring, pooled rows, compressor states) in f32 only; "
         "--cache-type-k {} --cache-type-v {} is not supported for this model",
         kv_type_name(config.type_k), kv_type_name(config.type_v));
}

namespace {
constexpr uint64_t kF32 = sizeof(float);
}

uint64_t Ds4CacheShape::bytes_per_position() const {
  // Summed per chunk of kBlock positions, then divided once: exact for ratios 4 and 128.
  uint64_t per_block = 0;
  for (int r : ratio)
    if (r != 0)
      per_block +=
          static_cast<uint64_t>(KvCache::kBlock / r) * (head_dim + (r == 4 ? index_dim : 0)) * kF32;
  return per_block / KvCache::kBlock;
}

uint64_t Ds4CacheShape::fixed_bytes() const {
  uint64_t floats = 0;
  for (int r : ratio) {
    floats += static_cast<uint64_t>(window_slots()) * head_dim;
    if (r != 0) floats += static_cast<uint64_t>(state_slots(r)) * 2 * state_width(r) * head_dim;
    if (r == 4) floats += static_cast<uint64_t>(state_slots(r)) * 4 * index_dim;
  }
  return floats * kF32;
}

Ds4KvCache::Ds4KvCache(Ds4CacheShape shape, int n_ctx) : KvCache(n_ctx), shape_(std::move(shape)) {
  for (int r : shape_.ratio)
    if (r != 0 && r != 4 && r != 128)
      fail("deepseek4 cache: compress ratio {}, expected 0, 4 or 128", r);
  if (shape_.head_dim <= 0 || shape_.window <= 0)
    fail("deepseek4 cache: head size {} and window {} must be positive", shape_.head_dim,
         shape_.window);
}

Ds4KvCache::Seq* Ds4KvCache::find(int seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size()) return nullptr;
  return seqs_[seq].get();
}

Ds4KvCache::Seq& Ds4KvCache::seq_ref(int seq) {
  if (seq < 0) fail("internal: negative sequence id {}", seq);
  if (static_cast<size_t>(seq) >= seqs_.size()) seqs_.resize(seq + 1);
  if (!seqs_[seq]) {
    auto s = std::make_unique<Seq>();
    s->layers.resize(shape_.ratio.size());
    for (size_t il = 0; il < shape_.ratio.size(); ++il) {
      const int r = shape_.ratio[il];
      Layer& L = s->layers[il];
      L.window.reset(new float[static_cast<size_t>(shape_.window_slots()) * shape_.head_dim]());
      if (r != 0)
        L.state.reset(new float[static_cast<size_t>(Ds4CacheShape::state_slots(r)) * 2 *
                                Ds4CacheShape::state_width(r) * shape_.head_dim]());
      if (r == 4)
        L.index_state.reset(
            new float[static_cast<size_t>(Ds4CacheShape::state_slots(r)) * 4 * shape_.index_dim]());
    }
    seqs_[seq] = std::move(s);
  }
  return *seqs_[seq];
}

void Ds4KvCache::reserve(int seq, int n) {
  if (n > n_ctx())
    fail("context overflow: {} positions requested, the context holds {}", n, n_ctx());
  Seq& s = seq_ref(seq);
  const size_t n_chunks = (static_cast<size_t>(n) + kBlock - 1) / kBlock;
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const int r = shape_.ratio[il];
    if (r == 0) continue;
    auto& ch = s.layers[il].chunks;
    while (ch.size() < n_chunks)
      ch.emplace_back(new float[static_cast<size_t>(kBlock / r) * row_width(static_cast<int>(il))]);
  }
}

int Ds4KvCache::length(int seq) const {
  const Seq* s = find(seq);
  return s && !s->in_flight ? s->length : 0;
}

void Ds4KvCache::set_length(int seq, int n) {
  reserve(seq, n);
  Seq& s = seq_ref(seq);
  s.length = n;
  s.in_flight = false;
}

void Ds4KvCache::truncate(int seq, int n) {
  Seq* s = find(seq);
  if (s && s->in_flight) s->length = 0, s->in_flight = false;
  if (!s || n >= s->length) return;
  // The rings hold the last window_slots raw keys and state_slots compressor rows, so dropping at
  // most kRollback positions leaves everything position n needs; otherwise start over.
  s->length = s->length - std::max(0, n) <= Ds4CacheShape::kRollback ? std::max(0, n) : 0;
}

void Ds4KvCache::remove(int seq) {
  if (find(seq)) seqs_[seq].reset();
}

void Ds4KvCache::copy_prefix(int src, int dst, int n) {
  if (n > length(src))
    fail("internal: prefix of {} positions exceeds source length {}", n, length(src));
  if (src == dst) return truncate(dst, n);
  remove(dst);
  if (n <= 0) return;
  const Seq& from = *find(src);
  Seq& to = seq_ref(dst);
  reserve(dst, from.length);
  for (size_t il = 0; il < shape_.ratio.size(); ++il) {
    const int r = shape_.ratio[il];
    const Layer& a = from.layers[il];
    Layer& b = to.layers[il];
    std::memcpy(b.window.get(), a.window.get(), kF32 * shape_.window_slots() * shape_.head_dim);
    if (r != 0)
      std::memcpy(b.state.get(), a.state.get(),
                  kF32 * Ds4CacheShape::state_slots(r) * 2 * Ds4CacheShape::state_width(r) *
                      shape_.head_dim);
    if (r == 4)
      std::memcpy(b.index_state.get(), a.index_state.get(),
                  kF32 * Ds4CacheShape::state_slots(r) * 4 * shape_.index_dim);
    const size_t chunk = static_cast<size_t>(r ? kBlock / r : 0) * row_width(static_cast<int>(il));
    for (size_t c = 0; c < b.chunks.size() && c < a.chunks.size(); ++c)
      std::memcpy(b.chunks[c].get(), a.chunks[c].get(), kF32 * chunk);
  }
  to.length = from.length;
  truncate(dst, n);
}

uint64_t Ds4KvCache::allocated_bytes() const {
  uint64_t b = 0;
  for (const auto& s : seqs_) {
    if (!s) continue;
    b += shape_.fixed_bytes();
    for (size_t il = 0; il < s->layers.size(); ++il) {
      const int r = shape_.ratio[il];
      if (r != 0)
        b += s->layers[il].chunks.size() * static_cast<uint64_t>(kBlock / r) *
             row_width(static_cast<int>(il)) * kF32;
    }
  }
  return b;
}

float* Ds4KvCache::window_row(int seq, int il, int pos) {
  return seqs_[seq]->layers[il].window.get() +
         static_cast<size_t>(pos % shape_.window_slots()) * shape_.head_dim;
}

float* Ds4KvCache::state_row(int seq, int il, int pos) {
  const int r = shape_.ratio[il];
  const size_t w = static_cast<size_t>(2) * Ds4CacheShape::state_width(r) * shape_.head_dim;
  return seqs_[seq]->layers[il].state.get() +
         static_cast<size_t>(pos % Ds4CacheShape::state_slots(r)) * w;
}

float* Ds4KvCache::index_state_row(int seq, int il, int pos) {
  return seqs_[seq]->layers[il].index_state.get() +
         static_cast<size_t>(pos % Ds4CacheShape::state_slots(4)) * 4 * shape_.index_dim;
}

float* Ds4KvCache::chunk_row(int seq, int il, int block) {
  const int per_chunk = kBlock / shape_.ratio[il];
  return seqs_[seq]->layers[il].chunks[block / per_chunk].get() +
         static_cast<size_t>(block % per_chunk) * row_width(il);
}

float* Ds4KvCache::pooled_row(int seq, int il, int block) {
  return chunk_row(seq, il, block);
}
float* Ds4KvCache::index_row(int seq, int il, int block) {
  return chunk_row(seq, il, block) + shape_.head_dim;
}

}  // namespace sluice
