// The pieces of DeepSeek V4 attention with their own math, kept free of the cache and the model
// so they can be tested alone: the tail RoPE (interleaved pairs on the LAST n_rot dims, angles in
// float32 the way ggml computes them, optional YaRN), the compressor's per-channel softmax pooling
// of token rows into one KV row, and the lightning indexer's top-k choice of pooled rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/types.h"

namespace sluice {

struct TailRopeParams {
  int n_rot = 0;  // R: rotated dims at the end of each vector
  float base = 10000.0f;
  bool yarn = false;  // compressed layers: YaRN with beta_fast 32, beta_slow 1, no magnitude factor
  float factor = 1.0f;  // YaRN factor (freq_scale = 1/factor)
  int n_ctx_orig = 0;   // YaRN original context
};

class TailRope {
 public:
  explicit TailRope(const TailRopeParams& p);
  // cos/sin of the n_rot/2 pair angles at pos: θ₀ = pos, θᵢ₊₁ = θᵢ·base^(−2/n_rot) in float, YaRN
  // blend θ·(γᵢ + (1 − γᵢ)/factor) with γ the ramp between the correction dims.
  void angles(int32_t pos, float* c, float* s) const;
  // Rotates pairs (2i, 2i+1) of the last n_rot values of n_vec vectors of `dim` floats by pos. A
  // negative pos gives the exact inverse rotation (θ is odd in pos, cos even, sin odd).
  void rotate(float* x, int n_vec, int dim, int32_t pos) const;
  int n_rot() const { return p_.n_rot; }
  float corr_lo() const { return lo_; }
  float corr_hi() const { return hi_; }

 private:
  TailRopeParams p_;
  float theta_scale_ = 1.0f, lo_ = 0.0f, hi_ = 0.0f;
};

// One pooled row of w channels. Each candidate token row holds kv (cw floats) then score (cw
// floats). Channel i takes the `prev` rows through their channel i and the `cur` rows through
// channel cur_off + i, and pools them with one softmax over all candidates' scores.
// Ratio 4: cw = 2w, prev = the previous block's 4 rows (none for block 0), cur_off = w.
// Ratio 128: cw = w, prev empty, cur = the block's 128 rows, cur_off = 0.
void compress_pool(int w, int cw, const float* const* prev, int n_prev, const float* const* cur,
                   int n_cur, int cur_off, float* out);

// Lightning indexer: scores[b] = Σ_h wgt[h]·max(0, q_h·key_b) over n_head heads of `dim` values,
// for b in [begin, end). keys[b] is a row stored as `key_type` (the cache's), read in place by the
// gated head-score kernel (quant/head_scores.h): a block's score is the same bits whatever the
// range, the ISA or the type's path, and no float copy of the cached keys is made.
void indexer_scores(GgmlType key_type, const float* q, const float* wgt, int n_head, int dim,
                    const std::byte* const* keys, int begin, int end, float* scores);
// The indices of the top_k largest of n scores (all when n ≤ top_k; ties: lower index first), in
// ascending order.
void select_top(const float* scores, int n, int top_k, std::vector<int32_t>& sel);

}  // namespace sluice
