// Runtime choice of dot-product kernels. Each weight type maps to the activation format its dot
// kernel reads (its "vec-dot type") and to the kernel itself; the AVX2 set is used when the CPU has
// AVX2 and FMA and SLUICE_NO_SIMD is not set, so one binary runs everywhere and tests can force the
// scalar reference path. The AVX-512 set (AVX2 kernels plus the VNNI GEMM and 16-lane attention
// tiles) is used when the CPU also has AVX-512 F/BW/VL/VNNI; SLUICE_ISA=scalar|avx2|avx512 caps the
// choice for comparisons.
#pragma once

#include <cstdint>

#include "quant/kernels.h"
#include "quant/types.h"

namespace sluice {

enum class Isa { Scalar, Avx2, Avx512 };

// Whether this CPU can run the AVX2 set (AVX2, FMA and F16C).
bool cpu_has_avx2();
// The set a process uses given the CPU and the value of SLUICE_NO_SIMD (null when unset). Any
// value other than "" and "0" forces scalar.
Isa select_isa(bool cpu_avx2, const char* no_simd_env);
// Whether this CPU can run the AVX-512 set: the AVX2 set plus AVX-512 F, BW, VL and VNNI.
bool cpu_has_avx512();
// The set given the CPU, SLUICE_NO_SIMD and SLUICE_ISA (null when unset): SLUICE_ISA names the
// highest set to use ("scalar", "avx2" or "avx512"; a CPU without it gets the best it has).
// Throws sluice::Error for any other SLUICE_ISA value.
Isa select_isa(bool cpu_avx2, bool cpu_avx512, const char* no_simd_env, const char* isa_env);
// select_isa for this process, decided on first use and fixed afterwards.
Isa active_isa();
const char* isa_name(Isa isa);

struct DotKernels {
  // Format activations must be in: F32, Q8_0 or Q8_K.
  GgmlType vec_dot_type;
  // Converts one float activation row into vec_dot_type; null for F32 (used as is).
  QuantizeRowFn quantize;
  // Null for types without a dot kernel: callers dequantize the weight row and use f32_dot.
  VecDotFn vec_dot;
  // F32 x F32 dot of the same set, for the dequantize fallback.
  VecDotFn f32_dot;
  // Several activation rows per weight row; null where vec_dot per row is as fast.
  VecDotMultiFn vec_dot_multi = nullptr;
  // vec_dot_multi gives every row exactly vec_dot's result (the same operations in the same
  // order, one template at NX rows), so ExactRows batches may use it.
  bool multi_rows_exact = false;
  // Tiles of kDotTileRows weight rows, every output exactly vec_dot's; null where the set has none.
  DotTileFn vec_dot_tile = nullptr;
  // Tiles of weight rows x any number of activation rows; null where the set has none.
  GemmFn gemm = nullptr;
  // Tokens per matmul part from which the GEMM is used. Unpacking a tile of weight rows costs
  // about the dots of a few tokens: with a SIMD unpacker (Q4_K 2048 x 768, one thread) the GEMM
  // ties vec_dot_multi at 3 tokens and is 1.9x faster at 8; a portable unpacker (the i-quants)
  // costs several times more, so those wait for larger batches.
  int64_t min_gemm_tokens = 0;
};

// Kernels for weights of the given type. Throws sluice::Error for types that hold no real numbers
// (I8..I64) and for F64.
DotKernels dot_kernels(GgmlType weight, Isa isa);
inline DotKernels dot_kernels(GgmlType weight) {
  return dot_kernels(weight, active_isa());
}

// Attention tile kernels of a set (see KeyScoresFn in quant/kernels.h). key_scores reads the KV
// cache's key types (F32, F16, BF16, Q8_0, Q4_0) and is null for any other.
// widen_keys / tiled_key_scores (the AVX-512 set only, else null) score a block of queries from
// keys widened once, with the same bits as key_scores.
struct AttentionTiles {
  KeyScoresFn key_scores = nullptr;
  WidenKeysFn widen_keys = nullptr;
  TiledKeyScoresFn tiled_key_scores = nullptr;
  ValueSumsFn value_sums = nullptr;
  ExpScoresFn exp_scores = nullptr;
};
// The value-sum kernel that reads stored rows of `value_storage` (F16, BF16, Q8_0, Q4_0)
// directly; null for other types (F32 rows are read by value_sums).
StoredValueSumsFn stored_value_sums(GgmlType value_storage, Isa isa);
inline StoredValueSumsFn stored_value_sums(GgmlType value_storage) {
  return stored_value_sums(value_storage, active_isa());
}
AttentionTiles attention_tiles(GgmlType key_storage, Isa isa);
inline AttentionTiles attention_tiles(GgmlType key_storage) {
  return attention_tiles(key_storage, active_isa());
}

// Activation quantizers through the active set.
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);

}  // namespace sluice
