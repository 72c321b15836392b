// Scalar reference dequantization: the ground truth every SIMD kernel is tested against.
// Layouts are the GGML block structs; see each family's .cpp for the bit layout in words.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace sluice {

// Converts n values (a multiple of the type's block size) starting at src into dst. Every float
// and block type is supported (F32, F16, BF16, F64 and all quantized types in types.h); results
// equal GGML's own dequantization bit for bit. src needs only the alignment of the type's block
// struct in blocks.h. Throws sluice::Error for integer tensor types (I8..I64), ids unknown to
// types.h, and n that is negative or not a whole number of blocks.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// IEEE half <-> float and bfloat16 -> float, exact.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace sluice
