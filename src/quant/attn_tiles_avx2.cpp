// AVX2+FMA attention tiles (scalar twins: attn_tiles.cpp; tests compare them). Keys: up to
// kMaxDotRows f32 queries against a run of stored key rows (f32, f16, bf16, q8_0, q4_0), each key
// row loaded once for all queries; values: weighted sums of f32 value rows into up to kMaxDotRows
// accumulators. A query's score is computed by the same instructions whatever the other rows of
// its tile are (missing rows are zero accumulators reduced by the same tree), so a query's
// attention does not depend on how a prefill was cut into chunks or heads into tiles. Softmax
// numerators: a polynomial exp, 8 scores at a time (std::exp per score cost a prefill at 16k
// depth about as much as its dot products).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "quant/exp_poly.h"
#include "quant/kernels.h"

namespace sluice::avx2 {

namespace {

struct LoadF32 {
  static __m256 load(const std::byte* row, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
  static float at(const std::byte* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
  }
};
struct LoadF16 {
  static __m256 load(const std::byte* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
  static float at(const std::byte* row, int64_t i) {
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[i]);
  }
};
struct LoadBf16 {
  static __m256 load(const std::byte* row, int64_t i) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
  static float at(const std::byte* row, int64_t i) {
    const uint32_t b = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16;
    float f;
    __builtin_memcpy(&f, &b, sizeof f);
    return f;
  }
};

// Block-quantized rows (blocks of 32 behind an f16 scale d): 8 values at i (a multiple of 8, so
// within one block) widened and scaled; d · q is exact in f32, the dequantized value itself.
struct LoadQ8_0 {
  static __m256 load(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 34;
    const __m256i q =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % 32)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(b))),
                         _mm256_cvtepi32_ps(q));
  }
  static float at(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 34;
    return _cvtsh_ss(*reinterpret_cast<const uint16_t*>(b)) *
           static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
  }
};
struct LoadQ4_0 {
  static __m256 load(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 18;
    __m256i q =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + i % 16)));
    if (i % 32 >= 16) q = _mm256_srli_epi32(q, 4);
    q = _mm256_sub_epi32(_mm256_and_si256(q, _mm256_set1_epi32(0xF)), _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(*reinterpret_cast<const uint16_t*>(b))),
                         _mm256_cvtepi32_ps(q));
  }
  static float at(const std::byte* row, int64_t i) {
    const std::byte* b = row + (i / 32) * 18;
    const auto q = static_cast<uint8_t>(b[2 + i % 16]);
    return _cvtsh_ss(*reinterpret_cast<const uint16_t*>(b)) *
           static_cast<float>((i % 32 < 16 ? q & 0xF : q >> 4) - 8);
  }
};

// The four rows' horizontal sums: one transposing reduction tree; row r's sum depends only on
// its own lanes.
__m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <class L, int NX>
void key_scores_rows(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, float* scores, int64_t s_stride) {
  const int64_t vec_end = dim / 8 * 8;
  for (int k = 0; k < n_keys; ++k) {
    const std::byte* row = k_rows[k];
    __m256 acc0[kMaxDotRows], acc1[kMaxDotRows];
    for (int t = 0; t < kMaxDotRows; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      const __m256 k0 = L::load(row, i), k1 = L::load(row, i + 8);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        acc0[t] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q + t * q_stride + i), acc0[t]);
        acc1[t] = _mm256_fmadd_ps(k1, _mm256_loadu_ps(q + t * q_stride + i + 8), acc1[t]);
      }
    }
    for (; i < vec_end; i += 8) {
      const __m256 k0 = L::load(row, i);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t)
        acc0[t] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q + t * q_stride + i), acc0[t]);
    }
    alignas(16) float sums[4];
    _mm_store_ps(sums, hsum4(_mm256_add_ps(acc0[0], acc1[0]), _mm256_add_ps(acc0[1], acc1[1]),
                             _mm256_add_ps(acc0[2], acc1[2]), _mm256_add_ps(acc0[3], acc1[3])));
    for (int t = 0; t < NX; ++t) {
      float s = sums[t];
      for (int64_t j = vec_end; j < dim; ++j) s += L::at(row, j) * q[t * q_stride + j];
      scores[t * s_stride + k] = s;
    }
  }
}

// Calls f(t0, nx) for the tile's queries in chunks of at most kMaxDotRows, nx an
// std::integral_constant: 16 ymm registers hold the accumulators of 4 queries, not of
// kMaxTileQueries. A query's results are the same whichever chunk it falls in.
template <class F>
void in_chunks(int n_q, F&& f) {
  for (int t0 = 0; t0 < n_q; t0 += kMaxDotRows)
    with_row_count(n_q - t0 < kMaxDotRows ? n_q - t0 : kMaxDotRows, [&](auto nx) { f(t0, nx); });
}

template <class L>
void key_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    key_scores_rows<L, decltype(nx)::value>(dim, k_rows, n_keys, q + t0 * q_stride, q_stride,
                                            scores + t0 * s_stride, s_stride);
  });
}

// Value rows as f32 arrays (dequantized rows) or stored bytes (L).
struct RowF32 {
  static __m256 load(const float* row, int64_t i) { return _mm256_loadu_ps(row + i); }
  static float at(const float* row, int64_t i) { return row[i]; }
};
template <class L>
struct RowStored {
  static __m256 load(const std::byte* row, int64_t i) { return L::load(row, i); }
  static float at(const std::byte* row, int64_t i) { return L::at(row, i); }
};

template <int NX, class R, class Row>
void value_sum_rows(int64_t dim, const Row* v_rows, int n_keys, const float* w, int64_t w_stride,
                    float* acc, int64_t acc_stride) {
  int64_t d = 0;
  for (; d + 16 <= dim; d += 16) {
    __m256 a0[NX], a1[NX];
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      a0[t] = _mm256_loadu_ps(acc + t * acc_stride + d);
      a1[t] = _mm256_loadu_ps(acc + t * acc_stride + d + 8);
    }
    for (int k = 0; k < n_keys; ++k) {
      const __m256 v0 = R::load(v_rows[k], d), v1 = R::load(v_rows[k], d + 8);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        const __m256 wk = _mm256_broadcast_ss(w + t * w_stride + k);
        a0[t] = _mm256_fmadd_ps(wk, v0, a0[t]);
        a1[t] = _mm256_fmadd_ps(wk, v1, a1[t]);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      _mm256_storeu_ps(acc + t * acc_stride + d, a0[t]);
      _mm256_storeu_ps(acc + t * acc_stride + d + 8, a1[t]);
    }
  }
  for (; d < dim; ++d)
    for (int t = 0; t < NX; ++t) {
      float s = acc[t * acc_stride + d];
      for (int k = 0; k < n_keys; ++k) s = std::fma(w[t * w_stride + k], R::at(v_rows[k], d), s);
      acc[t * acc_stride + d] = s;
    }
}

// exp(x) for x ≤ 0 (quant/exp_poly.h), 2^n by exponent arithmetic. Below −87 the result is 0:
// such a weight is below f32's resolution next to the maximum's weight of 1. exp(0) is exactly 1.
__m256 exp_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(exp_poly::kExpLow);
  const __m256 too_small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(exp_poly::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(exp_poly::kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(too_small, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

float exp_scores(float* s, int64_t n, float scale, float* max) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 vm = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + i), sc);
    _mm256_storeu_ps(s + i, x);
    vm = _mm256_max_ps(vm, x);
  }
  float m = hmax(vm);
  for (int64_t j = i; j < n; ++j) {
    s[j] *= scale;
    m = std::max(m, s[j]);
  }
  const __m256 vmx = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmx));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {  // the tail through the same vector code, padded with −inf (weight 0)
    alignas(32) float tail[8];
    std::fill(tail, tail + 8, -INFINITY);
    std::copy(s + i, s + n, tail);
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), vmx));
    _mm256_store_ps(tail, e);
    std::copy(tail, tail + (n - i), s + i);
    acc = _mm256_add_ps(acc, e);
  }
  *max = m;
  return hsum(acc);
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

// acc[t][d] += Σ_k w[t][k] · v[k][d], keys in order, 16 dims at a time so the accumulators of all
// rows stay in registers across the keys.
void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    value_sum_rows<decltype(nx)::value, RowF32>(dim, v_rows, n_keys, w + t0 * w_stride, w_stride,
                                                acc + t0 * acc_stride, acc_stride);
  });
}

void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    value_sum_rows<decltype(nx)::value, RowStored<LoadF16>>(
        dim, v_rows, n_keys, w + t0 * w_stride, w_stride, acc + t0 * acc_stride, acc_stride);
  });
}
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    value_sum_rows<decltype(nx)::value, RowStored<LoadBf16>>(
        dim, v_rows, n_keys, w + t0 * w_stride, w_stride, acc + t0 * acc_stride, acc_stride);
  });
}
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    value_sum_rows<decltype(nx)::value, RowStored<LoadQ8_0>>(
        dim, v_rows, n_keys, w + t0 * w_stride, w_stride, acc + t0 * acc_stride, acc_stride);
  });
}
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride) {
  in_chunks(n_q, [&](int t0, auto nx) {
    value_sum_rows<decltype(nx)::value, RowStored<LoadQ4_0>>(
        dim, v_rows, n_keys, w + t0 * w_stride, w_stride, acc + t0 * acc_stride, acc_stride);
  });
}

}  // namespace sluice::avx2
