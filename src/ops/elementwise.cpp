// Row-wise ops; see elementwise.h. Reductions accumulate in float like the reference engine
// except RMSNorm's sum of squares, kept in double as ggml does, so F32 models match to 1e-6.
#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>

namespace sluice {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void softmax(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void swiglu(const float* gate, const float* up, float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = silu(gate[i]) * up[i];
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace sluice
