// Random blocks per GGML type. Every quantized block starts as random bytes (random quants, grid
// indices and signs are all valid codes); a per-type `fix` then overwrites the scale fields:
//  - the super-block scale d (fp16, or E8M0 for MXFP4, float for Q8_K) is set from the target,
//  - sub-block scales are drawn from a narrow positive range (or ± for types whose codes are
//    asymmetric: Q3_K, Q6_K), so no sub-block is accidentally zero or huge,
//  - mins are tied to the scales (m = sc, dmin = mid-code·d) so values are centred on zero,
//  - single-scale types with asymmetric codes (Q4_0, Q5_0, IQ4_NL) get a random sign of d,
//  - derived fields (Q8_1 s, Q8_K bsums) are computed, and TQ2_0's unused code 3 is cleared,
// so that the dequantized values are linear in d; unit_rms (d = 1) then gives d for any RMS.
#include "gen/random_fill.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/blocks.h"
#include "quant/dequant.h"

namespace sluice::gen {

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = seed = mix_seed(seed, 0x9E3779B97F4A7C15ull);
}

float Rng::normal() {
  const uint64_t r = next();
  const float sum = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
  // Four uniforms on [0, 1) have mean 2 and variance 1/3.
  return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

namespace {

using Fix = void (*)(uint8_t* b, float d);

void put_f16(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Single-scale types whose codes are not symmetric: a random sign of d centres them over blocks.
float random_sign(const uint8_t* raw_d, float d) { return (raw_d[0] & 1) ? -d : d; }

void fix_q4_0(uint8_t* b, float d) { put_f16(b, random_sign(b, d)); }
void fix_q5_0(uint8_t* b, float d) { put_f16(b, random_sign(b, d)); }
void fix_q4_1(uint8_t* b, float d) { put_f16(b, d); put_f16(b + 2, -7.5f * d); }
void fix_q5_1(uint8_t* b, float d) { put_f16(b, d); put_f16(b + 2, -15.5f * d); }
void fix_q8_0(uint8_t* b, float d) { put_f16(b, d); }

void fix_q8_1(uint8_t* b, float d) {
  put_f16(b, d);
  int sum = 0;
  for (int i = 0; i < kQK; ++i) sum += static_cast<int8_t>(b[4 + i]);
  put_f16(b + 2, d * static_cast<float>(sum));
}

void fix_q2_k(uint8_t* b, float d) {
  for (int i = 0; i < 16; ++i) {
    const uint8_t sc = 8 | (b[i] & 7);  // scale and min equal: values d·sc·(q − 1.5)
    b[i] = static_cast<uint8_t>(sc | (sc << 4));
  }
  put_f16(b + offsetof(BlockQ2K, d), d);
  put_f16(b + offsetof(BlockQ2K, dmin), 1.5f * d);
}

void fix_q3_k(uint8_t* b, float d) {
  uint8_t* scales = b + offsetof(BlockQ3K, scales);
  // Magnitudes 16..31 from the first 8 random bytes' nibbles, signs from the next two bytes.
  uint8_t stored[16];
  const unsigned signs = scales[8] | (scales[9] << 8);
  for (int i = 0; i < 16; ++i) {
    const int mag = 16 + ((scales[i / 2] >> (4 * (i % 2))) & 15);
    stored[i] = static_cast<uint8_t>(32 + (((signs >> i) & 1) ? -mag : mag));
  }
  uint8_t packed[12] = {};
  for (int i = 0; i < 16; ++i) {
    packed[i % 8] |= static_cast<uint8_t>((stored[i] & 15) << (i < 8 ? 0 : 4));
    packed[8 + i % 4] |= static_cast<uint8_t>((stored[i] >> 4) << (2 * (i / 4)));
  }
  std::memcpy(scales, packed, 12);
  put_f16(b + offsetof(BlockQ3K, d), d);
}

// Q4_K / Q5_K: eight 6-bit scales 32..63 with mins equal to them, so with dmin = mid·d every
// value is d·sc·(q − mid).
void pack_k_scales(uint8_t* q) {
  uint8_t sc[8];
  for (int j = 0; j < 8; ++j) sc[j] = 32 | (q[j] & 31);
  for (int j = 0; j < 4; ++j) {
    const uint8_t hi = sc[j + 4];
    q[j] = static_cast<uint8_t>(sc[j] | ((hi >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(sc[j] | ((hi >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((hi & 15) | ((hi & 15) << 4));
  }
}

void fix_q4_k(uint8_t* b, float d) {
  pack_k_scales(b + offsetof(BlockQ4K, scales));
  put_f16(b, d);
  put_f16(b + 2, 7.5f * d);
}

void fix_q5_k(uint8_t* b, float d) {
  pack_k_scales(b + offsetof(BlockQ5K, scales));
  put_f16(b, d);
  put_f16(b + 2, 15.5f * d);
}

void fix_q6_k(uint8_t* b, float d) {
  uint8_t* scales = b + offsetof(BlockQ6K, scales);
  for (int i = 0; i < 16; ++i) {
    const int mag = 16 + (scales[i] & 15);
    scales[i] = static_cast<uint8_t>(static_cast<int8_t>((scales[i] & 16) ? -mag : mag));
  }
  put_f16(b + offsetof(BlockQ6K, d), d);
}

void fix_q8_k(uint8_t* b, float d) {
  std::memcpy(b, &d, 4);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + offsetof(BlockQ8K, qs));
  for (int i = 0; i < 16; ++i) {
    int16_t sum = 0;
    for (int j = 0; j < 16; ++j) sum = static_cast<int16_t>(sum + qs[16 * i + j]);
    std::memcpy(b + offsetof(BlockQ8K, bsums) + 2 * i, &sum, 2);
  }
}

// IQ types: grid indices, signs and sub-scales are all valid as random bits; only d is set.
void fix_d_at_0(uint8_t* b, float d) { put_f16(b, d); }
void fix_iq4_nl(uint8_t* b, float d) { put_f16(b, random_sign(b, d)); }

void fix_iq1_m(uint8_t* b, float d) {
  // d's 16 bits live in the top nibbles of the four uint16 scale words.
  uint16_t sc[4];
  std::memcpy(sc, b + offsetof(BlockIQ1M, scales), sizeof sc);
  const uint16_t h = fp32_to_fp16(d);
  for (int i = 0; i < 4; ++i) sc[i] = static_cast<uint16_t>((sc[i] & 0x0FFF) | (((h >> (4 * i)) & 15) << 12));
  std::memcpy(b + offsetof(BlockIQ1M, scales), sc, sizeof sc);
}

void fix_tq1_0(uint8_t* b, float d) { put_f16(b + offsetof(BlockTQ1_0, d), d); }

void fix_tq2_0(uint8_t* b, float d) {
  // Code 3 (value +2) is not ternary: clear its high bit, making it code 1 (value 0).
  for (int i = 0; i < 64; ++i) {
    const uint8_t both = (b[i] >> 1) & b[i] & 0x55;
    b[i] = static_cast<uint8_t>(b[i] & ~(both << 1));
  }
  put_f16(b + offsetof(BlockTQ2_0, d), d);
}

void fix_mxfp4(uint8_t* b, float d) {
  // E8M0 holds powers of two only: the nearest one in log scale (within √2 of the target).
  const long e = 127 + std::lround(std::log2(d));
  b[0] = static_cast<uint8_t>(std::clamp<long>(e, 1, 254));
}

Fix fix_for(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return fix_q4_0;
    case GgmlType::Q4_1: return fix_q4_1;
    case GgmlType::Q5_0: return fix_q5_0;
    case GgmlType::Q5_1: return fix_q5_1;
    case GgmlType::Q8_0: return fix_q8_0;
    case GgmlType::Q8_1: return fix_q8_1;
    case GgmlType::Q2_K: return fix_q2_k;
    case GgmlType::Q3_K: return fix_q3_k;
    case GgmlType::Q4_K: return fix_q4_k;
    case GgmlType::Q5_K: return fix_q5_k;
    case GgmlType::Q6_K: return fix_q6_k;
    case GgmlType::Q8_K: return fix_q8_k;
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ4_XS:
      return fix_d_at_0;
    case GgmlType::IQ4_NL: return fix_iq4_nl;
    case GgmlType::IQ1_M: return fix_iq1_m;
    case GgmlType::TQ1_0: return fix_tq1_0;
    case GgmlType::TQ2_0: return fix_tq2_0;
    case GgmlType::MXFP4: return fix_mxfp4;
    default: return nullptr;
  }
}

bool is_float(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F64;
}

void random_bytes(Rng& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, n - i);
  }
}

void draw_floats(GgmlType t, Rng& rng, float sigma, uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = sigma * rng.normal();
    switch (t) {
      case GgmlType::F32: std::memcpy(p + 4 * i, &v, 4); break;
      case GgmlType::F16: { const uint16_t h = fp32_to_fp16(v); std::memcpy(p + 2 * i, &h, 2); break; }
      case GgmlType::BF16: { const uint16_t h = fp32_to_bf16(v); std::memcpy(p + 2 * i, &h, 2); break; }
      default: { const double x = v; std::memcpy(p + 8 * i, &x, 8); break; }
    }
  }
}

void draw_blocks(Fix fix, uint32_t block_bytes, Rng& rng, float d, uint8_t* p, size_t n_blocks) {
  random_bytes(rng, p, n_blocks * block_bytes);
  for (size_t i = 0; i < n_blocks; ++i) fix(p + i * block_bytes, d);
}

double calibrate(GgmlType t) {
  const TypeTraits& tt = type_traits(t);
  const size_t n_blocks = std::max<size_t>(16, 65536 / tt.block_elems);
  std::vector<uint64_t> raw((n_blocks * tt.block_bytes + 7) / 8);  // 8-byte aligned blocks
  Rng rng(0x5EED);
  draw_blocks(fix_for(t), tt.block_bytes, rng, 1.0f, reinterpret_cast<uint8_t*>(raw.data()), n_blocks);
  std::vector<float> y(n_blocks * tt.block_elems);
  dequantize_row(t, raw.data(), y.data(), static_cast<int64_t>(y.size()));
  double ss = 0;
  for (float v : y) ss += static_cast<double>(v) * v;
  return std::sqrt(ss / static_cast<double>(y.size()));
}

constexpr size_t kChunkBytes = 1u << 20;

}  // namespace

std::string undrawable_reason(GgmlType type) {
  if (is_float(type) || fix_for(type)) return {};
  return fmt::format("{} is an integer tensor type; gen-model draws float and quantized weight types only",
                     type_name(type));
}

double unit_rms(GgmlType type) {
  if (is_float(type)) return 1.0;
  if (!fix_for(type)) fail("gen-model cannot draw {}: {}", type_name(type), undrawable_reason(type));
  static const std::array<double, 64> table = [] {
    std::array<double, 64> r{};
    for (uint32_t id = 0; id < r.size(); ++id)
      if (auto tt = find_type(id); tt && fix_for(tt->type)) r[id] = calibrate(tt->type);
    return r;
  }();
  return table[static_cast<uint32_t>(type)];
}

void fill_random(GgmlType type, double rms, uint64_t seed, std::byte* dst, size_t bytes, ThreadPool* pool) {
  const TypeTraits& tt = type_traits(type);
  if (bytes % tt.block_bytes) fail("{} bytes are not whole {} blocks", bytes, tt.name);
  const Fix fix = fix_for(type);
  if (!fix && !is_float(type)) fail("gen-model cannot draw {}", undrawable_reason(type));
  const float d = static_cast<float>(rms / unit_rms(type));
  const size_t n_blocks = bytes / tt.block_bytes;
  const size_t chunk_blocks = std::max<size_t>(1, kChunkBytes / tt.block_bytes);
  const int64_t n_chunks = static_cast<int64_t>((n_blocks + chunk_blocks - 1) / chunk_blocks);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Rng rng(mix_seed(seed, static_cast<uint64_t>(c)));
      const size_t first = static_cast<size_t>(c) * chunk_blocks;
      const size_t n = std::min(chunk_blocks, n_blocks - first);
      uint8_t* p = reinterpret_cast<uint8_t*>(dst) + first * tt.block_bytes;
      if (fix) draw_blocks(fix, tt.block_bytes, rng, d, p, n);
      else draw_floats(type, rng, d, p, n);
    }
  };
  if (pool && n_chunks > 1) pool->parallel_for(n_chunks, run);
  else run(0, n_chunks);
}

}  // namespace sluice::gen
