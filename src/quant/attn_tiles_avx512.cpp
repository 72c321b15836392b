// AVX-512 attention tiles (scalar twins: attn_tiles.cpp; tests compare them): 16 lanes at a time,
// and up to kMaxTileQueries queries per call (a whole GQA group of 8 heads), so a decode step
// widens each stored key and value row once for all the heads that read it. Key scores: stored key
// rows (f32, f16, bf16, q8_0 or q4_0) against the queries, one accumulator per (key, query),
// reduced 16 at a time by one shuffle tree (sum16) whose order is the same for every score; a
// block of queries (prefill) scores keys widened once into tiles with the same partials and tree,
// across vectors instead of lanes (widen_keys, tiled_key_scores), so it gets the same bits. Value
// sums: acc = fma(w, v, acc) per element, keys in order, exactly the AVX2 kernels' operations
// (tails through masked lanes).
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "quant/exp_poly.h"
#include "quant/kernels.h"

// GCC 12's intrinsics pass an undefined vector (`__Y = __Y`) as the unused merge operand of
// shuffles and conversions, which it then reports as uninitialized once inlined (GCC bug 105593,
// fixed in 13). The operand is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::avx512 {

namespace {

__mmask16 tail_mask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1);
}

struct LoadF32 {
  static __m512 load(const std::byte* row, int64_t i) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
  static __m512 load(const std::byte* row, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  }
};
struct LoadF16 {
  static __m512 load(const std::byte* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
  static __m512 load(const std::byte* row, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  }
};
struct LoadBf16 {
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const std::byte* row, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
  static __m512 load(const std::byte* row, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  }
};
// Block-quantized rows (blocks of 32 behind an f16 scale d): 16 values at i (a multiple of 16, so
// within one block) widened and scaled; d · q is exact in f32, the dequantized value itself. Masked
// lanes read as 0.
struct LoadQ8_0 {
  static __m512 scale(const std::byte* b) {
    return _mm512_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(b)));
  }
  static __m512 load(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 34;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + i % 32));
    return _mm512_mul_ps(scale(b), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
  static __m512 load(const std::byte* row, int64_t i, __mmask16 m) {
    const std::byte* b = row + (i / 32) * 34;
    const __m128i q = _mm_maskz_loadu_epi8(m, b + 2 + i % 32);
    return _mm512_mul_ps(scale(b), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};
struct LoadQ4_0 {
  static __m512 widen(const std::byte* b, __m128i bytes, int64_t i, __mmask16 m) {
    __m512i q = _mm512_cvtepu8_epi32(bytes);
    if (i % 32 >= 16) q = _mm512_srli_epi32(q, 4);
    q = _mm512_maskz_sub_epi32(m, _mm512_and_si512(q, _mm512_set1_epi32(0xF)),
                               _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(b))),
                         _mm512_cvtepi32_ps(q));
  }
  static __m512 load(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 18;
    return widen(b, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), i, 0xFFFF);
  }
  static __m512 load(const std::byte* row, int64_t i, __mmask16 m) {
    const std::byte* b = row + (i / 32) * 18;
    return widen(b, _mm_maskz_loadu_epi8(m, b + 2), i, m);
  }
};
// Value rows already in f32 (dequantized, or an f32 cache).
struct LoadRowF32 {
  static __m512 load(const float* row, int64_t i) { return _mm512_loadu_ps(row + i); }
  static __m512 load(const float* row, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, row + i);
  }
};

// Calls f(std::integral_constant<int, NX>{}) with NX = n_q (1..kMaxTileQueries).
template <class F>
void with_query_count(int n_q, F&& f) {
  static_assert(kMaxTileQueries == 8);
  switch (n_q) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// The lane sums of 16 vectors into one: lane 4r + c holds the sum of v[4c + r]. Every vector's
// lanes are added by the same tree (l + l⁺⁸, then + l⁺⁴, then + l⁺², then + l⁺¹) whichever slot it
// occupies and whatever the other vectors hold, so a score never depends on its tile; the tree
// costs 45 instructions for 16 sums, where one full reduction per vector costs about 9.
inline __attribute__((always_inline)) __m512 sum16(const __m512* v) {
  __m512 c[8], d[4], e[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i)
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
#pragma GCC unroll 8
  for (int i = 0; i < 2; ++i)
    e[i] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
}

// KB = 16 / NX keys at a time against NX queries: KB·NX ≤ 16 accumulators (one per key and query,
// 16 dims per FMA), summed by sum16. Each accumulator sees its own key and query only; a last
// block short of KB keys repeats its last key in the spare slots (results not stored), so every
// block runs the same fully unrolled code with its accumulators in registers.
template <class L, int NX>
void key_scores_rows(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, float* scores, int64_t s_stride) {
  constexpr int KB = 16 / NX;
  const int64_t full = dim / 16 * 16;
  const __mmask16 tail = tail_mask(dim - full);
  alignas(64) float sums[16];
  for (int k0 = 0; k0 < n_keys; k0 += KB) {
    const int nk = n_keys - k0 < KB ? n_keys - k0 : KB;
    const std::byte* r[KB];
    for (int kb = 0; kb < KB; ++kb) r[kb] = k_rows[k0 + (kb < nk ? kb : nk - 1)];
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t i = 0; i < full; i += 16) {
      __m512 qv[NX];
#pragma GCC unroll 16
      for (int t = 0; t < NX; ++t) {
        qv[t] = _mm512_loadu_ps(q + t * q_stride + i);
        // Keeps the query in a register for all KB keys: GCC otherwise folds the load into each
        // FMA, one load per FMA, and the load ports, not the FMAs, bound the loop (decode at
        // depth 16k, f16: 2.3-2.6 ms a layer before, 1.9-2.1 after).
        asm("" : "+v"(qv[t]));
      }
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb) {
        const __m512 kv = L::load(r[kb], i);
#pragma GCC unroll 16
        for (int t = 0; t < NX; ++t)
          acc[kb * NX + t] = _mm512_fmadd_ps(kv, qv[t], acc[kb * NX + t]);
      }
    }
    if (full < dim) {
      __m512 qv[NX];
#pragma GCC unroll 16
      for (int t = 0; t < NX; ++t) qv[t] = _mm512_maskz_loadu_ps(tail, q + t * q_stride + full);
#pragma GCC unroll 16
      for (int kb = 0; kb < KB; ++kb) {
        const __m512 kv = L::load(r[kb], full, tail);
#pragma GCC unroll 16
        for (int t = 0; t < NX; ++t)
          acc[kb * NX + t] = _mm512_fmadd_ps(kv, qv[t], acc[kb * NX + t]);
      }
    }
    _mm512_store_ps(sums, sum16(acc));
    for (int kb = 0; kb < nk; ++kb)
#pragma GCC unroll 16
      for (int t = 0; t < NX; ++t) {
        const int src = kb * NX + t;
        scores[t * s_stride + k0 + kb] = sums[4 * (src % 4) + src / 4];
      }
  }
}

template <class L>
void key_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  with_query_count(n_q, [&](auto nx) {
    key_scores_rows<L, decltype(nx)::value>(dim, k_rows, n_keys, q, q_stride, scores, s_stride);
  });
}

// acc[t][d] += Σ_k w[t][k] · v[k][d], keys in order, 32 dims at a time so the accumulators of all
// rows stay in registers across the keys.
template <int NX, class R, class Row>
void value_sum_rows(int64_t dim, const Row* v_rows, int n_keys, const float* w, int64_t w_stride,
                    float* acc, int64_t acc_stride) {
  int64_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    __m512 a0[NX], a1[NX];
#pragma GCC unroll 8
    for (int t = 0; t < NX; ++t) {
      a0[t] = _mm512_loadu_ps(acc + t * acc_stride + d);
      a1[t] = _mm512_loadu_ps(acc + t * acc_stride + d + 16);
    }
    for (int k = 0; k < n_keys; ++k) {
      const __m512 v0 = R::load(v_rows[k], d), v1 = R::load(v_rows[k], d + 16);
#pragma GCC unroll 8
      for (int t = 0; t < NX; ++t) {
        const __m512 wk = _mm512_set1_ps(w[t * w_stride + k]);
        a0[t] = _mm512_fmadd_ps(wk, v0, a0[t]);
        a1[t] = _mm512_fmadd_ps(wk, v1, a1[t]);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NX; ++t) {
      _mm512_storeu_ps(acc + t * acc_stride + d, a0[t]);
      _mm512_storeu_ps(acc + t * acc_stride + d + 16, a1[t]);
    }
  }
  for (; d < dim; d += 16) {
    const __mmask16 m = tail_mask(dim - d < 16 ? dim - d : 16);
    __m512 a[NX];
    for (int t = 0; t < NX; ++t) a[t] = _mm512_maskz_loadu_ps(m, acc + t * acc_stride + d);
    for (int k = 0; k < n_keys; ++k) {
      const __m512 v = R::load(v_rows[k], d, m);
      for (int t = 0; t < NX; ++t)
        a[t] = _mm512_fmadd_ps(_mm512_set1_ps(w[t * w_stride + k]), v, a[t]);
    }
    for (int t = 0; t < NX; ++t) _mm512_mask_storeu_ps(acc + t * acc_stride + d, m, a[t]);
  }
}

template <class R, class Row>
void value_sums(int64_t dim, const Row* v_rows, int n_keys, const float* w, int64_t w_stride,
                int n_q, float* acc, int64_t acc_stride) {
  with_query_count(n_q, [&](auto nx) {
    value_sum_rows<decltype(nx)::value, R>(dim, v_rows, n_keys, w, w_stride, acc, acc_stride);
  });
}

// A widened tile of 16 keys in blocks of 4 keys × 4 dims: the vector at ((c/16)·16 + 4g + kg)·16
// floats holds, in lane 4m + b, dim c + 4g + b of key kg + 4m. Forming it from the rows moves
// whole 128-bit lanes only (a 4 × 4 transpose of lanes), and scoring it leaves each key's score
// in lane (its index), as below.
template <class L>
void widen_keys(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  for (int k0 = 0; k0 < n_keys; k0 += kKeyTile) {
    const int nk = n_keys - k0 < kKeyTile ? n_keys - k0 : kKeyTile;
    float* tile = kt + k0 * dim;
    for (int64_t c = 0; c < dim; c += 16)
#pragma GCC unroll 4
      for (int kg = 0; kg < 4; ++kg) {
        __m512 r[4];
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m)
          r[m] = kg + 4 * m < nk ? L::load(k_rows[k0 + kg + 4 * m], c) : _mm512_setzero_ps();
        // t0: lanes 0, 1 of r0 then of r1; t1: lanes 2, 3 of each; t2, t3 likewise of r2, r3.
        const __m512 t0 = _mm512_shuffle_f32x4(r[0], r[1], 0x44);
        const __m512 t1 = _mm512_shuffle_f32x4(r[0], r[1], 0xEE);
        const __m512 t2 = _mm512_shuffle_f32x4(r[2], r[3], 0x44);
        const __m512 t3 = _mm512_shuffle_f32x4(r[2], r[3], 0xEE);
        float* o = tile + (c + kg) * 16;
        _mm512_storeu_ps(o, _mm512_shuffle_f32x4(t0, t2, 0x88));           // lanes g = 0
        _mm512_storeu_ps(o + 4 * 16, _mm512_shuffle_f32x4(t0, t2, 0xDD));  // g = 1
        _mm512_storeu_ps(o + 8 * 16, _mm512_shuffle_f32x4(t1, t3, 0x88));  // g = 2
        _mm512_storeu_ps(o + 12 * 16, _mm512_shuffle_f32x4(t1, t3, 0xDD));
      }
  }
}

// Accumulates blocks g and g + 2 of every 16 dims into a[t][h][kg] (h = 0, 1): lane 4m + b of
// a[t][h][kg] is the partial of dims ≡ 4(g + 2h) + b (mod 16) of key kg + 4m, in order.
template <int NX>
inline __attribute__((always_inline)) void tile_pass(int64_t dim, const float* tile, const float* q,
                                                     int64_t q_stride, int g,
                                                     __m512 (&a)[NX][2][4]) {
#pragma GCC unroll 2
  for (int t = 0; t < NX; ++t)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int kg = 0; kg < 4; ++kg) a[t][h][kg] = _mm512_setzero_ps();
  for (int64_t c = 0; c < dim; c += 16)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int gg = g + 2 * h;
      __m512 v[4];
#pragma GCC unroll 4
      for (int kg = 0; kg < 4; ++kg) {
        v[kg] = _mm512_loadu_ps(tile + (c + 4 * gg + kg) * 16);
        asm("" : "+v"(v[kg]));  // one load for every query (GCC would fold it into each FMA)
      }
#pragma GCC unroll 2
      for (int t = 0; t < NX; ++t) {
        const __m512 qb = _mm512_broadcast_f32x4(_mm_loadu_ps(q + t * q_stride + c + 4 * gg));
#pragma GCC unroll 4
        for (int kg = 0; kg < 4; ++kg) a[t][h][kg] = _mm512_fmadd_ps(v[kg], qb, a[t][h][kg]);
      }
    }
}

// NX queries' scores of one widened tile, by sum16's tree: blocks g + 2 added to g (l + l⁺⁸),
// then block 1 to block 0 (+ l⁺⁴), then within each 128-bit lane (+ l⁺², + l⁺¹), where the last
// two steps gather key kg + 4m into lane 4m + kg.
template <int NX>
inline __attribute__((always_inline)) void tile_scores(int64_t dim, const float* tile,
                                                       const float* q, int64_t q_stride,
                                                       __m512* s) {
  __m512 a[NX][2][4], x0[NX][4];
  tile_pass<NX>(dim, tile, q, q_stride, 0, a);
#pragma GCC unroll 2
  for (int t = 0; t < NX; ++t)
#pragma GCC unroll 4
    for (int kg = 0; kg < 4; ++kg) x0[t][kg] = _mm512_add_ps(a[t][0][kg], a[t][1][kg]);
  tile_pass<NX>(dim, tile, q, q_stride, 1, a);
#pragma GCC unroll 2
  for (int t = 0; t < NX; ++t) {
    __m512 y[4];
#pragma GCC unroll 4
    for (int kg = 0; kg < 4; ++kg)
      y[kg] = _mm512_add_ps(x0[t][kg], _mm512_add_ps(a[t][0][kg], a[t][1][kg]));
    const __m512 e0 = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x44),
                                    _mm512_shuffle_ps(y[0], y[1], 0xEE)),
                 e1 = _mm512_add_ps(_mm512_shuffle_ps(y[2], y[3], 0x44),
                                    _mm512_shuffle_ps(y[2], y[3], 0xEE));
    s[t] = _mm512_add_ps(_mm512_shuffle_ps(e0, e1, 0x88), _mm512_shuffle_ps(e0, e1, 0xDD));
  }
}

// avx2::exp_nonpositive on 16 lanes: the same operations lane by lane, so every weight is equal.
__m512 exp_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(exp_poly::kExpLow);
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(exp_poly::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(exp_poly::kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~too_small), p, _mm512_castsi512_ps(e));
}

}  // namespace

// 16 scores at a time; the exp-sum is accumulated 8 lanes wide, each vector's low half before its
// high half, which is avx2::exp_scores's order (a padded tail adds exact zeros), so both sets
// return the same weights and sum bit for bit.
float exp_scores(float* s, int64_t n, float scale, float* max) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 vm = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + i), sc);
    _mm512_storeu_ps(s + i, x);
    vm = _mm512_max_ps(vm, x);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), sc);
    _mm512_mask_storeu_ps(s + i, m, x);
    vm = _mm512_mask_max_ps(vm, m, vm, x);
  }
  const float mx = _mm512_reduce_max_ps(vm);
  const __m512 vmx = _mm512_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  auto add = [&acc](__m512 e) {
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  };
  i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + i), vmx));
    _mm512_storeu_ps(s + i, e);
    add(e);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, s + i);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(x, vmx));
    _mm512_mask_storeu_ps(s + i, m, e);
    add(e);
  }
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  *max = mx;
  return _mm_cvtss_f32(r);
}

void key_scores_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<LoadF32>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<LoadF16>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<LoadBf16>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<LoadQ8_0>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void key_scores_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  key_scores<LoadQ4_0>(dim, k_rows, n_keys, q, q_stride, n_q, scores, s_stride);
}
void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  value_sums<LoadRowF32>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  value_sums<LoadF16>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  value_sums<LoadBf16>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  value_sums<LoadQ8_0>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  value_sums<LoadQ4_0>(dim, v_rows, n_keys, w, w_stride, n_q, acc, acc_stride);
}

void widen_keys_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<LoadF32>(dim, k_rows, n_keys, kt);
}
void widen_keys_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<LoadF16>(dim, k_rows, n_keys, kt);
}
void widen_keys_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<LoadBf16>(dim, k_rows, n_keys, kt);
}
void widen_keys_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<LoadQ8_0>(dim, k_rows, n_keys, kt);
}
void widen_keys_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt) {
  widen_keys<LoadQ4_0>(dim, k_rows, n_keys, kt);
}

// Whole tiles are scored and stored through a mask; a first tile that starts before k0 (a token
// whose window starts inside the run) goes through a buffer.
void tiled_key_scores(int64_t dim, const float* kt, int k0, int k1, const float* q,
                      int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  for (int a = k0 / kKeyTile * kKeyTile; a < k1; a += kKeyTile) {
    const int from = a > k0 ? a : k0, to = a + kKeyTile < k1 ? a + kKeyTile : k1;
    const float* tile = kt + static_cast<int64_t>(a) * dim;
    auto put = [&](int t, __m512 v) {
      float* out = scores + t * s_stride + (from - k0);
      if (from == a) {
        _mm512_mask_storeu_ps(out, tail_mask(to - a), v);
      } else {
        alignas(64) float buf[kKeyTile];
        _mm512_store_ps(buf, v);
        for (int k = from; k < to; ++k) out[k - from] = buf[k - a];
      }
    };
    int t = 0;
    for (; t + 2 <= n_q; t += 2) {
      __m512 s[2];
      tile_scores<2>(dim, tile, q + t * q_stride, q_stride, s);
      put(t, s[0]);
      put(t + 1, s[1]);
    }
    if (t < n_q) {
      __m512 s[1];
      tile_scores<1>(dim, tile, q + t * q_stride, q_stride, s);
      put(t, s[0]);
    }
  }
}

}  // namespace sluice::avx512
