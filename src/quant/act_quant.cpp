// Scalar activation quantizers: float rows into the 8-bit blocks that integer dot kernels read.
// Rounding is to nearest-even (nearbyint) and the scale arithmetic is written exactly as the AVX2
// twins compute it, so both sets produce identical bytes and tests can compare them for equality.
// Blocks whose largest magnitude is below kMinActivationAmax quantize to zero: their inverse scale
// would overflow to infinity, and such values are far below anything a hidden state carries.
#include <algorithm>
#include <cmath>

#include "quant/dequant.h"
#include "quant/kernels.h"

namespace sluice::scalar {

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(y);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax >= kMinActivationAmax ? amax / 127.0f : 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    for (int i = 0; i < kQK; ++i) out[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  }
}

void quantize_row_q8_K(const float* x, void* y, int64_t n) {
  auto* out = static_cast<BlockQ8K*>(y);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float iscale = amax >= kMinActivationAmax ? 127.0f / amax : 0.0f;
    out[b].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
    for (int i = 0; i < kQKK; ++i)
      out[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * iscale));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out[b].qs[g * 16 + i];
      out[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace sluice::scalar
