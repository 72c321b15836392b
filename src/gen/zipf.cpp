// Zipf router scales: water-filled targets, then a multiplicative fit of the scales against
// top-k counts on a fixed set of standard normal logits (common random numbers keep the fit
// smooth and the result deterministic).
#include "gen/zipf.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gen/random_fill.h"

namespace sluice::gen {

std::vector<double> zipf_targets(int n_expert, int n_used, double s) {
  if (n_expert <= 0 || n_used <= 0 || n_used > n_expert) fail("{} of {} experts is not a valid routing", n_used, n_expert);
  const double k = n_used;
  const double cap = std::max(kZipfCap, k / n_expert);
  auto total = [&](double c) {
    double sum = 0;
    for (int r = 0; r < n_expert; ++r) sum += std::min(cap, c * std::pow(r + 1.0, -s));
    return sum;
  };
  double lo = 0, hi = 1;
  while (total(hi) < k - 1e-12 && hi < 1e300) hi *= 2;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (total(mid) < k ? lo : hi) = mid;
  }
  std::vector<double> t(n_expert);
  for (int r = 0; r < n_expert; ++r) t[r] = std::min(cap, hi * std::pow(r + 1.0, -s));
  return t;
}

namespace {

// Upper tail of the standard normal and its inverse (by bisection: called a few thousand times).
double upper_tail(double x) { return 0.5 * std::erfc(x / std::sqrt(2.0)); }
double upper_tail_inverse(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (upper_tail(mid) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Mean-field view: expert e is selected when s_e·z_e clears a threshold τ set by the others, so
// f_e ≈ tail(τ / s_e). This gives the starting scales (τ = 1) and d log f / d log s, which
// preconditions the fit's steps (the raw sensitivity reaches ~6 for rare experts, and undamped
// steps would oscillate).
double sensitivity(double f) {
  const double x = upper_tail_inverse(f);
  return std::max(1.0, x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI) / f);
}

}  // namespace

std::vector<double> zipf_router_scales(int n_expert, int n_used, double s) {
  if (s < 0) fail("--zipf {} is negative; use 0 for uniform routing", s);
  std::vector<double> target = zipf_targets(n_expert, n_used, s);
  // With k/n at or above the cap every target is k/n: uniform routing.
  if (s == 0 || n_used >= kZipfCap * n_expert) return std::vector<double>(n_expert, 1.0);

  constexpr int kSamples = 4096;
  constexpr int kIterations = 40;
  std::vector<float> z(static_cast<size_t>(kSamples) * n_expert);
  Rng rng(0x21BF);
  for (float& v : z) v = rng.normal();

  std::vector<double> log_s(n_expert);
  for (int e = 0; e < n_expert; ++e) log_s[e] = -std::log(upper_tail_inverse(target[e]));
  std::vector<float> logits(n_expert), sorted(n_expert);
  std::vector<int> count(n_expert);
  for (int it = 0; it < kIterations; ++it) {
    std::vector<float> scale(n_expert);
    for (int e = 0; e < n_expert; ++e) scale[e] = static_cast<float>(std::exp(log_s[e]));
    std::fill(count.begin(), count.end(), 0);
    for (int i = 0; i < kSamples; ++i) {
      const float* zi = z.data() + static_cast<size_t>(i) * n_expert;
      for (int e = 0; e < n_expert; ++e) sorted[e] = logits[e] = scale[e] * zi[e];
      std::nth_element(sorted.begin(), sorted.begin() + (n_used - 1), sorted.end(), std::greater<float>());
      const float kth = sorted[n_used - 1];
      for (int e = 0; e < n_expert; ++e) count[e] += logits[e] >= kth;
    }
    for (int e = 0; e < n_expert; ++e) {
      const double measured = std::clamp(count[e] / static_cast<double>(kSamples), 0.5 / kSamples, 0.49);
      const double step = (std::log(target[e]) - std::log(measured)) / sensitivity(measured);
      log_s[e] = std::clamp(log_s[e] + 0.7 * step, -8.0, 8.0);
    }
  }
  const double min_log = *std::min_element(log_s.begin(), log_s.end());
  std::vector<double> out(n_expert);
  for (int e = 0; e < n_expert; ++e) out[e] = std::exp(log_s[e] - min_log);
  return out;
}

}  // namespace sluice::gen
