// AVX-512 attention tiles (scalar twins: attn_tiles.cpp; tests compare them): the AVX2 kernels'
// work 16 lanes at a time, which halves the instructions of the key dots and value sums that
// bound a prefill at depth. Key scores: up to kMaxDotRows f32 queries against a run of stored key
// rows (f32, f16 or bf16), each key row loaded once for all queries, a head's sum reduced by the
// same instructions whatever the other rows of its tile are. Value sums: acc = fma(w, v, acc) per
// element, keys in order, exactly the AVX2 kernels' operations (tails through masked lanes).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "quant/kernels.h"

namespace sluice::avx512 {

namespace {

__mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

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
// Value rows already in f32 (dequantized, or an f32 cache).
struct LoadRowF32 {
  static __m512 load(const float* row, int64_t i) { return _mm512_loadu_ps(row + i); }
  static __m512 load(const float* row, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, row + i);
  }
};

template <class L, int NX>
void key_scores_rows(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, float* scores, int64_t s_stride) {
  for (int k = 0; k < n_keys; ++k) {
    const std::byte* row = k_rows[k];
    __m512 acc0[NX], acc1[NX];
    for (int t = 0; t < NX; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= dim; i += 32) {
      const __m512 k0 = L::load(row, i), k1 = L::load(row, i + 16);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        acc0[t] = _mm512_fmadd_ps(k0, _mm512_loadu_ps(q + t * q_stride + i), acc0[t]);
        acc1[t] = _mm512_fmadd_ps(k1, _mm512_loadu_ps(q + t * q_stride + i + 16), acc1[t]);
      }
    }
    for (; i < dim; i += 16) {
      const __mmask16 m = tail_mask(dim - i < 16 ? dim - i : 16);
      const __m512 k0 = L::load(row, i, m);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t)
        acc0[t] = _mm512_fmadd_ps(k0, _mm512_maskz_loadu_ps(m, q + t * q_stride + i), acc0[t]);
    }
    for (int t = 0; t < NX; ++t)
      scores[t * s_stride + k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
  }
}

template <class L>
void key_scores(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                int64_t q_stride, int n_q, float* scores, int64_t s_stride) {
  with_row_count(n_q, [&](auto nx) {
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
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      a0[t] = _mm512_loadu_ps(acc + t * acc_stride + d);
      a1[t] = _mm512_loadu_ps(acc + t * acc_stride + d + 16);
    }
    for (int k = 0; k < n_keys; ++k) {
      const __m512 v0 = R::load(v_rows[k], d), v1 = R::load(v_rows[k], d + 16);
#pragma GCC unroll 4
      for (int t = 0; t < NX; ++t) {
        const __m512 wk = _mm512_set1_ps(w[t * w_stride + k]);
        a0[t] = _mm512_fmadd_ps(wk, v0, a0[t]);
        a1[t] = _mm512_fmadd_ps(wk, v1, a1[t]);
      }
    }
#pragma GCC unroll 4
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
  with_row_count(n_q, [&](auto nx) {
    value_sum_rows<decltype(nx)::value, R>(dim, v_rows, n_keys, w, w_stride, acc, acc_stride);
  });
}

}  // namespace

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

}  // namespace sluice::avx512
