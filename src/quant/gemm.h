// Batched GEMM for prefill and expert batches: a tile of weight rows is unpacked once into 8-bit
// integers and then dotted with every activation row of the call, instead of being unpacked again
// for each group of kMaxDotRows tokens as the vec_dot_multi kernels do.
//
// A weight type joins the GEMM by describing itself as a GemmFormat: how to unpack 256 values of
// one row (a "unit": one K-quant super-block, or eight 32-value blocks) into unsigned bytes u_i
// with a float scale s_g and, for types with minimums, a float bias b_g per group g of 16 or 32
// values, such that the weight is  w_i = s_g * (u_i - offset) - b_g.  The kernel then needs only
// int8 dot products of u against the activation's 8-bit values (VNNI vpdpbusd takes exactly this
// unsigned x signed pair); the offset is removed through the activation's group sums and the bias
// is multiplied by them. Any type whose values are small integers times per-group scales fits,
// including the lattice i-quants (IQ2_*, IQ3_*: grid magnitude times sign as u - offset; IQ1_*:
// grid value plus delta, times 8, is an integer).
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace sluice {

// Values per unit: the weight rows of one GEMM are unpacked 256 values at a time.
inline constexpr int kGemmUnit = 256;

// Unpacks unit `unit` of a weight row (row points at the row's first block) into u[0..n_groups *
// group_values) in natural value order, scale[0..n_groups) and, when the format has_bias,
// bias[0..n_groups). n_groups is the full count except in the last unit of a row whose length is
// not a multiple of 256 (possible only for 32-value block types).
using GemmUnpackFn = void (*)(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale,
                              float* bias);

struct GemmFormat {
  GgmlType act_type;  // Q8_K (256-value activation blocks) or Q8_0 (32-value blocks)
  int group_values;   // 16 or 32; for Q8_0 activations 32, one group per activation block
  int offset;         // subtracted from every unpacked byte, 0..128
  bool has_bias;      // whether unpack writes a per-group bias (K-quant minimums)
  GemmUnpackFn unpack;
};

// Unpackers of the types the GEMM covers (gemm_unpack.cpp): portable code shared by every ISA.
namespace gemm_unpack {
void q4_K(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void q5_K(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void q6_K(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void q2_K(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void q3_K(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq4_xs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void q8_0(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void mxfp4(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
// Lattice i-quants: signed grid values with offset 64; IQ1 values times 8 with the delta folded in.
void iq2_xxs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq2_xs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq2_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq3_xxs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq3_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq1_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void iq1_m(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
}  // namespace gemm_unpack

// The format of a weight type, or null when the type has no unpacker.
const GemmFormat* gemm_format(GgmlType weight);

namespace avx512 {
// The unpacker the AVX-512 GEMM uses for a weight type: an AVX-512 twin of the portable one for
// the hot types, the portable one otherwise; null for types without a GemmFormat.
GemmUnpackFn gemm_unpacker(GgmlType weight);
// The lattice i-quant twins (gemm_unpack_iq_avx512.cpp).
void unpack_iq2_xxs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq2_xs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq2_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq3_xxs(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq3_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq1_s(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
void unpack_iq1_m(const void* row, int64_t unit, int n_groups, uint8_t* u, float* scale, float* bias);
}  // namespace avx512

}  // namespace sluice
