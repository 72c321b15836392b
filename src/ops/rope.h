// Rotary position embedding: normal (adjacent pairs, llama) and NeoX (first/second half pairs,
// qwen, gpt-oss), partial rotary (n_rot < head size), linear and YaRN frequency scaling, and
// optional per-dimension frequency factors (rope_freqs, llama 3.1).
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

enum class RopeType { kNorm, kNeox };          // adjacent pairs (llama) / split halves (NeoX, qwen)
enum class RopeScaling { kNone, kLinear, kYarn };

struct RopeParams {
  RopeType type = RopeType::kNorm;
  int n_rot = 0;                 // rotated dimensions per head (≤ head dim: partial rotary)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;       // 1 / scaling factor
  RopeScaling scaling = RopeScaling::kNone;
  int n_ctx_orig = 0;            // original training context (YaRN)
  float ext_factor = 0.0f;       // YaRN extrapolation mix (1 when YaRN is on)
  float attn_factor = 1.0f;      // magnitude scale applied to cos/sin
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

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
