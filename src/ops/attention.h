// Causal multi-head attention over the KV cache with grouped KV heads (GQA/MQA), optional
// sliding window and attention sinks. Queries of a batch may belong to different sequences.
// Absorbed MLA is the case n_head_kv = 1 with the latent as both key prefix and value.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace sluice {

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  float scale = 1.0f;            // applied to q·k
  int window = 0;                // > 0: a query at p sees keys k with p − k < window
  const float* sinks = nullptr;  // (n_head) extra softmax logit per head that carries no value
  bool values_in_keys = false;   // MLA: a key row's first head_dim_v floats are its value (no V cache)
};

// q: (n_tok, n_head·head_dim_k); out: (n_tok, n_head·head_dim_v). Token t attends to positions
// [0, pos[t]] of sequence seq[t] in layer `layer`, whose K/V must already be in the cache.
void attention(ThreadPool& pool, const AttentionParams& p, const KvCache& kv, int layer,
               const float* q, const int32_t* seq, const int32_t* pos, int64_t n_tok, float* out);

}  // namespace sluice
