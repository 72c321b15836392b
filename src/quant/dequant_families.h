// Internal to src/quant: one dequantizer per block type, grouped by family file, called by the
// dispatch in dequant.cpp after it has checked n. Each takes the number of whole blocks, so the
// family code never re-derives block counts.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace sluice::dequant_detail {

// dequant.cpp: legacy 32-value blocks.
void q4_0(const BlockQ4_0* x, float* y, int64_t nb);
void q4_1(const BlockQ4_1* x, float* y, int64_t nb);
void q5_0(const BlockQ5_0* x, float* y, int64_t nb);
void q5_1(const BlockQ5_1* x, float* y, int64_t nb);
void q8_0(const BlockQ8_0* x, float* y, int64_t nb);
void q8_1(const BlockQ8_1* x, float* y, int64_t nb);

// dequant_kquants.cpp: 256-value super-blocks.
void q2_k(const BlockQ2K* x, float* y, int64_t nb);
void q3_k(const BlockQ3K* x, float* y, int64_t nb);
void q4_k(const BlockQ4K* x, float* y, int64_t nb);
void q5_k(const BlockQ5K* x, float* y, int64_t nb);
void q6_k(const BlockQ6K* x, float* y, int64_t nb);
void q8_k(const BlockQ8K* x, float* y, int64_t nb);

}  // namespace sluice::dequant_detail
