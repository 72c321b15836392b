// Scalar reference dequantization: the ground truth every SIMD kernel is tested against.
// Layouts are the GGML block structs; see each family's .cpp for the bit layout in words.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace sluice {

// Converts n values (a multiple of the type's block size) starting at src into dst.
// Throws sluice::Error for a type without a dequantizer (I8..I64 are integer tensors).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// IEEE half <-> float and bfloat16 -> float, exact.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace sluice
