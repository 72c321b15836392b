// Row-wise ops of the forward pass: RMSNorm, softmax, SwiGLU, activations. Plain loops in fp32
// (float accumulators where the reference engine uses them) — these are a small share of the
// time next to matmuls, so one implementation serves as both reference and fast path.
#pragma once

#include <cstdint>

namespace sluice {

// y = x / sqrt(mean(x²) + eps) * w   (w may be null: no scale). In-place allowed (y == x).
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
// In-place softmax over n values; returns nothing, the sum is 1 (max-subtracted for stability).
void softmax(float* x, int64_t n);
float silu(float x);
// h[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* h, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace sluice
