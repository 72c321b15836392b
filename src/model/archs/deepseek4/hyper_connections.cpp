// Hyper-connection mixing; see hyper_connections.h.
#include "model/archs/deepseek4/hyper_connections.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace sluice {

namespace {
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
}  // namespace

void hc_weights(const HcConfig& c, const float* m, const float* base, const float* scale,
                float* pre, float* post, float* comb) {
  const int S = c.n_streams;
  for (int s = 0; s < S; ++s) pre[s] = sigmoid(scale[0] * m[s] + base[s]) + c.eps;
  if (!post) return;
  for (int s = 0; s < S; ++s) post[s] = 2.0f * sigmoid(scale[1] * m[S + s] + base[S + s]);
  for (int i = 0; i < S; ++i) {
    float* row = comb + i * S;
    for (int j = 0; j < S; ++j) row[j] = scale[2] * m[2 * S + i * S + j] + base[2 * S + i * S + j];
    softmax(row, S);
    for (int j = 0; j < S; ++j) row[j] += c.eps;
  }
  auto columns = [&] {
    for (int j = 0; j < S; ++j) {
      float sum = 0.0f;
      for (int i = 0; i < S; ++i) sum += comb[i * S + j];
      for (int i = 0; i < S; ++i) comb[i * S + j] /= sum + c.eps;
    }
  };
  columns();
  for (int it = 1; it < c.n_iter; ++it) {
    for (int i = 0; i < S; ++i) {
      float sum = 0.0f;
      for (int j = 0; j < S; ++j) sum += comb[i * S + j];
      for (int j = 0; j < S; ++j) comb[i * S + j] /= sum + c.eps;
    }
    columns();
  }
}

void hc_pre(ThreadPool& pool, const HcConfig& c, const HcWeights& w, const float* x, int64_t n_tok,
            int64_t d, float* a, float* post, float* comb) {
  const int S = c.n_streams;
  const int64_t width = S * d;
  const int64_t n_mix = w.fn.ne[1];
  if (w.fn.ne[0] != width || (n_mix != S && n_mix != (2 + S) * S))
    fail("hyper-connection mixer has dims [{}, {}], expected [{}, {} or {}]", w.fn.ne[0], n_mix,
         width, S, (2 + S) * S);
  std::vector<float> z(n_tok * width), m(n_tok * n_mix);
  for (int64_t t = 0; t < n_tok; ++t)
    rmsnorm(x + t * width, nullptr, z.data() + t * width, width, c.rms_eps);
  matmul(pool, w.fn.mat(), z.data(), n_tok, m.data());
  const bool full = n_mix != S;
  for (int64_t t = 0; t < n_tok; ++t) {
    float pre[64];
    hc_weights(c, m.data() + t * n_mix, w.base.f32(), w.scale.f32(), pre,
               full ? post + t * S : nullptr, full ? comb + t * S * S : nullptr);
    const float* xt = x + t * width;
    float* at = a + t * d;
    for (int64_t i = 0; i < d; ++i) at[i] = pre[0] * xt[i];
    for (int s = 1; s < S; ++s) axpy(pre[s], xt + s * d, at, d);
  }
}

void hc_post(const HcConfig& c, const float* f, const float* post, const float* comb, int64_t n_tok,
             int64_t d, float* x) {
  const int S = c.n_streams;
  const int64_t width = S * d;
  std::vector<float> out(width);
  for (int64_t t = 0; t < n_tok; ++t) {
    float* xt = x + t * width;
    const float* ct = comb + t * S * S;
    for (int j = 0; j < S; ++j) {
      float* o = out.data() + j * d;
      const float pj = post[t * S + j];
      const float* ft = f + t * d;
      for (int64_t i = 0; i < d; ++i) o[i] = pj * ft[i];
      for (int i = 0; i < S; ++i) axpy(ct[i * S + j], xt + i * d, o, d);
    }
    std::copy(out.begin(), out.end(), xt);
  }
}

}  // namespace sluice
