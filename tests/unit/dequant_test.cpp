// Dequantization helpers: half and bfloat16 conversion (exhaustive over all 65536 halves), the
// block structs agreeing with the type table, and the errors for types and lengths we refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/dequant.h"

using namespace sluice;

namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::string error_of(GgmlType t, int64_t n) {
  std::vector<uint8_t> src(4096);
  std::vector<float> dst(1024);
  try {
    dequantize_row(t, src.data(), dst.data(), n);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Fp16, RoundTripsEveryHalf) {
  int nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      ++nans;
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h << " -> " << f;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(bits_of(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);           // below halfway to 65536
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);           // halfway, odd mantissa: up to inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, even stays
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);       // half the smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);       // 1.5 ulp ties to even 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // into normals
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -140)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
}

TEST(Bf16, ConvertsAndRounds) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    EXPECT_EQ(bits_of(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7F800001)))));
}

TEST(Dequant, BlockStructsMatchTypeTable) {
  EXPECT_EQ(type_traits(GgmlType::Q4_0).block_bytes, sizeof(BlockQ4_0));
  EXPECT_EQ(type_traits(GgmlType::Q4_1).block_bytes, sizeof(BlockQ4_1));
  EXPECT_EQ(type_traits(GgmlType::Q5_0).block_bytes, sizeof(BlockQ5_0));
  EXPECT_EQ(type_traits(GgmlType::Q5_1).block_bytes, sizeof(BlockQ5_1));
  EXPECT_EQ(type_traits(GgmlType::Q8_0).block_bytes, sizeof(BlockQ8_0));
  EXPECT_EQ(type_traits(GgmlType::Q8_1).block_bytes, sizeof(BlockQ8_1));
  EXPECT_EQ(type_traits(GgmlType::Q2_K).block_bytes, sizeof(BlockQ2K));
  EXPECT_EQ(type_traits(GgmlType::Q3_K).block_bytes, sizeof(BlockQ3K));
  EXPECT_EQ(type_traits(GgmlType::Q4_K).block_bytes, sizeof(BlockQ4K));
  EXPECT_EQ(type_traits(GgmlType::Q5_K).block_bytes, sizeof(BlockQ5K));
  EXPECT_EQ(type_traits(GgmlType::Q6_K).block_bytes, sizeof(BlockQ6K));
  EXPECT_EQ(type_traits(GgmlType::Q8_K).block_bytes, sizeof(BlockQ8K));
  EXPECT_EQ(type_traits(GgmlType::IQ2_XXS).block_bytes, sizeof(BlockIQ2XXS));
  EXPECT_EQ(type_traits(GgmlType::IQ2_XS).block_bytes, sizeof(BlockIQ2XS));
  EXPECT_EQ(type_traits(GgmlType::IQ2_S).block_bytes, sizeof(BlockIQ2S));
  EXPECT_EQ(type_traits(GgmlType::IQ3_XXS).block_bytes, sizeof(BlockIQ3XXS));
  EXPECT_EQ(type_traits(GgmlType::IQ3_S).block_bytes, sizeof(BlockIQ3S));
  EXPECT_EQ(type_traits(GgmlType::IQ1_S).block_bytes, sizeof(BlockIQ1S));
  EXPECT_EQ(type_traits(GgmlType::IQ1_M).block_bytes, sizeof(BlockIQ1M));
  EXPECT_EQ(type_traits(GgmlType::IQ4_NL).block_bytes, sizeof(BlockIQ4NL));
  EXPECT_EQ(type_traits(GgmlType::IQ4_XS).block_bytes, sizeof(BlockIQ4XS));
  EXPECT_EQ(type_traits(GgmlType::TQ1_0).block_bytes, sizeof(BlockTQ1_0));
  EXPECT_EQ(type_traits(GgmlType::TQ2_0).block_bytes, sizeof(BlockTQ2_0));
  EXPECT_EQ(type_traits(GgmlType::MXFP4).block_bytes, sizeof(BlockMXFP4));
}

TEST(Dequant, KScaleMinUnpacksAllEight) {
  // Distinct 6-bit scales and mins with high bits set, packed by hand per the layout in blocks.h.
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(33 + 3 * j);
    mn[j] = static_cast<uint8_t>(60 - 5 * j);
  }
  uint8_t q[12];
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    k_scale_min(j, q, &s, &m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
}

TEST(Dequant, E8M0HalfScale) {
  EXPECT_EQ(e8m0_to_fp32_half(127), 0.5f);
  EXPECT_EQ(e8m0_to_fp32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_fp32_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_fp32_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_to_fp32_half(254), std::ldexp(1.0f, 126));
}

TEST(Dequant, RejectsTypesWithoutDequantizer) {
  EXPECT_EQ(error_of(static_cast<GgmlType>(5), 32), "dequantize_row: unknown GGML type id 5");
  EXPECT_EQ(error_of(static_cast<GgmlType>(1000), 32), "dequantize_row: unknown GGML type id 1000");
  EXPECT_EQ(error_of(GgmlType::I32, 32),
            "dequantize_row: I32 is an integer tensor type and has no dequantization");
  EXPECT_EQ(error_of(GgmlType::I8, 32),
            "dequantize_row: I8 is an integer tensor type and has no dequantization");
}

TEST(Dequant, RejectsPartialBlocks) {
  EXPECT_EQ(error_of(GgmlType::Q4_K, 100),
            "dequantize_row: 100 values is not a whole number of Q4_K blocks of 256");
  EXPECT_EQ(error_of(GgmlType::Q8_0, -32),
            "dequantize_row: -32 values is not a whole number of Q8_0 blocks of 32");
  EXPECT_EQ(error_of(GgmlType::Q8_0, 0), "");
}

TEST(Dequant, LegacyBlocksByHand) {
  BlockQ4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(GgmlType::Q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j));
  }
  BlockQ5_0 c{};
  c.d = fp32_to_fp16(1.0f);
  c.qh[3] = 0x80;  // bit 31: fifth bit of value 31
  dequantize_row(GgmlType::Q5_0, &c, y, 32);
  EXPECT_EQ(y[31], 0.0f);
  EXPECT_EQ(y[30], -16.0f);
}

// Types without reference vectors in quant-vectors.gguf, checked against their definition.
TEST(Dequant, TypesWithoutVectors) {
  std::vector<BlockQ8K> k(2);
  for (int b = 0; b < 2; ++b) {
    k[b].d = b ? -0.25f : 0.125f;
    for (int j = 0; j < 256; ++j) k[b].qs[j] = static_cast<int8_t>(j - 128);
  }
  std::vector<float> y(512);
  dequantize_row(GgmlType::Q8_K, k.data(), y.data(), 512);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 256; ++j) ASSERT_EQ(y[256 * b + j], k[b].d * static_cast<float>(j - 128));

  BlockQ8_1 q{};
  q.d = fp32_to_fp16(-3.0f);
  q.s = fp32_to_fp16(1000.0f);  // the sum field must not leak into the values
  for (int j = 0; j < 32; ++j) q.qs[j] = static_cast<int8_t>(j - 16);
  dequantize_row(GgmlType::Q8_1, &q, y.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], -3.0f * static_cast<float>(j - 16));

  const float f[3] = {1.5f, -0.0f, 3e38f};
  dequantize_row(GgmlType::F32, f, y.data(), 3);
  EXPECT_EQ(0, std::memcmp(f, y.data(), sizeof f));
  const double g[2] = {0.1, -1e-300};
  dequantize_row(GgmlType::F64, g, y.data(), 2);
  EXPECT_EQ(y[0], 0.1f);
  EXPECT_EQ(bits_of(y[1]), 0x80000000u);
}
