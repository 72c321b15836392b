// Helpers for the dot-kernel and matmul tests: random weight rows of any block type with sane
// scales, random activations, and the double-precision references both tests compare against.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/types.h"
#include "test_util.h"

namespace sluice::test {

inline uint16_t random_half_scale(std::mt19937& rng) {
  std::uniform_real_distribution<float> d(0.002f, 0.02f);
  return fp32_to_fp16(d(rng));
}

inline const gguf::File& quant_vectors() {
  static std::unique_ptr<gguf::File> file = gguf::File::open(testdata("quant-vectors.gguf"));
  return *file;
}

// Types whose block layout the helper knows well enough to randomise every bit except the scales.
inline bool randomisable(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

// One row of n values of type t. Randomisable types get uniformly random quant bits and half
// scales in [0.002, 0.02]; other types (IQ grids, ternary) are assembled from random blocks of
// quant-vectors.gguf, whose scales are known to be sane.
inline std::vector<uint8_t> random_row(GgmlType t, int64_t n, std::mt19937& rng) {
  const TypeTraits& tt = type_traits(t);
  const int64_t nb = n / tt.block_elems;
  std::vector<uint8_t> row(static_cast<size_t>(nb * tt.block_bytes));
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  if (t == GgmlType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = val(rng);
      std::memcpy(row.data() + 4 * i, &v, 4);
    }
    return row;
  }
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(val(rng)) : fp32_to_bf16(val(rng));
      std::memcpy(row.data() + 2 * i, &h, 2);
    }
    return row;
  }
  if (!randomisable(t)) {
    const auto& src = quant_vectors().tensor(std::string(type_name(t)) + ".q");
    const int64_t src_blocks = src.n_elements() / tt.block_elems;
    std::uniform_int_distribution<int64_t> pick(0, src_blocks - 1);
    for (int64_t b = 0; b < nb; ++b)
      std::memcpy(row.data() + b * tt.block_bytes, src.data + pick(rng) * tt.block_bytes,
                  tt.block_bytes);
    return row;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = row.data() + b * tt.block_bytes;
    auto set_half = [&](uint16_t* field) {
      const uint16_t h = random_half_scale(rng);
      std::memcpy(field, &h, 2);
    };
    switch (t) {
      case GgmlType::Q8_0:
        set_half(&reinterpret_cast<BlockQ8_0*>(p)->d);
        break;
      case GgmlType::Q4_0:
        set_half(&reinterpret_cast<BlockQ4_0*>(p)->d);
        break;
      case GgmlType::Q4_1:
        set_half(&reinterpret_cast<BlockQ4_1*>(p)->d);
        set_half(&reinterpret_cast<BlockQ4_1*>(p)->m);
        break;
      case GgmlType::Q5_0:
        set_half(&reinterpret_cast<BlockQ5_0*>(p)->d);
        break;
      case GgmlType::Q5_1:
        set_half(&reinterpret_cast<BlockQ5_1*>(p)->d);
        set_half(&reinterpret_cast<BlockQ5_1*>(p)->m);
        break;
      case GgmlType::IQ4_NL:
        set_half(&reinterpret_cast<BlockIQ4NL*>(p)->d);
        break;
      case GgmlType::MXFP4:
        reinterpret_cast<BlockMXFP4*>(p)->e = static_cast<uint8_t>(118 + byte(rng) % 12);
        break;
      case GgmlType::Q2_K:
        set_half(&reinterpret_cast<BlockQ2K*>(p)->d);
        set_half(&reinterpret_cast<BlockQ2K*>(p)->dmin);
        break;
      case GgmlType::Q3_K:
        set_half(&reinterpret_cast<BlockQ3K*>(p)->d);
        break;
      case GgmlType::Q4_K:
        set_half(&reinterpret_cast<BlockQ4K*>(p)->d);
        set_half(&reinterpret_cast<BlockQ4K*>(p)->dmin);
        break;
      case GgmlType::Q5_K:
        set_half(&reinterpret_cast<BlockQ5K*>(p)->d);
        set_half(&reinterpret_cast<BlockQ5K*>(p)->dmin);
        break;
      case GgmlType::Q6_K:
        set_half(&reinterpret_cast<BlockQ6K*>(p)->d);
        break;
      case GgmlType::IQ4_XS:
        set_half(&reinterpret_cast<BlockIQ4XS*>(p)->d);
        break;
      default:
        break;
    }
  }
  return row;
}

// Activations like a normalised hidden state: mostly small, with a few large outliers per row so
// that per-block activation scales differ.
inline std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> outlier(0, 63);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng) * (outlier(rng) == 0 ? 8.0f : 1.0f);
  return x;
}

inline std::vector<float> dequantized(GgmlType t, const void* row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, row, out.data(), n);
  return out;
}

// Exact dot of two float vectors, and the sum of |products| that float rounding error scales with.
struct RefDot {
  double value = 0;
  double abs_sum = 0;
};
inline RefDot ref_dot(const float* a, const float* b, int64_t n) {
  RefDot r;
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(a[i]) * b[i];
    r.value += p;
    r.abs_sum += std::fabs(p);
  }
  return r;
}

// Error budget of a float kernel that sums nb per-block terms: a few rounding steps per block term
// plus the float accumulation across terms, both relative to sum |w_i * x_i|. K-quant minimums are
// subtracted as a separate term of comparable size, hence the factor 4 for headroom.
inline double float_tolerance(const RefDot& r, int64_t n_terms) {
  return 4.0 * (static_cast<double>(n_terms) + 8.0) * 0x1p-24 * r.abs_sum + 1e-30;
}

}  // namespace sluice::test
