// AVX2+FMA kernels for activation quantization, float weights, 32-value block types and IQ4_XS
// (which shares IQ4_NL's grid lookup). Each has a scalar twin in act_quant.cpp / dot.cpp /
// dot_kquants.cpp; tests compare the two. Per-block integer sums are exact; only the order in
// which float terms are accumulated differs from the scalar kernels.
#include <immintrin.h>

#include <cstddef>
#include <type_traits>

#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "quant/simd_avx2.h"

namespace sluice::avx2 {

using namespace avx2_detail;

namespace {

// Rounds 32 floats times scale to nearest-even int8, in value order.
__m256i quantize_32(const float* x, __m256 scale) {
  __m256i v[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), scale),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v[k] = _mm256_cvtps_epi32(r);
  }
  // The two packs interleave 4-value groups across the 128-bit lanes; the permute restores order.
  const __m256i p =
      _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256i load_grid(const int8_t* table) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
}

}  // namespace

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float amax = abs_max(x, kQK);
    const float d = amax >= kMinActivationAmax ? amax / 127.0f : 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), quantize_32(x, _mm256_set1_ps(id)));
  }
}

void quantize_row_q8_K(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ8K*>(y);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    const float amax = abs_max(x, kQKK);
    const float iscale = amax >= kMinActivationAmax ? 127.0f / amax : 0.0f;
    out[b].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
    const __m256 scale = _mm256_set1_ps(iscale);
    for (int k = 0; k < kQKK / 32; ++k) {
      const __m256i q = quantize_32(x + 32 * k, scale);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * k), q);
      // Sums of 16 signed bytes via sad on the bytes offset by +128, minus 16 * 128.
      const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, bias), _mm256_setzero_si256());
      const __m128i lo = _mm256_castsi256_si128(sad);
      const __m128i hi = _mm256_extracti128_si256(sad, 1);
      out[b].bsums[2 * k] =
          static_cast<int16_t>(_mm_cvtsi128_si32(lo) + _mm_extract_epi32(lo, 2) - 2048);
      out[b].bsums[2 * k + 1] =
          static_cast<int16_t>(_mm_cvtsi128_si32(hi) + _mm_extract_epi32(hi, 2) - 2048);
    }
  }
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  auto load = [&](int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
  };
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_weights(a + i);
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load(i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(b + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += fp16_scalar(a[i]) * b[i];
  return s;
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  auto load = [&](int64_t i) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  };
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load(i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(b + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(a[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    s += f * b[i];
  }
  return s;
}

namespace {

// The 32-value types with Q8_0 activations differ only in how a block's 32 weight bytes and its
// scale are obtained; one template covers them, for one or several activation rows at a time
// (several rows share the unpacking, which is what prefill and expert batches reuse).
enum class Legacy { Q8_0, Q4_0, IQ4_NL, MXFP4 };

template <Legacy K>
using LegacyBlock = std::conditional_t<
    K == Legacy::Q8_0, BlockQ8_0,
    std::conditional_t<K == Legacy::Q4_0, BlockQ4_0,
                       std::conditional_t<K == Legacy::IQ4_NL, BlockIQ4NL, BlockMXFP4>>>;

template <Legacy K>
__m256i legacy_values(const LegacyBlock<K>& blk, __m256i grid) {
  if constexpr (K == Legacy::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
  } else if constexpr (K == Legacy::Q4_0) {
    return _mm256_sub_epi8(unpack_nibbles_128(blk.qs), _mm256_set1_epi8(8));
  } else {
    return _mm256_shuffle_epi8(grid, unpack_nibbles_128(blk.qs));
  }
}

template <Legacy K>
float legacy_scale(const LegacyBlock<K>& blk) {
  if constexpr (K == Legacy::MXFP4) {
    return e8m0_to_fp32_half(blk.e);
  } else {
    return fp16_scalar(blk.d);
  }
}

template <Legacy K, int NX>
void legacy_rows(int64_t n, const void* w, const std::byte* x, uint64_t x_stride, float* out) {
  const auto* a = static_cast<const LegacyBlock<K>*>(w);
  __m256i grid = _mm256_setzero_si256();
  if constexpr (K == Legacy::IQ4_NL) grid = load_grid(iq::kValuesIq4nl.data());
  if constexpr (K == Legacy::MXFP4) grid = load_grid(iq::kValuesMxfp4.data());
  const __m256i ones = _mm256_set1_epi16(1);
  const BlockQ8_0* b[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) {
    b[t] = reinterpret_cast<const BlockQ8_0*>(x + t * x_stride);
    acc[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQK; ++i) {
    prefetch_weights(a + i);
    // maddubs needs an unsigned left operand, so the weight's sign moves onto the activation;
    // |w| <= 128 and |x| <= 127 keep each 16-bit pair sum below saturation. |w| is shared by
    // all rows.
    const __m256i wv = legacy_values<K>(a[i], grid);
    const __m256i wabs = _mm256_sign_epi8(wv, wv);
    const float dw = legacy_scale<K>(a[i]);
#pragma GCC unroll 4
    for (int t = 0; t < NX; ++t) {
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[t][i].qs));
      const __m256i prod =
          _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(qb, wv)), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * fp16_scalar(b[t][i].d)),
                               _mm256_cvtepi32_ps(prod), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NX; ++t) out[t] = hsum(acc[t]);
}

template <Legacy K>
float legacy_dot(int64_t n, const void* w, const void* x) {
  float out;
  legacy_rows<K, 1>(n, w, static_cast<const std::byte*>(x), 0, &out);
  return out;
}

template <Legacy K>
void legacy_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x, float* out) {
  const auto* xb = static_cast<const std::byte*>(x);
  with_row_count(n_x, [&](auto nx) { legacy_rows<K, decltype(nx)::value>(n, w, xb, x_stride, out); });
}

}  // namespace

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  return legacy_dot<Legacy::Q8_0>(n, w, x);
}
float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  return legacy_dot<Legacy::Q4_0>(n, w, x);
}
float vec_dot_iq4_nl(int64_t n, const void* w, const void* x) {
  return legacy_dot<Legacy::IQ4_NL>(n, w, x);
}
float vec_dot_mxfp4(int64_t n, const void* w, const void* x) {
  return legacy_dot<Legacy::MXFP4>(n, w, x);
}

void vec_dot_q8_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  legacy_multi<Legacy::Q8_0>(n, w, x, x_stride, n_x, out);
}
void vec_dot_q4_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out) {
  legacy_multi<Legacy::Q4_0>(n, w, x, x_stride, n_x, out);
}
void vec_dot_iq4_nl_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                          float* out) {
  legacy_multi<Legacy::IQ4_NL>(n, w, x, x_stride, n_x, out);
}
void vec_dot_mxfp4_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out) {
  legacy_multi<Legacy::MXFP4>(n, w, x, x_stride, n_x, out);
}

float vec_dot_iq4_xs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockIQ4XS*>(w);
  const auto* b = static_cast<const BlockQ8K*>(x);
  const __m256i grid = load_grid(iq::kValuesIq4nl.data());
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     (((a[i].scales_h >> (2 * ib)) & 3) << 4);
      const __m256i wv = _mm256_shuffle_epi8(grid, unpack_nibbles_128(a[i].qs + 16 * ib));
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * ib));
      // Grid values and activations both fit in [-127, 127], so the pair sums cannot saturate;
      // the sub-block scale is applied in the widening madd.
      const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(q8, wv));
      sumi = _mm256_add_epi32(
          sumi, _mm256_madd_epi16(prod, _mm256_set1_epi16(static_cast<int16_t>(ls - 32))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16_scalar(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi),
                          acc);
  }
  return hsum(acc);
}

}  // namespace sluice::avx2
