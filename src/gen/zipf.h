// Router row scales that make expert popularity follow a Zipf law (gen-model --zipf S).
//
// A random router row g_e ~ N(0, 1/n_embd) applied to an RMS-normalised hidden state gives a
// logit ≈ N(0, 1) for any token, independently per expert. Scaling row e by s_e makes its logit
// s_e·z_e: experts with larger s win the top-k more often, whatever the hidden states are, which
// is why this works on random weights where no hidden direction is shared between tokens. We fit
// s (by Monte Carlo with fixed samples, once per expert count) so that the expert of popularity
// rank r is selected with frequency ∝ r^-S. Zero-mean logits cap one expert's frequency near 1/2
// (a huge s_e still loses whenever z_e < 0), so targets are min(cap, c·r^-S) with c set so the
// frequencies sum to k; heavy skews saturate at the cap rather than failing.
#pragma once

#include <vector>

namespace sluice::gen {

// Highest selection frequency a single expert is fitted to.
constexpr double kZipfCap = 0.45;

// Selection frequency (fraction of tokens routed to it) of the expert of each popularity rank.
std::vector<double> zipf_targets(int n_expert, int n_used, double s);

// Row scale for each popularity rank (rank 0 most popular), the least popular scaled 1; all 1
// when s == 0.
std::vector<double> zipf_router_scales(int n_expert, int n_used, double s);

}  // namespace sluice::gen
