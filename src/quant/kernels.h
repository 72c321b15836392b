// Raw dot-product and activation-quantization kernels, one set per instruction set. Callers go
// through quant/dispatch.h, which picks a set at runtime; the sets are declared side by side so
// that tests can run a SIMD kernel and its scalar twin on the same input.
//
// vec_dot_T(n, w, x): dot product of n values of one weight row of block type T with one activation
// row already converted to T's vec-dot type (F32 for float weights, BlockQ8_0 for 32-value types,
// BlockQ8K for 256-value types, whose 16-value sums let K-quant kernels apply per-group minimums
// without revisiting the 8-bit values). n is a multiple of the block size; rows need no alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/types.h"

namespace sluice {

using VecDotFn = float (*)(int64_t n, const void* w, const void* x);
using QuantizeRowFn = void (*)(const float* x, void* y, int64_t n);

// Dot of one weight row with n_x (1..kMaxDotRows) activation rows x + k * x_stride bytes, into
// out[k]. Unpacking each weight block once for several tokens is what makes prefill and MoE expert
// batches cheaper per token than decode; types without one run vec_dot per row.
using VecDotMultiFn = void (*)(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                               float* out);
inline constexpr int kMaxDotRows = 4;

// Calls rows(std::integral_constant<int, NX>{}) with NX = n_x (1..kMaxDotRows): multi-row kernels
// are templates on the row count, so that each count is unrolled with its accumulators in
// registers.
template <class Rows>
void with_row_count(int n_x, Rows&& rows) {
  static_assert(kMaxDotRows == 4);
  switch (n_x) {
    case 1:
      return rows(std::integral_constant<int, 1>{});
    case 2:
      return rows(std::integral_constant<int, 2>{});
    case 3:
      return rows(std::integral_constant<int, 3>{});
    default:
      return rows(std::integral_constant<int, 4>{});
  }
}

// Dots of kDotTileRows weight rows (w + r * w_stride bytes) with n_x (1..kMaxDotRows) activation
// rows (x + c * x_stride bytes) into y[c * y_stride + r], each exactly what the set's vec_dot gives
// that pair: short rows' lane sums and calls are then shared by four outputs.
inline constexpr int kDotTileRows = 4;
using DotTileFn = void (*)(int64_t n, const void* w, uint64_t w_stride, const void* x,
                           uint64_t x_stride, int n_x, float* y, uint64_t y_stride);

// Dot products of a tile: n_w weight rows (w + r * w_stride bytes) with n_x activation rows (x + c
// * x_stride bytes, in the weight type's vec-dot format) into y[c * y_stride + r]. Unlike
// VecDotMultiFn, any n_x: the weight rows are unpacked once per call (see quant/gemm.h).
using GemmFn = void (*)(int64_t n, const void* w, uint64_t w_stride, int64_t n_w, const void* x,
                        uint64_t x_stride, int64_t n_x, float* y, uint64_t y_stride);

// Attention tiles (ops/attention.cpp). Key scores: n_keys stored key rows k_rows[k] (f32, f16,
// bf16, or q8_0/q4_0 blocks padded to whole blocks; dim values) dotted with n_q
// (1..kMaxTileQueries) f32 queries q + t * q_stride into scores[t * s_stride + k]. Value sums:
// acc[t * acc_stride + d] += Σ_k w[t * w_stride + k] · v_rows[k][d], keys in order. A row's results
// never depend on the other rows of its tile.
inline constexpr int kMaxTileQueries = 8;  // a GQA group of 8 query heads reads a key row once
using KeyScoresFn = void (*)(int64_t dim, const std::byte* const* k_rows, int n_keys,
                             const float* q, int64_t q_stride, int n_q, float* scores,
                             int64_t s_stride);
using ValueSumsFn = void (*)(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                             int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
// Value sums over stored f16, bf16, q8_0 or q4_0 rows (dim values each), widened to f32 in the
// kernel: the same results as value_sums over the rows converted to f32 beforehand (d · q is exact
// in f32, so a widened block value equals its dequantized one).
using StoredValueSumsFn = void (*)(int64_t dim, const std::byte* const* v_rows, int n_keys,
                                   const float* w, int64_t w_stride, int n_q, float* acc,
                                   int64_t acc_stride);
// Keys widened once for a block of queries (prefill), the AVX-512 set only: a run of key rows is
// widened to f32 and rearranged into tiles of kKeyTile keys (dim × kKeyTile floats each, in the
// kernel's order), so the scores of 16 keys come out of one vector with no lane sums per key and
// query, while every score keeps the summation order of that set's key_scores (16 lane partials
// over dims d ≡ j mod 16, in order, then the same fixed tree): a query scored from the widened
// tiles or from the stored rows gets the same bits, as a prefill chunk and a one-token decode
// must. dim is a multiple of kKeyTile.
inline constexpr int kKeyTile = 16;
// Widens n_keys stored rows into kt; keys past n_keys in the last tile are zero.
using WidenKeysFn = void (*)(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
// Scores of keys [k0, k1) of a widened run (from its first key) against n_q (1..kMaxTileQueries)
// queries into scores[t * s_stride + k - k0].
using TiledKeyScoresFn = void (*)(int64_t dim, const float* kt, int k0, int k1, const float* q,
                                  int64_t q_stride, int n_q, float* scores, int64_t s_stride);
// Softmax numerators of one query's scores in place: s[i] = exp(scale·s[i] − m) with m the
// largest scale·s[i], written to *max; returns Σ s[i]. n ≥ 1.
using ExpScoresFn = float (*)(float* s, int64_t n, float scale, float* max);

// Activation quantizers zero blocks whose largest magnitude is below this (see act_quant.cpp).
inline constexpr float kMinActivationAmax = 1e-30f;

namespace scalar {
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);
void key_scores_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
// Twins of the AVX-512 widened-key kernels (same operations in the same order, std::fma).
void widen_keys_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void tiled_key_scores(int64_t dim, const float* kt, int k0, int k1, const float* q,
                      int64_t q_stride, int n_q, float* scores, int64_t s_stride);
float exp_scores(float* s, int64_t n, float scale, float* max);
void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void key_scores_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);

float vec_dot_f32(int64_t n, const void* w, const void* x);
float vec_dot_f16(int64_t n, const void* w, const void* x);
float vec_dot_bf16(int64_t n, const void* w, const void* x);

float vec_dot_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_1(int64_t n, const void* w, const void* x);
float vec_dot_q5_0(int64_t n, const void* w, const void* x);
float vec_dot_q5_1(int64_t n, const void* w, const void* x);
float vec_dot_iq4_nl(int64_t n, const void* w, const void* x);
float vec_dot_mxfp4(int64_t n, const void* w, const void* x);

float vec_dot_q2_K(int64_t n, const void* w, const void* x);
float vec_dot_q3_K(int64_t n, const void* w, const void* x);
float vec_dot_q4_K(int64_t n, const void* w, const void* x);
float vec_dot_q5_K(int64_t n, const void* w, const void* x);
float vec_dot_q6_K(int64_t n, const void* w, const void* x);
float vec_dot_iq4_xs(int64_t n, const void* w, const void* x);

float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x);
float vec_dot_iq2_xs(int64_t n, const void* w, const void* x);
float vec_dot_iq2_s(int64_t n, const void* w, const void* x);
float vec_dot_iq3_xxs(int64_t n, const void* w, const void* x);
float vec_dot_iq3_s(int64_t n, const void* w, const void* x);
float vec_dot_iq1_s(int64_t n, const void* w, const void* x);
float vec_dot_iq1_m(int64_t n, const void* w, const void* x);
}  // namespace scalar

// Compiled with -mavx2 -mfma -mf16c; only reachable after dispatch has checked the CPU.
namespace avx2 {
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);
void key_scores_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
float exp_scores(float* s, int64_t n, float scale, float* max);
void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void key_scores_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);

float vec_dot_f32(int64_t n, const void* w, const void* x);
float vec_dot_f16(int64_t n, const void* w, const void* x);
float vec_dot_bf16(int64_t n, const void* w, const void* x);

float vec_dot_q8_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_0(int64_t n, const void* w, const void* x);
float vec_dot_mxfp4(int64_t n, const void* w, const void* x);
float vec_dot_iq4_nl(int64_t n, const void* w, const void* x);

float vec_dot_q2_K(int64_t n, const void* w, const void* x);
float vec_dot_q3_K(int64_t n, const void* w, const void* x);
float vec_dot_q4_K(int64_t n, const void* w, const void* x);
float vec_dot_q5_K(int64_t n, const void* w, const void* x);
float vec_dot_q6_K(int64_t n, const void* w, const void* x);
float vec_dot_iq4_xs(int64_t n, const void* w, const void* x);

void vec_dot_q8_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
void vec_dot_q4_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
void vec_dot_iq4_nl_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                          float* out);
void vec_dot_mxfp4_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out);
void vec_dot_q4_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
void vec_dot_q5_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
void vec_dot_q6_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);

// Lattice i-quants (dot_iq_avx2.cpp).
float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x);
float vec_dot_iq2_xs(int64_t n, const void* w, const void* x);
float vec_dot_iq2_s(int64_t n, const void* w, const void* x);
float vec_dot_iq3_xxs(int64_t n, const void* w, const void* x);
float vec_dot_iq3_s(int64_t n, const void* w, const void* x);
float vec_dot_iq1_s(int64_t n, const void* w, const void* x);
float vec_dot_iq1_m(int64_t n, const void* w, const void* x);
void vec_dot_iq2_xxs_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                           float* out);
void vec_dot_iq2_xs_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                          float* out);
void vec_dot_iq2_s_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out);
void vec_dot_iq3_xxs_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                           float* out);
void vec_dot_iq3_s_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out);
void vec_dot_iq1_s_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out);
void vec_dot_iq1_m_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                         float* out);
}  // namespace avx2

struct GemmFormat;

// Compiled with AVX-512 F/BW/VL/VNNI (plus the AVX2 flags); only reachable after dispatch has
// checked the CPU. The set uses the AVX2 dot kernels (AVX-512 ones where listed) and adds the GEMM.
namespace avx512 {
void gemm(const GemmFormat& f, int64_t n, const void* w, uint64_t w_stride, int64_t n_w,
          const void* x, uint64_t x_stride, int64_t n_x, float* y, uint64_t y_stride);
// Whether gemm packs tiles of this format straight from the blocks (Q4_K with its AVX-512
// unpacker) rather than row by row through f.unpack.
bool gemm_packs_directly(const GemmFormat& f, uint64_t w_stride);
// gemm through the weight type's GemmFormat (quant/gemm.h); null for types without one.
GemmFn gemm_kernel(GgmlType weight);
// Decode dot kernels (dot_q8_0_avx512.cpp, dot_iq2_xxs_avx512.cpp, dot_kquants_avx512.cpp); the
// other types keep their AVX2 kernel.
float vec_dot_q8_0(int64_t n, const void* w, const void* x);
void vec_dot_q8_0_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
void vec_dot_q8_0_tile(int64_t n, const void* w, uint64_t w_stride, const void* x,
                       uint64_t x_stride, int n_x, float* y, uint64_t y_stride);
float vec_dot_iq2_xxs(int64_t n, const void* w, const void* x);
void vec_dot_iq2_xxs_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                           float* out);
float vec_dot_q6_K(int64_t n, const void* w, const void* x);
float vec_dot_q2_K(int64_t n, const void* w, const void* x);
void vec_dot_q2_K_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                        float* out);
// f32 and f16 weights with f32 activations (dot_float_avx512.cpp): each row's result equals
// avx2::vec_dot_f32 / vec_dot_f16 exactly.
void vec_dot_f32_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                       float* out);
void vec_dot_f16_multi(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_x,
                       float* out);
// Attention tiles (attn_tiles_avx512.cpp), 16 lanes; value sums and softmax numerators equal the
// AVX2 ones exactly.
float exp_scores(float* s, int64_t n, float scale, float* max);
void key_scores_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                    int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums(int64_t dim, const float* const* v_rows, int n_keys, const float* w,
                int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_f16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                    int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_bf16(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void key_scores_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void key_scores_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, const float* q,
                     int64_t q_stride, int n_q, float* scores, int64_t s_stride);
void value_sums_q8_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
void value_sums_q4_0(int64_t dim, const std::byte* const* v_rows, int n_keys, const float* w,
                     int64_t w_stride, int n_q, float* acc, int64_t acc_stride);
// Widened keys (see WidenKeysFn): scores equal key_scores_* above bit for bit.
void widen_keys_f32(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_f16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_bf16(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_q8_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void widen_keys_q4_0(int64_t dim, const std::byte* const* k_rows, int n_keys, float* kt);
void tiled_key_scores(int64_t dim, const float* kt, int k0, int k1, const float* q,
                      int64_t q_stride, int n_q, float* scores, int64_t s_stride);
}  // namespace avx512

}  // namespace sluice
