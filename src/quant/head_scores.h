// Gated multi-head key scores: score(k) = Σ_h w[h]·max(0, q_h·k) for stored key rows, read in
// their stored type (f32, f16, bf16, q8_0, q4_0) — the scoring a sparse-attention selector runs
// over every cached key each token, so the keys are widened a few rows at a time in L1 instead of
// being converted to a float copy of the whole cache first.
//
// Every kernel computes the same numbers bit for bit: a widened key value is exactly what
// dequantize_row gives, each dot q_h·k is one fused multiply-add chain over the dims in order
// (SIMD lanes hold heads, not dims, so no lane reduction reorders it), and the gated sum runs over
// the heads in order with fused multiply-adds. So a key's score depends on neither the ISA nor the
// other keys of a call, and the scalar twin is the reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dispatch.h"
#include "quant/types.h"

namespace sluice {

// q: (n_head, dim) queries; w: (n_head) head weights; k_rows[i]: a stored row of `dim` values
// (block types: padded to whole blocks, dim a multiple of 32). scores[i] for i < n_keys.
using HeadScoresFn = void (*)(int64_t dim, const std::byte* const* k_rows, int n_keys,
                              const float* q, int n_head, const float* w, float* scores);

// The kernel of a set for keys stored as `key_storage` (F32, F16, BF16, Q8_0, Q4_0); throws
// sluice::Error for other types.
HeadScoresFn gated_head_scores(GgmlType key_storage, Isa isa);
inline HeadScoresFn gated_head_scores(GgmlType key_storage) {
  return gated_head_scores(key_storage, active_isa());
}

// Each set's kernel for a stored type; null for types it does not read.
namespace scalar {
HeadScoresFn head_scores_kernel(GgmlType key_storage);
}
namespace avx2 {
HeadScoresFn head_scores_kernel(GgmlType key_storage);
}
namespace avx512 {
HeadScoresFn head_scores_kernel(GgmlType key_storage);
}

}  // namespace sluice
