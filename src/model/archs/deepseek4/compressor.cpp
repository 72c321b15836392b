// Tail RoPE, compressor pooling and indexer selection; see compressor.h.
#include "model/archs/deepseek4/compressor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "quant/head_scores.h"
#include "quant/types.h"

namespace sluice {

namespace {
// ggml's YaRN correction dim: the pair index whose wavelength spans n_ctx_orig / beta turns.
float corr_dim(int n_rot, int n_ctx_orig, float beta, float base) {
  return n_rot *
         std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
         (2.0f * std::log(base));
}
}  // namespace

TailRope::TailRope(const TailRopeParams& p) : p_(p) {
  if (p.n_rot <= 0 || p.n_rot > 1024 || p.n_rot % 2)
    fail("rope: {} rotated dims, expected an even number up to 1024", p.n_rot);
  if (p.yarn && (p.factor <= 0.0f || p.n_ctx_orig <= 0))
    fail("rope: YaRN needs a positive factor and original context (got {} and {})", p.factor,
         p.n_ctx_orig);
  theta_scale_ = std::pow(p.base, -2.0f / static_cast<float>(p.n_rot));
  if (p.yarn) {
    lo_ = std::max(0.0f, std::floor(corr_dim(p.n_rot, p.n_ctx_orig, 32.0f, p.base)));
    hi_ = std::min(static_cast<float>(p.n_rot - 1),
                   std::ceil(corr_dim(p.n_rot, p.n_ctx_orig, 1.0f, p.base)));
  }
}

void TailRope::angles(int32_t pos, float* c, float* s) const {
  const float freq_scale = p_.yarn ? 1.0f / p_.factor : 1.0f;
  float theta_extrap = static_cast<float>(pos);
  for (int i = 0; i < p_.n_rot / 2; ++i) {
    float theta = theta_extrap;
    if (p_.yarn) {
      const float y = (static_cast<float>(i) - lo_) / std::max(0.001f, hi_ - lo_);
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
      const float theta_interp = freq_scale * theta_extrap;
      theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
    }
    c[i] = std::cos(theta);
    s[i] = std::sin(theta);
    theta_extrap *= theta_scale_;
  }
}

void TailRope::rotate(float* x, int n_vec, int dim, int32_t pos) const {
  const int half = p_.n_rot / 2;
  float c[512], s[512];
  angles(pos, c, s);
  for (int v = 0; v < n_vec; ++v) {
    float* r = x + static_cast<int64_t>(v) * dim + (dim - p_.n_rot);
    for (int i = 0; i < half; ++i) {
      const float x0 = r[2 * i], x1 = r[2 * i + 1];
      r[2 * i] = x0 * c[i] - x1 * s[i];
      r[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
  }
}

void compress_pool(int w, int cw, const float* const* prev, int n_prev, const float* const* cur,
                   int n_cur, int cur_off, float* out) {
  for (int i = 0; i < w; ++i) {
    float mx = -INFINITY;
    for (int k = 0; k < n_prev; ++k) mx = std::max(mx, prev[k][cw + i]);
    for (int k = 0; k < n_cur; ++k) mx = std::max(mx, cur[k][cw + cur_off + i]);
    float sum = 0.0f, acc = 0.0f;
    for (int k = 0; k < n_prev; ++k) {
      const float e = std::exp(prev[k][cw + i] - mx);
      sum += e;
      acc += e * prev[k][i];
    }
    for (int k = 0; k < n_cur; ++k) {
      const float e = std::exp(cur[k][cw + cur_off + i] - mx);
      sum += e;
      acc += e * cur[k][cur_off + i];
    }
    out[i] = acc / sum;
  }
}

void indexer_scores(GgmlType key_type, const float* q, const float* wgt, int n_head, int dim,
                    const std::byte* const* keys, int begin, int end, float* scores) {
  if (end > begin)
    gated_head_scores(key_type)(dim, keys + begin, end - begin, q, n_head, wgt, scores + begin);
}

void select_top(const float* scores, int n, int top_k, std::vector<int32_t>& sel) {
  sel.resize(n);
  std::iota(sel.begin(), sel.end(), 0);
  if (n <= top_k) return;
  std::nth_element(sel.begin(), sel.begin() + top_k, sel.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  sel.resize(top_k);
  std::sort(sel.begin(), sel.end());
}

}  // namespace sluice
