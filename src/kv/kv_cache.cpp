// KV cache storage; see kv_cache.h. Within a block, position p's key row sits at p·k_row_bytes
// and its value row after all keys, so attention scans contiguous memory per block. A ring
// stores position p in slot p mod ring_slots.
#include "kv/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/kernels.h"

namespace sluice {

namespace {

// Value rows start at a multiple of this many bytes after the key rows (f32 rows after q8_0 ones).
constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// GGML's Q4_0 layout: per block of 32 a scale d = (the value of largest magnitude) / −8 and codes
// q = round(x/d) + 8 in [0, 15], element j in the low nibble of byte j, element j+16 in its high one.
void quantize_q4_0(const float* x, BlockQ4_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 32) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    auto code = [&](float v) { return static_cast<uint8_t>(std::min(15, static_cast<int>(v * id + 8.5f))); };
    for (int j = 0; j < 16; ++j) out[b].qs[j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
  }
}

// GGML's Q8_0 layout with the scale fitted per block: codes from a few scales around amax/127
// (the larger ones clip the extreme value to ±127/−128), each refitted by least squares,
// d = Σ x·q / Σ q², and the pair with the smallest squared error (d rounded to f16 as stored)
// kept. The codes are read as any q8_0; only the cache's rounding error shrinks.
void quantize_q8_0_fitted(const float* x, BlockQ8_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    out[b].d = 0;
    std::fill(std::begin(out[b].qs), std::end(out[b].qs), int8_t{0});
    if (amax == 0.0f) continue;
    double best = INFINITY;
    for (int k = -10; k <= 10; ++k) {
      const float inv = (127.0f + 0.1f * static_cast<float>(k)) / amax;
      int8_t q[32];
      double xq = 0, qq = 0;
      for (int i = 0; i < 32; ++i) {
        q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -128.0f, 127.0f));
        xq += static_cast<double>(x[i]) * q[i];
        qq += static_cast<double>(q[i]) * q[i];
      }
      const uint16_t dh = fp32_to_fp16(static_cast<float>(xq / qq));
      const double d = fp16_to_fp32(dh);
      double err = 0;
      for (int i = 0; i < 32; ++i) err += (x[i] - d * q[i]) * (x[i] - d * q[i]);
      if (err < best) {
        best = err;
        out[b].d = dh;
        std::copy_n(q, 32, out[b].qs);
      }
    }
  }
}

}  // namespace

GgmlType kv_storage_type(KvType t) {
  switch (t) {
    case KvType::kF32: return GgmlType::F32;
    case KvType::kF16: return GgmlType::F16;
    case KvType::kBF16: return GgmlType::BF16;
    case KvType::kQ8_0: return GgmlType::Q8_0;
    case KvType::kQ4_0: return GgmlType::Q4_0;
  }
  fail("internal: unknown KV type {}", static_cast<int>(t));
}

int kv_padded_dim(KvType t, int dim) {
  const int be = static_cast<int>(type_traits(kv_storage_type(t)).block_elems);
  return (dim + be - 1) / be * be;
}

uint64_t kv_head_bytes(KvType t, int dim) { return row_bytes(kv_storage_type(t), kv_padded_dim(t, dim)); }

void kv_store_head(KvType t, const float* x, int dim, std::byte* dst) {
  switch (t) {
    case KvType::kF32:
      std::memcpy(dst, x, sizeof(float) * dim);
      return;
    case KvType::kF16:
      for (int i = 0; i < dim; ++i) reinterpret_cast<uint16_t*>(dst)[i] = fp32_to_fp16(x[i]);
      return;
    case KvType::kBF16:
      for (int i = 0; i < dim; ++i) reinterpret_cast<uint16_t*>(dst)[i] = fp32_to_bf16(x[i]);
      return;
    case KvType::kQ8_0:
    case KvType::kQ4_0: {
      const int padded = kv_padded_dim(t, dim);
      thread_local std::vector<float> buf;
      buf.assign(padded, 0.0f);
      std::copy_n(x, dim, buf.begin());
      if (t == KvType::kQ8_0) quantize_q8_0_fitted(buf.data(), reinterpret_cast<BlockQ8_0*>(dst), padded / 32);
      else quantize_q4_0(buf.data(), reinterpret_cast<BlockQ4_0*>(dst), padded / 32);
      return;
    }
  }
}

void kv_load_head(KvType t, const std::byte* src, int dim, float* out) {
  if (t == KvType::kF32) {
    std::memcpy(out, src, sizeof(float) * dim);
    return;
  }
  thread_local std::vector<float> buf;
  buf.resize(kv_padded_dim(t, dim));
  dequantize_row(kv_storage_type(t), src, buf.data(), static_cast<int64_t>(buf.size()));
  std::copy_n(buf.begin(), dim, out);
}

uint64_t KvLayout::k_row_bytes(int il) const {
  const KvLayerShape& s = layers[il];
  return s.n_head * kv_head_bytes(config.type_k, s.head_dim_k);
}

uint64_t KvLayout::v_row_bytes(int il) const {
  const KvLayerShape& s = layers[il];
  return s.head_dim_v == 0 ? 0 : s.n_head * kv_head_bytes(config.type_v, s.head_dim_v);
}

int KvLayout::ring_slots(int il) const {
  const int w = layers[il].window;
  if (w <= 0 || config.max_step <= 0) return 0;
  const int64_t slots = static_cast<int64_t>(w) + config.max_step;
  return slots < n_ctx ? static_cast<int>(slots) : 0;
}

uint64_t KvLayout::bytes_per_position() const {
  uint64_t b = 0;
  for (int il = 0; il < static_cast<int>(layers.size()); ++il)
    if (ring_slots(il) == 0) b += k_row_bytes(il) + v_row_bytes(il);
  return b;
}

uint64_t KvLayout::fixed_bytes() const {
  uint64_t b = 0;
  for (int il = 0; il < static_cast<int>(layers.size()); ++il)
    b += static_cast<uint64_t>(ring_slots(il)) * (k_row_bytes(il) + v_row_bytes(il));
  return b;
}

KvCache::KvCache(std::vector<KvLayerShape> layers, int n_ctx, KvCacheConfig config)
    : layout_{std::move(layers), config, n_ctx} {
  if (n_ctx <= 0) fail("context size must be positive, got {}", n_ctx);
  if (config.max_step < 0) fail("internal: negative KV step bound {}", config.max_step);
  for (int l = 0; l < n_layer(); ++l) {
    RowGeometry g;
    g.k_bytes = layout_.k_row_bytes(l);
    g.v_bytes = layout_.v_row_bytes(l);
    g.ring = layout_.ring_slots(l);
    g.v_offset = align_up(static_cast<uint64_t>(g.ring ? g.ring : kBlock) * g.k_bytes);
    geometry_.push_back(g);
  }
}

KvCache::KvCache(int n_ctx) {
  layout_.n_ctx = n_ctx;
  if (n_ctx <= 0) fail("context size must be positive, got {}", n_ctx);
}

KvCache::Seq& KvCache::seq_ref(int seq) {
  if (seq < 0) fail("internal: negative sequence id {}", seq);
  if (static_cast<size_t>(seq) >= seqs_.size()) seqs_.resize(seq + 1);
  if (!seqs_[seq]) {
    seqs_[seq] = std::make_unique<Seq>();
    seqs_[seq]->blocks.resize(layout_.layers.size());
    seqs_[seq]->ring_lo.assign(layout_.layers.size(), 0);
  }
  return *seqs_[seq];
}

const KvCache::Seq* KvCache::find(int seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < seqs_.size() ? seqs_[seq].get() : nullptr;
}

void KvCache::allocate(Seq& s, int n) {
  const size_t n_blocks = (static_cast<size_t>(n) + kBlock - 1) / kBlock;
  auto bytes = [&](int l, uint64_t rows) {
    return align_up(align_up(rows * layout_.k_row_bytes(l)) + rows * layout_.v_row_bytes(l));
  };
  uint64_t step = 0;  // one block of every blocked layer
  int first = -1;     // the first blocked layer (they all grow together)
  for (int l = 0; l < n_layer(); ++l) {
    if (const int ring = layout_.ring_slots(l)) {
      if (s.blocks[l].empty()) {
        s.memory.emplace_back(bytes(l, ring), "KV cache");
        s.blocks[l].push_back(s.memory.back().data());
      }
    } else {
      step += bytes(l, kBlock);
      if (first < 0) first = l;
    }
  }
  if (first < 0) return;
  while (s.blocks[first].size() < n_blocks) {
    s.memory.emplace_back(step, "KV cache");
    std::byte* at = s.memory.back().data();
    for (int l = 0; l < n_layer(); ++l) {
      if (layout_.ring_slots(l)) continue;
      s.blocks[l].push_back(at);
      at += bytes(l, kBlock);
    }
  }
}

void KvCache::reserve(int seq, int n) {
  if (n > n_ctx()) fail("context overflow: {} positions requested, the context holds {}", n, n_ctx());
  Seq& s = seq_ref(seq);
  allocate(s, n);
  for (int l = 0; l < n_layer(); ++l) {
    const int ring = layout_.ring_slots(l);
    if (!ring) continue;
    if (n - s.length > layout_.config.max_step)
      fail("internal: a step of {} positions exceeds the KV ring's bound of {}", n - s.length, layout_.config.max_step);
    // Rows this step writes overwrite positions n − ring and below (also when it fails).
    s.ring_lo[l] = std::max(s.ring_lo[l], n - ring);
  }
}

int KvCache::length(int seq) const {
  const Seq* s = find(seq);
  return s ? s->length : 0;
}

void KvCache::set_length(int seq, int n) {
  reserve(seq, std::max(n, length(seq)));
  seq_ref(seq).length = n;
}

bool KvCache::holds_window(const Seq& s, int n) const {
  for (int l = 0; l < n_layer(); ++l)
    if (layout_.ring_slots(l) && std::max(0, n - layout_.layers[l].window + 1) < s.ring_lo[l]) return false;
  return true;
}

void KvCache::truncate(int seq, int n) {
  Seq& s = seq_ref(seq);
  n = std::clamp(n, 0, s.length);
  if (holds_window(s, n)) {
    s.length = n;
    return;
  }
  s.length = 0;
  std::fill(s.ring_lo.begin(), s.ring_lo.end(), 0);
}

void KvCache::remove(int seq) {
  if (seq >= 0 && static_cast<size_t>(seq) < seqs_.size()) seqs_[seq].reset();
}

void KvCache::copy_prefix(int src, int dst, int n) {
  if (n > length(src)) fail("internal: prefix of {} positions exceeds source length {}", n, length(src));
  const Seq& from = *find(src);
  if (!holds_window(from, n)) {
    truncate(dst, 0);
    return;
  }
  Seq& to = seq_ref(dst);
  allocate(to, n);
  for (int l = 0; l < n_layer(); ++l) {
    const uint64_t kb = layout_.k_row_bytes(l), vb = layout_.v_row_bytes(l);
    to.ring_lo[l] = from.ring_lo[l];
    for (int p = from.ring_lo[l]; p < n; ++p) {
      std::memcpy(row(dst, l, p, false), row(src, l, p, false), kb);
      std::memcpy(row(dst, l, p, true), row(src, l, p, true), vb);
    }
  }
  to.length = n;
}

void KvCache::store(int seq, int layer, int pos, const float* k, const float* v) {
  const KvLayerShape& sh = layout_.layers[layer];
  std::byte* kr = row(seq, layer, pos, false);
  const uint64_t khb = kv_head_bytes(type_k(), sh.head_dim_k);
  for (int h = 0; h < sh.n_head; ++h) kv_store_head(type_k(), k + h * sh.head_dim_k, sh.head_dim_k, kr + h * khb);
  if (sh.head_dim_v == 0) return;
  std::byte* vr = row(seq, layer, pos, true);
  const uint64_t vhb = kv_head_bytes(type_v(), sh.head_dim_v);
  for (int h = 0; h < sh.n_head; ++h) kv_store_head(type_v(), v + h * sh.head_dim_v, sh.head_dim_v, vr + h * vhb);
}

std::byte* KvCache::locate(int seq, int layer, int pos, bool value, int* contiguous) const {
  const RowGeometry& g = geometry_[layer];
  const int slot = g.ring ? pos % g.ring : pos % kBlock;  // kBlock's is a mask, not a division
  if (contiguous) *contiguous = (g.ring ? g.ring : kBlock) - slot;
  std::byte* base = seqs_[seq]->blocks[layer][g.ring ? 0 : pos / kBlock];
  return value ? base + g.v_offset + slot * g.v_bytes : base + slot * g.k_bytes;
}

std::byte* KvCache::row(int seq, int layer, int pos, bool value) const {
  return locate(seq, layer, pos, value, nullptr);
}

void KvCache::rows(int seq, int layer, int pos, int n, bool value, const std::byte** out) const {
  const uint64_t stride = value ? geometry_[layer].v_bytes : geometry_[layer].k_bytes;
  for (int i = 0, m = 0; i < n; i += m) {
    const std::byte* r = locate(seq, layer, pos + i, value, &m);
    m = std::min(m, n - i);
    for (int j = 0; j < m; ++j) out[i + j] = r + j * stride;
  }
}

uint64_t KvCache::allocated_bytes() const {
  uint64_t b = 0;
  for (const auto& s : seqs_)
    if (s)
      for (int l = 0; l < n_layer(); ++l) {
        const uint64_t rows = layout_.ring_slots(l) ? (s->blocks[l].empty() ? 0 : layout_.ring_slots(l))
                                                    : s->blocks[l].size() * kBlock;
        b += rows * (layout_.k_row_bytes(l) + layout_.v_row_bytes(l));
      }
  return b;
}

std::vector<std::byte> KvCache::export_prefix(int seq, int n) const {
  const Seq* s = find(seq);
  if (!s || n > s->length || !holds_window(*s, n)) return {};
  std::vector<std::byte> out;
  for (int l = 0; l < n_layer(); ++l) {
    const int32_t lo = s->ring_lo[l];
    const auto* lb = reinterpret_cast<const std::byte*>(&lo);
    out.insert(out.end(), lb, lb + sizeof lo);
    const uint64_t kb = layout_.k_row_bytes(l), vb = layout_.v_row_bytes(l);
    for (int p = lo; p < n; ++p) {
      const std::byte* k = row(seq, l, p, false);
      out.insert(out.end(), k, k + kb);
      const std::byte* v = row(seq, l, p, true);
      out.insert(out.end(), v, v + vb);
    }
  }
  return out;
}

void KvCache::import_prefix(int seq, int n, const std::vector<std::byte>& data) {
  if (n < 0 || n > n_ctx()) fail("KV state of {} positions does not fit the context of {}", n, n_ctx());
  remove(seq);
  Seq& s = seq_ref(seq);
  allocate(s, n);
  size_t at = 0;
  auto take = [&](void* dst, size_t bytes) {
    if (data.size() - at < bytes) {
      remove(seq);
      fail("KV state is truncated: {} bytes, more expected for {} positions", data.size(), n);
    }
    std::memcpy(dst, data.data() + at, bytes);
    at += bytes;
  };
  for (int l = 0; l < n_layer(); ++l) {
    const uint64_t kb = layout_.k_row_bytes(l), vb = layout_.v_row_bytes(l);
    int32_t lo = 0;
    take(&lo, sizeof lo);
    const int ring = layout_.ring_slots(l);
    if (lo < 0 || lo > n || (ring ? n - lo > ring : lo != 0)) {
      remove(seq);
      fail("KV state of layer {} starts at position {}, which does not fit {} positions", l, lo, n);
    }
    s.ring_lo[l] = lo;
    for (int p = lo; p < n; ++p) {
      take(row(seq, l, p, false), kb);
      take(row(seq, l, p, true), vb);
    }
  }
  if (at != data.size()) {
    remove(seq);
    fail("KV state has {} bytes, {} expected for {} positions", data.size(), at, n);
  }
  s.length = n;
}

std::string KvCache::layout_id() const {
  const KvLayout& l = layout_;
  std::string s = fmt::format("k={} v={} step={} layers={}", kv_type_name(l.config.type_k),
                              kv_type_name(l.config.type_v), l.config.max_step, l.layers.size());
  for (size_t il = 0; il < l.layers.size(); ++il) {
    const KvLayerShape& x = l.layers[il];
    s += fmt::format(" {}x{}/{}w{}r{}", x.n_head, x.head_dim_k, x.head_dim_v, x.window,
                     l.ring_slots(static_cast<int>(il)));
  }
  return s;
}

int KvCache::max_rollback() const {
  // A ring of window + max_step rows keeps the window behind any position at most max_step back.
  int most = n_ctx();
  for (int l = 0; l < n_layer(); ++l)
    if (layout_.ring_slots(l))
      most = std::min(most, layout_.ring_slots(l) - layout_.layers[l].window);
  return most;
}

}  // namespace sluice
