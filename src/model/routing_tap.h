// A tap on the router: what each token of a forward pass routed to, layer by layer, and what the
// router lookahead predicted for it. The runtime installs one to write a routing trace (what a
// model's learned routing looks like, for `sluice route-stats`) or to replay one (a model's expert
// choice driven by another model's trace, so streaming is measured at real expert sizes on learned
// routing). The model only calls it; files are the runtime's business.
#pragma once

#include <cstdint>

namespace sluice {

struct Batch;

class RoutingTap {
 public:
  virtual ~RoutingTap() = default;
  // A forward pass over `batch` starts (the main layers; MTP passes are not tapped).
  virtual void begin_forward(const Batch& batch) = 0;
  // route() chose ids (n_tok, n_used), each token's experts in descending selection order, for
  // layer il. A replay overwrites them (distinct per token, within 0..n_expert−1).
  virtual void routed(int il, int n_used, int32_t* ids) = 0;
  // Whether the lookahead's predictions are wanted even when prefetch is off.
  virtual bool wants_predictions() const = 0;
  // The router lookahead's prediction for layer il (n_tok, n_used, most likely first), made from
  // the hidden state before layer il−1's experts ran. A replay overwrites it with its trace's.
  virtual void predicted(int il, int n_used, int32_t* ids) = 0;
  // The pass has run all its layers.
  virtual void end_forward() = 0;
};

}  // namespace sluice
