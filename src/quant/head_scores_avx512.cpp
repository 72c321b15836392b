// AVX-512 gated multi-head key scores (scalar twin: head_scores.cpp; tests require equal bits).
// The AVX2 kernel (head_scores_avx2.cpp) at 16 lanes: a tile is 4 keys × 64 heads (16
// accumulators of the 32 registers).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/head_scores.h"

namespace sluice::avx512 {

namespace {

constexpr int kLanes = 16;
constexpr int kTileKeys = 4;
constexpr int kTileVecs = 4;  // head vectors per tile

// Widens one stored row into `dim` (block types: whole blocks) floats, the values dequantize_row
// gives.
template <GgmlType T>
void widen(const std::byte* row, int64_t n, float* out) {
  if constexpr (T == GgmlType::F16) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(row + 2 * i))));
    for (; i < n; ++i) out[i] = _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[i]);
  } else if constexpr (T == GgmlType::BF16) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i h =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) out[i] = bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else if constexpr (T == GgmlType::Q8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
    for (int64_t j = 0; j < n / 32; ++j, out += 32) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[j].d));
      for (int k = 0; k < 32; k += 8) {
        const __m256i v = _mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[j].qs + k)));
        _mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
      }
    }
  } else {
    dequantize_row(T, row, out, n);
  }
}

// dots[k·hp + v·8 + lane] = Σ_d q_T[d][head] · key_k[d] as one fused chain, for the NV head vectors
// starting at qt (a row of the transposed queries is hp floats).
template <int NK, int NV>
void tile(const float* qt, int64_t hp, int64_t dim, const float* const* keys, float* dots) {
  __m512 acc[NK][NV];
  #pragma GCC unroll 8
  for (int k = 0; k < NK; ++k)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[k][v] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    __m512 qv[NV];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_ps(qt + d * hp + v * kLanes);
    #pragma GCC unroll 8
    for (int k = 0; k < NK; ++k) {
      const __m512 kb = _mm512_set1_ps(keys[k][d]);
      #pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[k][v] = _mm512_fmadd_ps(qv[v], kb, acc[k][v]);
    }
  }
  #pragma GCC unroll 8
  for (int k = 0; k < NK; ++k)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(dots + k * hp + v * kLanes, acc[k][v]);
}

template <int NK>
void tile_keys(const float* qt, int64_t hp, int64_t dim, const float* const* keys, float* dots) {
  for (int64_t h = 0; h < hp; h += kTileVecs * kLanes) {
    switch (std::min<int64_t>(kTileVecs, (hp - h) / kLanes)) {
      case 4: tile<NK, 4>(qt + h, hp, dim, keys, dots + h); break;
      case 3: tile<NK, 3>(qt + h, hp, dim, keys, dots + h); break;
      case 2: tile<NK, 2>(qt + h, hp, dim, keys, dots + h); break;
      default: tile<NK, 1>(qt + h, hp, dim, keys, dots + h); break;
    }
  }
}

template <GgmlType T>
void head_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                 int n_head, const float* w, float* scores) {
  thread_local std::vector<float> qt, kbuf, dots;
  const int64_t hp = (n_head + kLanes - 1) / kLanes * kLanes;
  qt.assign(hp * dim, 0.0f);
  for (int h = 0; h < n_head; ++h)
    for (int64_t d = 0; d < dim; ++d) qt[d * hp + h] = q[h * dim + d];
  const int64_t be = type_traits(T).block_elems;
  const int64_t padded = (dim + be - 1) / be * be;
  if (T != GgmlType::F32) kbuf.resize(kTileKeys * padded);
  dots.resize(kTileKeys * hp);
  for (int i = 0; i < n_keys; i += kTileKeys) {
    const int nk = std::min(kTileKeys, n_keys - i);
    const float* keys[kTileKeys];
    for (int k = 0; k < nk; ++k) {
      if constexpr (T == GgmlType::F32) {
        keys[k] = reinterpret_cast<const float*>(k_rows[i + k]);
      } else {
        widen<T>(k_rows[i + k], padded, kbuf.data() + k * padded);
        keys[k] = kbuf.data() + k * padded;
      }
    }
    switch (nk) {
      case 4: tile_keys<4>(qt.data(), hp, dim, keys, dots.data()); break;
      case 3: tile_keys<3>(qt.data(), hp, dim, keys, dots.data()); break;
      case 2: tile_keys<2>(qt.data(), hp, dim, keys, dots.data()); break;
      default: tile_keys<1>(qt.data(), hp, dim, keys, dots.data()); break;
    }
    // The tile's keys' sums interleaved (independent chains), each over the heads in order.
    float s[kTileKeys] = {};
    for (int h = 0; h < n_head; ++h)
      for (int k = 0; k < nk; ++k) s[k] = std::fma(w[h], std::max(dots[k * hp + h], 0.0f), s[k]);
    for (int k = 0; k < nk; ++k) scores[i + k] = s[k];
  }
}

}  // namespace

HeadScoresFn head_scores_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return head_scores<GgmlType::F32>;
    case GgmlType::F16: return head_scores<GgmlType::F16>;
    case GgmlType::BF16: return head_scores<GgmlType::BF16>;
    case GgmlType::Q8_0: return head_scores<GgmlType::Q8_0>;
    case GgmlType::Q4_0: return head_scores<GgmlType::Q4_0>;
    default: return nullptr;
  }
}

}  // namespace sluice::avx512
