// MTP drafts: the model's multi-token-prediction (nextn) block predicts the token after next from
// the main model's final hidden state at a position and the token that follows it (GLM-4.5,
// DeepSeek V3, DeepSeek V4 from its separate MTP GGUF). A drafter serves one KV sequence (a
// Session's): it keeps the hidden rows (Model::mtp_hidden_rows) of every evaluated position and
// the MTP block's own KV cache, catches that cache up with the evaluated context when drafts are
// asked for, and chains greedy drafts, each MTP step's output rows feeding the next as its hidden
// state. Drafts only propose: verification keeps output exact.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace sluice {

class MtpDrafter {
 public:
  // `model` has its MTP block loaded; the cache holds up to n_ctx positions.
  MtpDrafter(Model& model, int n_ctx, const KvCacheConfig& config);

  // The main forward evaluated positions [pos, pos + n) and left their final residual rows
  // (n × Model::hidden_width(), before the head; kept as Model::mtp_hidden_rows gives them). Rows
  // must continue the ones held: a later start (a context restored from disk, without hidden rows)
  // leaves the sequence undraftable until it is evaluated again from a held position.
  void add_hidden(ThreadPool& pool, int pos, std::span<const float> rows);
  // The main cache kept `len` positions: hidden rows at or past it are dropped, and so are the MTP
  // cache rows from len − 1 on (row t combines position t with token t + 1, which may change).
  void truncate(int len);
  // Up to k greedy drafts to follow `ctx`, whose last token is pending (sampled, not evaluated):
  // the MTP cache first takes every evaluated position it lacks, whose last row gives the first
  // draft; each further draft runs one more MTP row on the previous one. Empty when the hidden
  // rows of the context are not all held.
  std::vector<int32_t> draft(ThreadPool& pool, ExpertStore& experts, std::span<const int32_t> ctx,
                             int k);

 private:
  Model& model_;
  std::unique_ptr<KvCache> kv_;
  int64_t width_;              // floats per hidden row: Model::hidden_width()
  std::vector<float> hidden_;  // Model::mtp_hidden_rows of positions [0, valid_)
  int valid_ = 0;
};

}  // namespace sluice
