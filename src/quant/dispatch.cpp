// Kernel selection: see dispatch.h. The table is a switch rather than data so that a weight type
// without a kernel in one set falls back to the scalar kernel of the same type, not to dequantize.
#include "quant/dispatch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/error.h"
#include "quant/gemm.h"

namespace sluice {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang before 16 (the fuzz build) has no "f16c" for
  // __builtin_cpu_supports.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

Isa select_isa(bool cpu_avx2, const char* no_simd_env) {
  bool forced_scalar =
      no_simd_env && std::strcmp(no_simd_env, "") != 0 && std::strcmp(no_simd_env, "0") != 0;
  return cpu_avx2 && !forced_scalar ? Isa::Avx2 : Isa::Scalar;
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

Isa select_isa(bool cpu_avx2, bool cpu_avx512, const char* no_simd_env, const char* isa_env) {
  Isa cap = Isa::Avx512;
  if (isa_env && *isa_env) {
    if (std::strcmp(isa_env, "scalar") == 0) {
      cap = Isa::Scalar;
    } else if (std::strcmp(isa_env, "avx2") == 0) {
      cap = Isa::Avx2;
    } else if (std::strcmp(isa_env, "avx512") != 0) {
      fail("SLUICE_ISA is '{}'; expected scalar, avx2 or avx512", isa_env);
    }
  }
  const Isa base = select_isa(cpu_avx2, no_simd_env);
  if (base == Isa::Avx2 && cpu_avx512 && cap == Isa::Avx512) return Isa::Avx512;
  return std::min(base, cap);
}

Isa active_isa() {
  static const Isa isa = select_isa(cpu_has_avx2(), cpu_has_avx512(), std::getenv("SLUICE_NO_SIMD"),
                                    std::getenv("SLUICE_ISA"));
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

namespace {

DotKernels scalar_kernels(GgmlType weight) {
  const DotKernels f32{GgmlType::F32, nullptr, nullptr, scalar::vec_dot_f32};
  const DotKernels q8_0{GgmlType::Q8_0, scalar::quantize_row_q8_0, nullptr, scalar::vec_dot_f32};
  const DotKernels q8_K{GgmlType::Q8_K, scalar::quantize_row_q8_K, nullptr, scalar::vec_dot_f32};
  auto with = [](DotKernels k, VecDotFn dot) {
    k.vec_dot = dot;
    return k;
  };
  switch (weight) {
    case GgmlType::F32:
      return with(f32, scalar::vec_dot_f32);
    case GgmlType::F16:
      return with(f32, scalar::vec_dot_f16);
    case GgmlType::BF16:
      return with(f32, scalar::vec_dot_bf16);
    case GgmlType::Q8_0:
      return with(q8_0, scalar::vec_dot_q8_0);
    case GgmlType::Q4_0:
      return with(q8_0, scalar::vec_dot_q4_0);
    case GgmlType::Q4_1:
      return with(q8_0, scalar::vec_dot_q4_1);
    case GgmlType::Q5_0:
      return with(q8_0, scalar::vec_dot_q5_0);
    case GgmlType::Q5_1:
      return with(q8_0, scalar::vec_dot_q5_1);
    case GgmlType::IQ4_NL:
      return with(q8_0, scalar::vec_dot_iq4_nl);
    case GgmlType::MXFP4:
      return with(q8_0, scalar::vec_dot_mxfp4);
    case GgmlType::Q2_K:
      return with(q8_K, scalar::vec_dot_q2_K);
    case GgmlType::Q3_K:
      return with(q8_K, scalar::vec_dot_q3_K);
    case GgmlType::Q4_K:
      return with(q8_K, scalar::vec_dot_q4_K);
    case GgmlType::Q5_K:
      return with(q8_K, scalar::vec_dot_q5_K);
    case GgmlType::Q6_K:
      return with(q8_K, scalar::vec_dot_q6_K);
    case GgmlType::IQ4_XS:
      return with(q8_K, scalar::vec_dot_iq4_xs);
    case GgmlType::IQ2_XXS:
      return with(q8_K, scalar::vec_dot_iq2_xxs);
    case GgmlType::IQ2_XS:
      return with(q8_K, scalar::vec_dot_iq2_xs);
    case GgmlType::IQ2_S:
      return with(q8_K, scalar::vec_dot_iq2_s);
    case GgmlType::IQ3_XXS:
      return with(q8_K, scalar::vec_dot_iq3_xxs);
    case GgmlType::IQ3_S:
      return with(q8_K, scalar::vec_dot_iq3_s);
    case GgmlType::IQ1_S:
      return with(q8_K, scalar::vec_dot_iq1_s);
    case GgmlType::IQ1_M:
      return with(q8_K, scalar::vec_dot_iq1_m);
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
    case GgmlType::F64:
      fail("matmul: weight type {} is not a supported weight format", type_name(weight));
    default:
      return f32;
  }
}

// Overrides the scalar entries that have an AVX2 kernel; everything else keeps its scalar kernel.
DotKernels avx2_kernels(GgmlType weight) {
  DotKernels k = scalar_kernels(weight);
  k.f32_dot = avx2::vec_dot_f32;
  if (k.vec_dot_type == GgmlType::Q8_0) k.quantize = avx2::quantize_row_q8_0;
  if (k.vec_dot_type == GgmlType::Q8_K) k.quantize = avx2::quantize_row_q8_K;
  switch (weight) {
    case GgmlType::F32:
      k.vec_dot = avx2::vec_dot_f32;
      break;
    case GgmlType::F16:
      k.vec_dot = avx2::vec_dot_f16;
      break;
    case GgmlType::BF16:
      k.vec_dot = avx2::vec_dot_bf16;
      break;
    case GgmlType::Q8_0:
      k.vec_dot = avx2::vec_dot_q8_0;
      k.vec_dot_multi = avx2::vec_dot_q8_0_multi;
      break;
    case GgmlType::Q4_0:
      k.vec_dot = avx2::vec_dot_q4_0;
      k.vec_dot_multi = avx2::vec_dot_q4_0_multi;
      break;
    case GgmlType::IQ4_NL:
      k.vec_dot = avx2::vec_dot_iq4_nl;
      k.vec_dot_multi = avx2::vec_dot_iq4_nl_multi;
      break;
    case GgmlType::MXFP4:
      k.vec_dot = avx2::vec_dot_mxfp4;
      k.vec_dot_multi = avx2::vec_dot_mxfp4_multi;
      break;
    case GgmlType::Q2_K:
      k.vec_dot = avx2::vec_dot_q2_K;
      break;
    case GgmlType::Q3_K:
      k.vec_dot = avx2::vec_dot_q3_K;
      break;
    case GgmlType::Q4_K:
      k.vec_dot = avx2::vec_dot_q4_K;
      k.vec_dot_multi = avx2::vec_dot_q4_K_multi;
      break;
    case GgmlType::Q5_K:
      k.vec_dot = avx2::vec_dot_q5_K;
      k.vec_dot_multi = avx2::vec_dot_q5_K_multi;
      break;
    case GgmlType::Q6_K:
      k.vec_dot = avx2::vec_dot_q6_K;
      k.vec_dot_multi = avx2::vec_dot_q6_K_multi;
      break;
    case GgmlType::IQ4_XS:
      k.vec_dot = avx2::vec_dot_iq4_xs;
      break;
    case GgmlType::IQ2_XXS:
      k.vec_dot = avx2::vec_dot_iq2_xxs;
      k.vec_dot_multi = avx2::vec_dot_iq2_xxs_multi;
      break;
    case GgmlType::IQ2_XS:
      k.vec_dot = avx2::vec_dot_iq2_xs;
      k.vec_dot_multi = avx2::vec_dot_iq2_xs_multi;
      break;
    case GgmlType::IQ2_S:
      k.vec_dot = avx2::vec_dot_iq2_s;
      k.vec_dot_multi = avx2::vec_dot_iq2_s_multi;
      break;
    case GgmlType::IQ3_XXS:
      k.vec_dot = avx2::vec_dot_iq3_xxs;
      k.vec_dot_multi = avx2::vec_dot_iq3_xxs_multi;
      break;
    case GgmlType::IQ3_S:
      k.vec_dot = avx2::vec_dot_iq3_s;
      k.vec_dot_multi = avx2::vec_dot_iq3_s_multi;
      break;
    case GgmlType::IQ1_S:
      k.vec_dot = avx2::vec_dot_iq1_s;
      k.vec_dot_multi = avx2::vec_dot_iq1_s_multi;
      break;
    case GgmlType::IQ1_M:
      k.vec_dot = avx2::vec_dot_iq1_m;
      k.vec_dot_multi = avx2::vec_dot_iq1_m_multi;
      break;
    default:
      break;
  }
  // Each AVX2 multi-row kernel and its single-row twin are one template at NX rows and at 1.
  k.multi_rows_exact = k.vec_dot_multi != nullptr;
  return k;
}

// The AVX2 set plus the VNNI GEMM for the types that have a GemmFormat, multi-row f32/f16 dots
// (the router's prefill) equal to the AVX2 single-row ones, and the AVX-512 dot
// kernels that beat their AVX2 twins (Q8_0, IQ2_XXS and Q2_K, the dense, routed gate/up and
// routed down types of 2-bit DeepSeek builds; Q6_K, the usual output head). A type whose dot kernel
// is missing (dequantize fallback, which reads the float activations) gets its activations
// converted to the GEMM's format too, so the GEMM can serve its prefill.
DotKernels avx512_kernels(GgmlType weight) {
  DotKernels k = avx2_kernels(weight);
  k.gemm = avx512::gemm_kernel(weight);
  // Every GemmFormat type but Q2_K and Q3_K has an AVX-512 unpacker; those two, with the portable
  // one, still run 5-7x the AVX2 dot kernels' rate at 64 tokens (bench_matmul TypesMatmul).
  k.min_gemm_tokens = 3;
  if (weight == GgmlType::Q8_0) {
    k.vec_dot = avx512::vec_dot_q8_0;
    k.vec_dot_multi = avx512::vec_dot_q8_0_multi;
    k.vec_dot_tile = avx512::vec_dot_q8_0_tile;
  }
  if (weight == GgmlType::IQ2_XXS) {
    k.vec_dot = avx512::vec_dot_iq2_xxs;
    k.vec_dot_multi = avx512::vec_dot_iq2_xxs_multi;
  }
  if (weight == GgmlType::Q6_K) k.vec_dot = avx512::vec_dot_q6_K;
  if (weight == GgmlType::F32) k.vec_dot_multi = avx512::vec_dot_f32_multi;
  if (weight == GgmlType::F16) k.vec_dot_multi = avx512::vec_dot_f16_multi;
  if (weight == GgmlType::Q2_K) {
    k.vec_dot = avx512::vec_dot_q2_K;
    k.vec_dot_multi = avx512::vec_dot_q2_K_multi;
  }
  // Q8_0, IQ2_XXS and Q2_K pair templates as the AVX2 set does, and the float multi-row dots sum
  // in the AVX2 single-row order; Q6_K's single-row kernel left its AVX2 multi-row twin.
  k.multi_rows_exact = k.vec_dot_multi && weight != GgmlType::Q6_K;
  if (k.gemm && !k.vec_dot && gemm_format(weight)->act_type == GgmlType::Q8_K) {
    k.vec_dot_type = GgmlType::Q8_K;
    k.quantize = avx2::quantize_row_q8_K;
  }
  return k;
}

}  // namespace

DotKernels dot_kernels(GgmlType weight, Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return avx512_kernels(weight);
    case Isa::Avx2:
      return avx2_kernels(weight);
    default:
      return scalar_kernels(weight);
  }
}

AttentionTiles attention_tiles(GgmlType key_storage, Isa isa) {
  const bool simd = isa >= Isa::Avx2, wide = isa >= Isa::Avx512;
  AttentionTiles t;
  t.value_sums = wide ? avx512::value_sums : simd ? avx2::value_sums : scalar::value_sums;
  t.exp_scores = wide ? avx512::exp_scores : simd ? avx2::exp_scores : scalar::exp_scores;
  switch (key_storage) {
    case GgmlType::F32:
      t.key_scores = wide   ? avx512::key_scores_f32
                     : simd ? avx2::key_scores_f32
                            : scalar::key_scores_f32;
      if (wide) t.widen_keys = avx512::widen_keys_f32;
      break;
    case GgmlType::F16:
      t.key_scores = wide   ? avx512::key_scores_f16
                     : simd ? avx2::key_scores_f16
                            : scalar::key_scores_f16;
      if (wide) t.widen_keys = avx512::widen_keys_f16;
      break;
    case GgmlType::BF16:
      t.key_scores = wide   ? avx512::key_scores_bf16
                     : simd ? avx2::key_scores_bf16
                            : scalar::key_scores_bf16;
      if (wide) t.widen_keys = avx512::widen_keys_bf16;
      break;
    case GgmlType::Q8_0:
      t.key_scores = wide   ? avx512::key_scores_q8_0
                     : simd ? avx2::key_scores_q8_0
                            : scalar::key_scores_q8_0;
      if (wide) t.widen_keys = avx512::widen_keys_q8_0;
      break;
    case GgmlType::Q4_0:
      t.key_scores = wide   ? avx512::key_scores_q4_0
                     : simd ? avx2::key_scores_q4_0
                            : scalar::key_scores_q4_0;
      if (wide) t.widen_keys = avx512::widen_keys_q4_0;
      break;
    default:
      break;
  }
  if (t.widen_keys) t.tiled_key_scores = avx512::tiled_key_scores;
  return t;
}

StoredValueSumsFn stored_value_sums(GgmlType value_storage, Isa isa) {
  const bool simd = isa >= Isa::Avx2, wide = isa >= Isa::Avx512;
  switch (value_storage) {
    case GgmlType::F16:
      return wide ? avx512::value_sums_f16 : simd ? avx2::value_sums_f16 : scalar::value_sums_f16;
    case GgmlType::BF16:
      return wide   ? avx512::value_sums_bf16
             : simd ? avx2::value_sums_bf16
                    : scalar::value_sums_bf16;
    case GgmlType::Q8_0:
      return wide   ? avx512::value_sums_q8_0
             : simd ? avx2::value_sums_q8_0
                    : scalar::value_sums_q8_0;
    case GgmlType::Q4_0:
      return wide   ? avx512::value_sums_q4_0
             : simd ? avx2::value_sums_q4_0
                    : scalar::value_sums_q4_0;
    default:
      return nullptr;
  }
}

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
  if (active_isa() >= Isa::Avx2) return avx2::quantize_row_q8_0(x, y, n);
  scalar::quantize_row_q8_0(x, y, n);
}

void quantize_row_q8_K(const float* x, void* y, int64_t n) {
  if (active_isa() >= Isa::Avx2) return avx2::quantize_row_q8_K(x, y, n);
  scalar::quantize_row_q8_K(x, y, n);
}

}  // namespace sluice
