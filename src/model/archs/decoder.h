// The decoder layer qwen3, glm4moe, llama and gpt-oss share: RMSNorm → GQA attention over the KV
// cache (RoPE, a sliding window on the layers hp_.swa_layers marks) → residual → router lookahead
// → RMSNorm → dense SwiGLU or routed experts with an optional shared expert → residual. The
// architectures differ only in what they load into layers_ (biases, QK norms, sinks, the expert
// layout), their router settings and the experts' activation.
#pragma once

#include <memory>
#include <vector>

#include "model/blocks.h"
#include "model/model.h"

namespace sluice {

class DecoderModel : public Model {
 protected:
  using Model::Model;

  struct Layer {
    AttentionWeights attn;
    FfnLayerWeights ffn;  // the FFN norm; dense, or router + experts (+ shared expert)
  };
  // Attention scaled by 1/sqrt(head_dim_k) (gpt-oss's 1/sqrt(n_rot) is the same: its heads are
  // fully rotated, checked at load).
  void layer(ForwardContext& ctx, int il, float* x) override;

  std::vector<Layer> layers_;  // one per layer (and a loaded MTP block's)
  RouterConfig router_;
  ExpertActivation activation_ = ExpertActivation::kSwiglu;
  std::unique_ptr<RopeCache> rope_;
};

}  // namespace sluice
