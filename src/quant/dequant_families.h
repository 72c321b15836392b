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

// dequant_iq.cpp: lattice i-quants and table-valued 4-bit types.
void iq2_xxs(const BlockIQ2XXS* x, float* y, int64_t nb);
void iq2_xs(const BlockIQ2XS* x, float* y, int64_t nb);
void iq2_s(const BlockIQ2S* x, float* y, int64_t nb);
void iq3_xxs(const BlockIQ3XXS* x, float* y, int64_t nb);
void iq3_s(const BlockIQ3S* x, float* y, int64_t nb);
void iq1_s(const BlockIQ1S* x, float* y, int64_t nb);
void iq1_m(const BlockIQ1M* x, float* y, int64_t nb);
void iq4_nl(const BlockIQ4NL* x, float* y, int64_t nb);
void iq4_xs(const BlockIQ4XS* x, float* y, int64_t nb);
void mxfp4(const BlockMXFP4* x, float* y, int64_t nb);

// dequant_ternary.cpp.
void tq1_0(const BlockTQ1_0* x, float* y, int64_t nb);
void tq2_0(const BlockTQ2_0* x, float* y, int64_t nb);

}  // namespace sluice::dequant_detail
