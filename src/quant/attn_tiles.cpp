// Scalar attention tiles: the twins of attn_tiles_avx2.cpp, and the reference the generic build
// runs. Keys: stored key rows (f32, f16, bf16, q8_0, q4_0) against up to kMaxTileQueries f32
// queries; softmax numerators of a score row (std::exp); values: weighted sums of f32 value rows,
// keys in order.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/dequant.h"
#include "quant/kernels.h"

namespace sluice::scalar {

namespace {

float f32_at(const std::byte* row, int64_t i) {
  float f;
  std::memcpy(&f, row + 4 * i, sizeof f);
  return f;
}
float f16_at(const std::byte* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, sizeof h);
  return fp16_to_fp32(h);
}
float bf16_at(const std::byte* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, sizeof h);
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Blocks of 32: an f16 scale d, then 32 int8 (q8_0) or 16 bytes of two 4-bit values offset by 8
// (q4_0: low nibbles are values 0..15, high nibbles 16..31).
float q8_0_at(const std::byte* row, int64_t i) {
  const std::byte* b = row + (i / 32) * 34;
  uint16_t d;
  std::memcpy(&d, b, sizeof d);
  return fp16_to_fp32(d) * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
}
float q4_0_at(const std::byte* row, int64_t i) {
  const std::byte* b = row + (i / 32) * 18;
  uint16_t d;
  std::memcpy(&d, b, sizeof d);
  const auto q = static_cast<uint8_t>(b[2 + i % 16]);
  return fp16_to_fp32(d) * static_cast<float>((i % 32 < 16 ? q & 0xF : q >> 4) - 8);
}

template <float (*At)(const std::byte*, int64_t)>
void key_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  for (int k = 0; k < n_keys; ++k)
    for (int t = 0; t < n_q; ++t) {
      float s = 0.0f;
      for (int64_t i = 0; i < dim; ++i) s += At(k_rows[k], i) * q[t * q_stride + i];
      scores[t * s_stride + k] = s;
    }
}

}  // namespace

void key_scores_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<f32_at>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<f16_at>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<bf16_at>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<q8_0_at>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<q4_0_at>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}

namespace {

// Where a widened tile keeps dim d of its key kk (see attn_tiles_avx512.cpp): blocks of 4 keys
// × 4 dims, lane 4m + b of vector (d/16)·16 + 4g + kg holding dim 16(d/16) + 4g + b of key kg + 4m.
int64_t tile_index(int kk, int64_t d) {
  const int64_t g = d % 16 / 4, kg = kk % 4, m = kk / 4;
  return (d / 16 * 16 + 4 * g + kg) * 16 + 4 * m + d % 4;
}

template <float (*At)(const std::byte*, int64_t)>
void widen_keys(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  const int tiles = (n_keys + kKeyTile - 1) / kKeyTile;
  for (int tile = 0; tile < tiles; ++tile)
    for (int kk = 0; kk < kKeyTile; ++kk) {
      const int k = tile * kKeyTile + kk;
      for (int64_t d = 0; d < dim; ++d)
        kt[tile * dim * kKeyTile + tile_index(kk, d)] = k < n_keys ? At(k_rows[k], d) : 0.0f;
    }
}

}  // namespace

void widen_keys_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<f32_at>(dim, k_rows, n_keys, kt);
}
void widen_keys_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<f16_at>(dim, k_rows, n_keys, kt);
}
void widen_keys_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<bf16_at>(dim, k_rows, n_keys, kt);
}
void widen_keys_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<q8_0_at>(dim, k_rows, n_keys, kt);
}
void widen_keys_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<q4_0_at>(dim, k_rows, n_keys, kt);
}

// The AVX-512 set's order: 16 partials (dims d ≡ j mod 16, in order, fused multiply-adds), then
// pairs j, j + 8; then j, j + 4; j, j + 2; j, j + 1.
void tiled_key_scores(int64_t dim, const float* kt, int k0, int k1, const float* q,
                      int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  for (int k = k0; k < k1; ++k) {
    const float* tile = kt + static_cast<int64_t>(k / kKeyTile) * dim * kKeyTile;
    for (int t = 0; t < n_q; ++t) {
      float p[16];
      for (int j = 0; j < 16; ++j) {
        p[j] = 0.0f;
        for (int64_t c = 0; c < dim; c += 16)
          p[j] = std::fma(tile[tile_index(k % kKeyTile, c + j)], q[t * q_stride + c + j], p[j]);
      }
      for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) p[j] += p[j + w];
      scores[t * s_stride + k - k0] = p[0];
    }
  }
}

void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  for (int t = 0; t < n_q; ++t)
    for (int k = 0; k < n_keys; ++k) {
      const float wk = w[t * w_stride + k];
      for (int64_t d = 0; d < dim; ++d) acc[t * acc_stride + d] += wk * v_rows[k][d];
    }
}

namespace {

template <float (*At)(const std::byte*, int64_t)>
void stored_value_sums(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                       int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  for (int t = 0; t < n_q; ++t)
    for (int k = 0; k < n_keys; ++k) {
      const float wk = w[t * w_stride + k];
      for (int64_t d = 0; d < dim; ++d) acc[t * acc_stride + d] += wk * At(v_rows[k], d);
    }
}

}  // namespace

void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  stored_value_sums<f16_at>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  stored_value_sums<bf16_at>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  stored_value_sums<q8_0_at>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  stored_value_sums<q4_0_at>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}

float exp_scores(float* s, int64_t n, float scale, float* max) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    s[i] *= scale;
    m = std::max(m, s[i]);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m);
    sum += s[i];
  }
  *max = m;
  return sum;
}

}  // namespace sluice::scalar
