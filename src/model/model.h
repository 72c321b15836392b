// A loaded model: hyperparameters, resident weights (views of the GGUF mmap), the layout of its
// routed experts, and the forward pass over a batch of tokens from one or more sequences. The
// expert store is not the model's: the engine owns it and passes it to each forward call, so
// whoever runs the model says which store (and which cache) it uses.
// Architectures subclass Model in archs/<arch>.cpp: they declare their tensors and write their
// layer from the shared blocks in blocks.h; archs/registry.h loads the one a file names.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "experts/expert_shard.h"
#include "experts/expert_store.h"
#include "kv/kv_cache.h"
#include "model/forward_context.h"
#include "model/head_shard.h"
#include "model/hparams.h"
#include "model/kv_shape.h"
#include "model/routing_tap.h"
#include "tensor/tensor.h"

namespace sluice {

namespace gguf { class File; }
class WeightLoader;

class Model {
 public:
  virtual ~Model() = default;
  const HParams& hparams() const { return hp_; }
  const ExpertLayout& expert_layout() const { return expert_layout_; }

  // Router lookahead: before layer il's experts run, predict layer il+1's experts from the
  // current hidden state and let the store start reading them.
  void set_prefetch(bool on) { prefetch_ = on; }
  // Every main-layer forward pass reports its routing to `tap` (null: none), which may replace it
  // (replay). The tap must outlive the passes.
  void set_routing_tap(RoutingTap* tap) { routing_ = tap; }
  // Expert parallel: every pass computes only `shard`'s experts and trades slot outputs through
  // it (null: all experts here). The shard must outlive the passes.
  void set_expert_shard(ExpertShard* shard) { shard_ = shard; }
  // Expert parallel, the output head split by vocabulary: every pass multiplies only `shard`'s
  // rows of the head and gathers the logits on the process that samples; the others get none
  // (null: the whole head here). The shard must outlive the passes.
  void set_head_shard(HeadShard* shard) { head_shard_ = shard; }
  // The output head's rows this process multiplies, as a matrix (the whole head without a head
  // shard): the only part of it a pass reads.
  MatView head_slice() const;
  HeadRows head_rows_owned() const;
  // Whether the output head is the token embedding (tied).
  bool head_tied() const { return output_.data == token_embd_.data; }

  // Pipeline stage: this model runs only layers [begin, end) (end −1: the last layer). The first
  // stage embeds tokens, the last applies the output head; a stage's KV cache and expert layout
  // hold only its own layers. Call before building the expert store. Throws naming the range when it is empty or outside 0..n_layer.
  void set_layer_range(int begin, int end);
  int layer_begin() const { return layer_begin_; }
  int layer_end() const { return layer_end_ < 0 ? hp_.n_layer : layer_end_; }
  bool first_stage() const { return layer_begin_ == 0; }
  bool last_stage() const { return layer_end() == hp_.n_layer; }

  // The rule that states this architecture's KV cache from a file's keys (archs/registry.h,
  // kv_shape; the planner sizes with the same rule) and the model file's summary: load_model hands
  // both over, so the cache is never described a second time here. The rule is kept for a
  // separate MTP file (load_mtp), whose block lies past the model's.
  using KvRule = KvShape (*)(const ModelSummary&);
  void set_kv_rule(KvRule rule, const ModelSummary& summary);
  const KvShape& kv_shape() const { return kv_shape_; }
  // The KV cache of this model for sequences of up to n_ctx positions (config: stored types and
  // the step bound that lets windowed layers keep a ring; kv/kv_cache.h), laid out as kv_shape()
  // says for this stage's layers. Throws on a model loaded without a KV shape.
  virtual std::unique_ptr<KvCache> make_kv_cache(int n_ctx, const KvCacheConfig& config = {}) const;
  // Evaluates the batch: appends every token's K/V to the cache, reads routed experts through
  // `experts`, and writes n_vocab logits per token with want_logits set, in batch order, into
  // `logits` (resized).
  void forward(ThreadPool& pool, const Batch& batch, KvCache& kv, ExpertStore& experts, std::vector<float>& logits,
               const ActivationHook* hook = nullptr);
  // One stage of the forward pass. `hidden` is the residual stream between stages, fp32
  // (n_tok × residual_streams() × n_embd): the first stage fills it from the embedding, later
  // stages take it as the previous stage left it; every stage leaves its own output there. The
  // last stage writes logits as forward() does; other stages clear `logits`. With the whole layer
  // range, forward_stage and forward give the same logits bit for bit.
  void forward_stage(ThreadPool& pool, const Batch& batch, KvCache& kv, ExpertStore& experts,
                     std::vector<float>& hidden, std::vector<float>& logits, const ActivationHook* hook = nullptr);
  int64_t hidden_width() const { return static_cast<int64_t>(residual_streams()) * hp_.n_embd; }
  // What the output head multiplies: n rows of the final residual stream (hidden_width() each)
  // through head_input and output_norm, n_embd each into y.
  void head_rows(ThreadPool& pool, const float* x, int64_t n, float* y) const;

  // Multi-token prediction: GLM-4.5 / DeepSeek V3 nextn blocks, appended after the n_layer main
  // layers in block_count, or DeepSeek V4's block from the separate GGUF its converter writes
  // (--mtp FILE). Not loaded by default, so memory plans and streaming do not change.
  int n_mtp_layers() const { return n_mtp_file_; }  // in the model file (0: none)
  bool mtp_loaded() const { return mtp_loaded_; }
  // Loads the first MTP block as layer index n_layer: its decoder layer, nextn.* tensors, and its
  // routed experts into the expert layout so they stream through the same store. `part_base` 0:
  // `file` is the model's own file. Otherwise `file` is a separate MTP GGUF of the same
  // architecture whose block_count is n_layer + its nextn_predict_layers; its split parts are
  // numbered from part_base (after the model's), and its output_norm stands in for an absent
  // nextn.shared_head_norm. Absent nextn.embed_tokens / shared_head_head: the model's. Call after
  // set_layer_range (the whole model only) and before building the expert store. Throws naming
  // what does not fit.
  void load_mtp(const gguf::File& file, uint32_t part_base = 0);
  // The KV cache of the MTP block alone (nothing for the main layers), n_ctx positions.
  virtual std::unique_ptr<KvCache> make_mtp_kv_cache(int n_ctx,
                                                     const KvCacheConfig& config = {}) const;
  // What MTP starts from, for n rows of the final residual (hidden_width() floats each, as
  // forward_stage leaves them), hidden_width() floats per row into `out`: with one residual
  // stream the head's normed input (head_rows), as vLLM's deepseek_mtp takes it; with
  // hyper-connection streams (DeepSeek V4) the streams themselves, before the head's mixer.
  void mtp_hidden_rows(ThreadPool& pool, const float* x, int64_t n, float* out) const;
  // Runs the MTP block on batch rows: row t combines `hidden` row t (mtp_hidden_rows of the main
  // model at the row's position; or a previous MTP step's `out_hidden` row when chaining) with
  // the embedding of batch.tokens[t] (the token after that position), at batch.pos[t] (the
  // position of the hidden row, as vLLM places it; RoPE is relative, so placing every row one
  // later, at its token's position, gives the same drafts). Each residual stream of the row is
  // projected on its own (eh_proj of [enorm(embedding); hnorm(stream)]). `out_hidden` gets the
  // chaining rows in the same form as `hidden` (one stream: shared_head_norm of the block's
  // output, which vLLM's deepseek_mtp recycles; V4: the block's output streams), `logits` the
  // draft logits of the rows with want_logits (predicting the token after batch.tokens[t]). Rows
  // without want_logits only fill the block's cache (ForwardContext::ffn_rows): their
  // out_hidden rows are not the block's output.
  void forward_mtp(ThreadPool& pool, const Batch& batch, const float* hidden, KvCache& kv,
                   ExpertStore& experts, std::vector<float>& out_hidden, std::vector<float>& logits,
                   const ActivationHook* hook = nullptr);

 protected:
  explicit Model(HParams hp) : hp_(std::move(hp)) {}
  // Runs layer `il` on the residual stream x (n_tok × residual_streams() × n_embd), in place.
  virtual void layer(ForwardContext& ctx, int il, float* x) = 0;
  // Residual streams per token (DeepSeek V4 hyper-connections: 4, each starting as the embedding).
  virtual int residual_streams() const { return 1; }
  // Called once per forward call before the first layer (cache checks, certain prefetches).
  virtual void begin_forward(ForwardContext&) {}
  // The n_embd-vector the output norm and head see for each of n rows of residual streams.
  virtual void head_input(ThreadPool& pool, const float* x, int64_t n, float* h) const;
  // Shared by architectures: token embedding, final norm and output head (tied when absent).
  void load_embedding_and_head(const gguf::File& file);
  // The nextn_predict_layers MTP blocks a file counts at the end of block_count (the GLM-4.5 /
  // DeepSeek V3 layout) are not main layers: takes them off n_layer into n_mtp_file_. Fails on a
  // file that holds only such a block (a separate MTP GGUF given as the model).
  void take_mtp_layers(const gguf::File& file);
  // The architecture's decoder layer `il` of the MTP block, declared through `wl` (over `file`,
  // the model's or a separate MTP GGUF): loads it so that layer(ctx, il, x) runs it, and puts its
  // routed experts into expert_layout_.layers[il]. Architectures without MTP fail naming it.
  virtual void load_mtp_layer(const gguf::File& file, const WeightLoader& wl, int il);
  // Called once per forward_mtp call before the block (cache checks).
  virtual void begin_mtp_forward(ForwardContext&) {}
  // The n_embd-vector the MTP head's norm sees for each of n rows of the block's output streams.
  virtual void mtp_head_input(ThreadPool& pool, const float* x, int64_t n, float* h) const;
  // Architectures register each MoE layer's FFN norm and router for lookahead prefetch, and call
  // prefetch_next() with the residual stream x before running layer il's experts; the prediction
  // is issued once layer il's experts are pinned (ForwardContext::issue_lookahead).
  struct LookaheadRouter {
    Tensor norm;         // (n_embd) the layer's FFN RMSNorm weight
    Tensor gate_inp;     // (n_embd, n_expert)
    Tensor exp_probs_b;  // optional (n_expert) selection bias added to the gate probabilities
  };
  void set_lookahead(int il, const Tensor& norm, const Tensor& gate_inp, const Tensor& exp_probs_b = Tensor{});
  void prefetch_next(ForwardContext& ctx, int il, const float* x);

  HParams hp_;
  Tensor token_embd_;   // (n_embd, n_vocab)
  Tensor output_norm_;  // (n_embd)
  Tensor output_;       // (n_embd, n_vocab), token_embd when tied
  ExpertLayout expert_layout_;
  std::vector<LookaheadRouter> lookahead_;  // per layer; empty tensors for dense layers
  bool prefetch_ = false;
  RoutingTap* routing_ = nullptr;
  ExpertShard* shard_ = nullptr;
  HeadShard* head_shard_ = nullptr;
  int layer_begin_ = 0;
  int layer_end_ = -1;  // −1: n_layer
  int n_mtp_file_ = 0;  // take_mtp_layers sets it from nextn_predict_layers

 private:
  // Checks a batch's tokens and positions and reserves each sequence's KV up to its highest
  // position; returns seq → one past that position (the lengths to set once the layers ran).
  std::map<int32_t, int32_t> reserve_batch(const Batch& batch, KvCache& kv) const;
  // The rows of `x` (width floats per token) of the tokens that want logits, in batch order.
  static std::vector<float> logit_rows(const Batch& batch, const std::vector<float>& x,
                                       int64_t width);
  // The MTP block's own tensors (blk.{n_layer}.nextn.*).
  struct MtpHead {
    Tensor eh_proj;           // (2·n_embd, n_embd): [enorm(embedding); hnorm(hidden)] → n_embd
    Tensor enorm;             // (n_embd)
    Tensor hnorm;             // (n_embd)
    Tensor shared_head_norm;  // (n_embd), else a separate MTP file's output_norm, else the model's
    Tensor embed;             // (n_embd, n_vocab), else the model's token_embd
    Tensor head;              // (n_embd, n_vocab), else the model's output head
  };
  MtpHead mtp_{};
  bool mtp_loaded_ = false;
  KvRule kv_rule_ = nullptr;
  KvShape kv_shape_;  // per block of the model file; a separate MTP file's block appended
};

}  // namespace sluice
