// Rotary position embedding: normal (adjacent pairs, llama) and NeoX (first/second half pairs,
// qwen, gpt-oss), partial rotary (n_rot < head size), linear and YaRN frequency scaling, and
// optional per-dimension frequency factors (rope_freqs, llama 3.1).
#pragma once

#include <cstdint>
#include <vector>

#include "model/hparams.h"

namespace sluice {

// Precomputed rotation for one position: cos/sin for each of n_rot/2 pairs.
class RopeCache {
 public:
  RopeCache(const RopeParams& p, const float* freq_factors);
  // Rotates n_heads heads of head_dim values at `pos`, in place.
  void apply(float* x, int n_heads, int head_dim, int32_t pos) const;

 private:
  void angles(int32_t pos, float* cos_out, float* sin_out) const;
  RopeParams p_;
  std::vector<float> inv_freq_;   // (n_rot/2) base^(-2i/n_rot) / factor_i
  float corr_lo_ = 0, corr_hi_ = 0;
  float mscale_ = 1.0f;
};

}  // namespace sluice
