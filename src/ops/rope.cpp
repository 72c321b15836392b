// RoPE. Angles follow ggml's rope_yarn: θ_extrap = pos·base^(−2i/n_rot); θ_interp = freq_scale·θ_extrap;
// YaRN blends them with a linear ramp between the correction dims derived from beta_fast/slow and
// scales cos/sin by attn_factor·(1 + 0.1·ln(1/freq_scale)). Angles are computed per call in float
// like ggml does (a cache keyed by position would save little next to the matmuls).
#include "ops/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sluice {

namespace {
float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0f * static_cast<float>(M_PI))) / (2.0f * std::log(base));
}
}  // namespace

RopeCache::RopeCache(const RopeParams& p, const float* freq_factors) : p_(p) {
  if (p.n_rot <= 0 || p.n_rot > 1024 || p.n_rot % 2) fail("rope: {} rotated dims, expected an even number up to 1024", p.n_rot);
  const int half = p.n_rot / 2;
  inv_freq_.resize(half);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float f = 1.0f;
  for (int i = 0; i < half; ++i) {
    inv_freq_[i] = freq_factors ? f / freq_factors[i] : f;
    f *= theta_scale;
  }
  if (p.ext_factor != 0.0f) {
    corr_lo_ = std::max(0.0f, std::floor(corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    corr_hi_ = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  }
  mscale_ = p.attn_factor;
  if (p.ext_factor != 0.0f) mscale_ *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
}

void RopeCache::angles(int32_t pos, float* c, float* s) const {
  const int half = p_.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float theta_extrap = static_cast<float>(pos) * inv_freq_[i];
    const float theta_interp = p_.freq_scale * theta_extrap;
    float theta = theta_interp;
    if (p_.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - corr_lo_) / std::max(0.001f, corr_hi_ - corr_lo_);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p_.ext_factor;
      theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
    }
    c[i] = std::cos(theta) * mscale_;
    s[i] = std::sin(theta) * mscale_;
  }
}

void RopeCache::apply(float* x, int n_heads, int head_dim, int32_t pos) const {
  const int half = p_.n_rot / 2;
  float c[512], s[512];
  angles(pos, c, s);
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      // kNorm rotates (2i, 2i+1); kNeox rotates (i, i + n_rot/2).
      const int a = p_.type == RopeType::kNorm ? 2 * i : i;
      const int b = p_.type == RopeType::kNorm ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c[i] - x1 * s[i];
      v[b] = x0 * s[i] + x1 * c[i];
    }
  }
}

}  // namespace sluice
