// The shared decoder layer (see decoder.h).
#include "model/archs/decoder.h"

#include <cmath>

namespace sluice {

void DecoderModel::layer(ForwardContext& ctx, int il, float* x) {
  const Layer& L = layers_[il];
  AttentionConfig ac;
  ac.n_head = hp_.n_head[il];
  ac.n_head_kv = hp_.n_head_kv[il];
  ac.head_dim_k = hp_.head_dim_k;
  ac.head_dim_v = hp_.head_dim_v;
  ac.scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim_k));
  ac.window = hp_.swa_layers[il] ? hp_.sliding_window : 0;
  ac.eps = hp_.rms_eps;
  ac.rope = rope_.get();
  attention_block(ctx, il, L.attn, ac, x);
  prefetch_next(ctx, il, x);
  ffn_block(ctx, il, L.ffn, router_, activation_, hp_.rms_eps, x);
}

}  // namespace sluice
