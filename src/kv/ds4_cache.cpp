// DeepSeek V4 cache storage; see ds4_cache.h. Pooled rows of a ratio-r layer live in chunks of
// kBlock/r rows so memory follows the positions held, like the plain cache's blocks.
#include "kv/ds4_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sluice {

KvType ds4_row_type(const KvCacheConfig& config) {
  if (config.type_v != KvType::kF32 && config.type_v != config.type_k)
    fail(
        "deepseek4 caches keys that are also the values, stored as --cache-type-k ({}); "
        "--cache-type-v {} would need a second copy: leave it unset or give the same type",
        kv_type_name(config.type_k), kv_type_name(config.type_v));
  return config.type_k;
}

namespace {
constexpr uint64_t kF32 = sizeof(float);
}

uint64_t Ds4CacheShape::bytes_per_position() const {
  // Summed per chunk of kBlock positions, then divided once: exact for ratios 4 and 128.
  uint64_t per_block = 0;
  for (int r : ratio)
    if (r > 0)
      per_block +=
          static_cast<uint64_t>(KvCache::kBlock / r) * (key_bytes() + (r == 4 ? index_bytes() : 0));
  return per_block / KvCache::kBlock;
}

uint64_t Ds4CacheShape::fixed_bytes() const {
  uint64_t bytes = 0;
  for (int r : ratio) {
    if (r == kAbsent) continue;
    bytes += static_cast<uint64_t>(window_slots()) * key_bytes();
    if (r != 0) bytes += state_floats(r) * kF32;
    if (r == 4) bytes += index_state_floats() * kF32;
  }
  return bytes;
}

Ds4KvCache::Ds4KvCache(Ds4CacheShape shape, int n_ctx) : KvCache(n_ctx), shape_(std::move(shape)) {
  for (int r : shape_.ratio)
    if (r != Ds4CacheShape::kAbsent && r != 0 && r != 4 && r != 128)
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
      if (r == Ds4CacheShape::kAbsent) continue;
      L.window.reset(new std::byte[shape_.window_slots() * shape_.key_bytes()]());
      if (r != 0) L.state.reset(new float[shape_.state_floats(r)]());
      if (r == 4) L.index_state.reset(new float[shape_.index_state_floats()]());
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
    if (r <= 0) continue;
    auto& ch = s.layers[il].chunks;
    while (ch.size() < n_chunks)
      ch.emplace_back(new std::byte[(kBlock / r) * chunk_row_bytes(static_cast<int>(il))]);
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
  std::vector<std::byte*> dst_spans;
  for_each_span(to, from.length, [&](std::byte* p, uint64_t) { dst_spans.push_back(p); });
  size_t i = 0;
  for_each_span(from, from.length,
                [&](const std::byte* p, uint64_t bytes) { std::memcpy(dst_spans[i++], p, bytes); });
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
      if (r > 0)
        b += s->layers[il].chunks.size() * static_cast<uint64_t>(kBlock / r) *
             chunk_row_bytes(static_cast<int>(il));
    }
  }
  return b;
}

std::byte* Ds4KvCache::window_row(int seq, int il, int pos) {
  return seqs_[seq]->layers[il].window.get() + (pos % shape_.window_slots()) * shape_.key_bytes();
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

std::byte* Ds4KvCache::chunk_row(int seq, int il, int block) {
  const int per_chunk = kBlock / shape_.ratio[il];
  return seqs_[seq]->layers[il].chunks[block / per_chunk].get() +
         (block % per_chunk) * chunk_row_bytes(il);
}

std::byte* Ds4KvCache::pooled_row(int seq, int il, int block) {
  return chunk_row(seq, il, block);
}

std::byte* Ds4KvCache::index_row(int seq, int il, int block) {
  return chunk_row(seq, il, block) + shape_.key_bytes();
}

template <class Fn>
void Ds4KvCache::for_each_span(const Seq& s, int n, Fn&& fn) const {
  for (size_t il = 0; il < s.layers.size(); ++il) {
    const int r = shape_.ratio[il];
    const Layer& L = s.layers[il];
    if (r == Ds4CacheShape::kAbsent) continue;
    fn(L.window.get(), shape_.window_slots() * shape_.key_bytes());
    if (r == 0) continue;
    fn(reinterpret_cast<std::byte*>(L.state.get()), shape_.state_floats(r) * kF32);
    if (r == 4)
      fn(reinterpret_cast<std::byte*>(L.index_state.get()), shape_.index_state_floats() * kF32);
    const int per_chunk = kBlock / r, blocks = (n + r - 1) / r;
    for (int b = 0; b < blocks; b += per_chunk)
      fn(L.chunks[b / per_chunk].get(),
         std::min(per_chunk, blocks - b) * chunk_row_bytes(static_cast<int>(il)));
  }
}

std::vector<std::byte> Ds4KvCache::export_prefix(int seq, int n) const {
  const Seq* s = find(seq);
  if (!s || s->in_flight || n <= 0 || n > s->length || s->length - n > Ds4CacheShape::kRollback)
    return {};
  std::vector<std::byte> out;
  for_each_span(*s, n,
                [&](const std::byte* p, uint64_t bytes) { out.insert(out.end(), p, p + bytes); });
  return out;
}

void Ds4KvCache::import_prefix(int seq, int n, const std::vector<std::byte>& data) {
  if (n <= 0 || n > n_ctx())
    fail("KV state of {} positions does not fit the context of {}", n, n_ctx());
  remove(seq);
  reserve(seq, n);
  Seq& s = seq_ref(seq);
  uint64_t need = 0;
  for_each_span(s, n, [&](const std::byte*, uint64_t bytes) { need += bytes; });
  if (data.size() != need) {
    remove(seq);
    fail("KV state has {} bytes, a deepseek4 cache of {} positions needs {}", data.size(), n, need);
  }
  size_t at = 0;
  for_each_span(s, n, [&](std::byte* p, uint64_t bytes) {
    std::memcpy(p, data.data() + at, bytes);
    at += bytes;
  });
  s.length = n;
  s.in_flight = false;
}

std::string Ds4KvCache::layout_id() const {
  std::string ratios;
  for (int r : shape_.ratio) ratios += fmt::format("{}{}", ratios.empty() ? "" : ",", r);
  return fmt::format("deepseek4 {} D={} Id={} W={} rollback={} ratios={}",
                     kv_type_name(shape_.type), shape_.head_dim, shape_.index_dim, shape_.window,
                     Ds4CacheShape::kRollback, ratios);
}

}  // namespace sluice
