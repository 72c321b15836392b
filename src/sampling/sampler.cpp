// Sampling pipeline; order follows common practice (and llama.cpp's default chain): logit bias →
// penalties →
// top-k → temperature-scaled softmax → top-p → min-p → draw.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace sluice {

int32_t argmax(std::span<const float> logits) {
  // std::max_element's answer (the first of the largest; a NaN is never chosen past index 0,
  // where it wins), found in two passes without its serial chain: each of its steps reloads the
  // current best through a pointer and compares (2.4 % of the trained 8,192-token model's
  // one-thread greedy decode, most of it on that compare). Here the largest value comes from
  // eight running maxima that stay in registers (`x > m ? x : m` skips NaNs, as max_element
  // does), then its first index.
  const size_t n = logits.size();
  if (n == 0 || std::isnan(logits[0])) return 0;
  constexpr size_t kLanes = 8;
  float m[kLanes];
  std::fill(m, m + kLanes, logits[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
  for (; i < n; ++i) m[0] = logits[i] > m[0] ? logits[i] : m[0];
  float best = m[0];
  for (size_t j = 1; j < kLanes; ++j) best = m[j] > best ? m[j] : best;
  return static_cast<int32_t>(std::find(logits.begin(), logits.end(), best) - logits.begin());
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  rng_.seed(p_.seed);
  recent_.clear();
  counts_.clear();
}

void Sampler::accept(int32_t token) {
  if (p_.penalty_last_n <= 0) return;
  recent_.push_back(token);
  ++counts_[token];
  if (static_cast<int>(recent_.size()) > p_.penalty_last_n) {
    int32_t old = recent_.front();
    recent_.pop_front();
    if (--counts_[old] == 0) counts_.erase(old);
  }
}

std::span<const float> Sampler::penalized(std::span<const float> logits_in, std::vector<float>& logits) const {
  const bool penalize = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if ((!penalize || counts_.empty()) && p_.logit_bias.empty()) return logits_in;
  logits.assign(logits_in.begin(), logits_in.end());
  for (const auto& [tok, bias] : p_.logit_bias)
    if (tok >= 0 && tok < static_cast<int32_t>(logits.size())) logits[tok] += bias;
  if (!penalize) return logits;
  for (const auto& [tok, n] : counts_) {
    if (tok < 0 || tok >= static_cast<int32_t>(logits.size())) continue;
    float& v = logits[tok];
    if (p_.repeat_penalty != 1.0f) v = v > 0 ? v / p_.repeat_penalty : v * p_.repeat_penalty;
    v -= static_cast<float>(n) * p_.frequency_penalty + p_.presence_penalty;
  }
  return logits;
}

Sampler::Candidates Sampler::candidates(std::span<const float> l) const {
  // Candidates sorted by logit, cut to top-k.
  const int n = static_cast<int>(l.size());
  const int k = p_.top_k > 0 ? std::min(p_.top_k, n) : n;
  Candidates c;
  std::vector<int32_t>& idx = c.ids;
  idx.resize(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(k);

  std::vector<double>& prob = c.prob;
  prob.resize(k);
  const double mx = l[idx[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    prob[i] = std::exp((l[idx[i]] - mx) / p_.temperature);
    sum += prob[i];
  }
  for (auto& q : prob) q /= sum;

  int keep = k;
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      cum += prob[i];
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0f) {
    const double floor = prob[0] * p_.min_p;
    int m = 1;
    while (m < keep && prob[m] >= floor) ++m;
    keep = m;
  }
  idx.resize(keep);
  prob.resize(keep);
  return c;
}

int32_t Sampler::sample(std::span<const float> logits_in) {
  std::vector<float> buf;
  const std::span<const float> l = penalized(logits_in, buf);
  if (p_.temperature <= 0.0f) return argmax(l);
  const Candidates c = candidates(l);
  std::discrete_distribution<int> pick(c.prob.begin(), c.prob.end());
  return c.ids[pick(rng_)];
}

int32_t Sampler::sample_draft(std::span<const float> logits_in, int32_t draft, bool* accepted) {
  std::vector<float> buf;
  const std::span<const float> l = penalized(logits_in, buf);
  if (p_.temperature <= 0.0f) {
    const int32_t t = argmax(l);
    *accepted = t == draft;
    return t;
  }
  Candidates c = candidates(l);
  double total = 0.0, p_draft = 0.0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    total += c.prob[i];
    if (c.ids[i] == draft) p_draft = c.prob[i];
  }
  // The kept candidates' weights are not renormalised after the cuts; the draw weighs them
  // relative to their sum, so p(draft) is its share of that sum.
  p_draft /= total;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  *accepted = p_draft > 0.0 && u(rng_) < p_draft;
  if (*accepted) return draft;
  // Residual max(0, p − q) with q the point mass on the draft: p without the draft.
  for (size_t i = 0; i < c.ids.size(); ++i)
    if (c.ids[i] == draft) c.prob[i] = 0.0;
  std::discrete_distribution<int> pick(c.prob.begin(), c.prob.end());
  return c.ids[pick(rng_)];
}

}  // namespace sluice
