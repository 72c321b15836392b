// Hyper-connections (DeepSeek V4): the residual is S parallel streams per token instead of one
// vector. Before a sub-layer a learned mixer reads all streams (RMS over the S·d values, no
// weight) and yields S "pre" weights that collapse the streams into the sub-layer input, S "post"
// weights that spread its output back, and an S×S stream-mixing matrix made doubly stochastic by
// Sinkhorn iterations. Activations are row-major (n_tok, S·d).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "tensor/tensor.h"

namespace sluice {

struct HcWeights {
  Tensor fn;     // (S·d, (2+S)·S) mixer, or (S·d, S) for the head (pre weights only)
  Tensor base;   // F32 ((2+S)·S) or (S) offsets: [pre ∣ post ∣ comb]
  Tensor scale;  // F32 (3) or (1) scales for pre, post, comb
};

struct HcConfig {
  int n_streams = 4;  // S
  int n_iter = 20;    // Sinkhorn iterations (the first normalisation included)
  float eps = 1e-6f;  // hc eps: added after the softmax, to pre, and in every denominator
  float rms_eps = 1e-6f;
};

// From the S + S + S·S mixer outputs m of one token: pre = σ(scale₀·m + base) + eps, post = 2σ(·),
// comb[i·S + j] (source i, destination j) = softmax over j of scale₂·m + base, + eps, then
// alternately column- and row-normalised (columns first) for n_iter column passes in total.
void hc_weights(const HcConfig& c, const float* m, const float* base, const float* scale,
                float* pre, float* post, float* comb);

// a (n_tok, d) = Σ_s pre_s·X_s; post (n_tok, S) and comb (n_tok, S·S) for hc_post. With a head
// mixer (fn of S outputs) only a is produced and post/comb may be null.
void hc_pre(ThreadPool& pool, const HcConfig& c, const HcWeights& w, const float* x, int64_t n_tok,
            int64_t d, float* a, float* post, float* comb);

// X'_j = post_j·f + Σ_i comb[i][j]·X_i for every token, in place on x (n_tok, S·d).
void hc_post(const HcConfig& c, const float* f, const float* post, const float* comb, int64_t n_tok,
             int64_t d, float* x);

}  // namespace sluice
