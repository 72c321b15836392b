// Embeddings (Scheduler::embed): the input evaluated in a KV cache of its own, every position's
// final hidden state through the output head's norm (what the head multiplies), pooled (mean,
// last, or first token) and scaled to unit L2 norm.
#include <cmath>

#include "core/error.h"
#include "runtime/embed.h"
#include "runtime/step.h"

namespace sluice {

std::vector<float> embed_tokens(Engine::Impl& e, std::span<const int32_t> tokens, Pooling pooling) {
  if (e.link) fail("embeddings do not run in a pipeline: the stages hold only their layers");
  if (tokens.empty()) fail("nothing to embed: the input has no tokens");
  if (static_cast<int>(tokens.size()) > e.n_ctx)
    fail("the input is {} tokens, more than the context of {}", tokens.size(), e.n_ctx);
  const Model& m = *e.model;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = m.hparams().n_embd;
  std::unique_ptr<KvCache> kv = e.make_kv_cache(static_cast<int>(n));
  const int step = kv->max_step();
  std::vector<float> normed(n * n_embd), hidden, logits;
  Batch batch;
  for (int64_t from = 0; from < n; from += step) {
    const int64_t end = std::min<int64_t>(n, from + step);
    batch.clear();
    // One row of logits is the least forward_stage computes; the hidden rows are what is used.
    for (int64_t i = from; i < end; ++i) batch.add(tokens[i], static_cast<int32_t>(i), 0, i + 1 == end);
    engine_forward(e, batch, *kv, logits, &hidden);
    m.head_rows(*e.pool, hidden.data(), end - from, normed.data() + from * n_embd);
  }
  std::vector<float> out(n_embd, 0.0f);
  if (pooling == Pooling::kMean) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < n_embd; ++j) out[j] += normed[t * n_embd + j];
    for (float& v : out) v /= static_cast<float>(n);
  } else {
    const int64_t t = pooling == Pooling::kLast ? n - 1 : 0;
    std::copy_n(normed.begin() + t * n_embd, n_embd, out.begin());
  }
  double sq = 0;
  for (float v : out) sq += static_cast<double>(v) * v;
  const double norm = std::sqrt(sq);
  if (norm > 0)
    for (float& v : out) v = static_cast<float>(v / norm);
  return out;
}

}  // namespace sluice
