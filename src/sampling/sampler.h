// Token sampling: logit biases, penalties (repetition, presence, frequency) over recent tokens, then greedy or
// temperature sampling filtered by top-k, top-p and min-p. A seed makes a run reproducible: the
// generator is owned by the sampler and advanced once per sampled token.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice {

struct SamplingParams {
  float temperature = 0.8f;  // ≤ 0: greedy
  int top_k = 40;            // ≤ 0: off
  float top_p = 0.95f;       // ≥ 1: off
  float min_p = 0.05f;       // ≤ 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;   // how many recent tokens the penalties look at
  uint64_t seed = 0xC0FFEE;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the tokens' logits first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token from raw logits (n_vocab values); does not record it.
  int32_t sample(std::span<const float> logits);
  // Speculative step: decides whether `draft` (proposed by a deterministic drafter, a point mass)
  // stands as the next token. Greedy: it stands iff it is the argmax, and the argmax is returned
  // either way. Temperature: it stands with probability p(draft) of the filtered distribution;
  // otherwise a token is drawn from p with the draft removed, renormalised — the standard
  // speculative rejection rule, so the returned token follows p exactly as sample() would.
  int32_t sample_draft(std::span<const float> logits, int32_t draft, bool* accepted);
  // Records a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  void reset();
  const SamplingParams& params() const { return p_; }

 private:
  // The distribution sample() draws from: token ids (most likely first) and their probabilities.
  struct Candidates {
    std::vector<int32_t> ids;
    std::vector<double> prob;
  };
  // Logits after the biases and penalties (a copy in `buf` when any apply, else `logits` itself).
  std::span<const float> penalized(std::span<const float> logits, std::vector<float>& buf) const;
  // Top-k, temperature softmax, top-p and min-p; `prob` is normalised over top-k before the cuts,
  // as the draw weighs the kept ones.
  Candidates candidates(std::span<const float> l) const;

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::unordered_map<int32_t, int> counts_;
};

// Index of the largest logit (lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace sluice
