// Model base: embedding, layer loop, output head, the MTP block.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/blocks.h"
#include "model/weights.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "quant/dequant.h"

namespace sluice {

void Model::load_embedding_and_head(const gguf::File& file) {
  WeightLoader wl(file);
  const gguf::TensorInfo& te = file.tensor("token_embd.weight");
  hp_.n_vocab = static_cast<int>(te.ne[1]);
  token_embd_ = wl.require("token_embd.weight", {hp_.n_embd, hp_.n_vocab});
  output_norm_ = wl.require_f32("output_norm.weight", {hp_.n_embd});
  output_ = wl.optional("output.weight", {hp_.n_embd, hp_.n_vocab});
  if (!output_) output_ = token_embd_;
}

void Model::set_layer_range(int begin, int end) {
  if (end < 0) end = hp_.n_layer;
  if (begin < 0 || begin >= end || end > hp_.n_layer)
    fail("layer range {}:{} is not a non-empty range within 0:{}", begin, end, hp_.n_layer);
  if ((begin > 0 || end < hp_.n_layer) && residual_streams() != 1)
    fail("architecture '{}' cannot be split into pipeline stages (its residual stream is {} vectors per token)",
         hp_.arch, residual_streams());
  layer_begin_ = begin;
  layer_end_ = end;
  // The expert stores see only this stage's layers, so neither a warm-start preload nor a
  // prefetch brings another stage's experts into this stage's memory.
  for (int il = 0; il < static_cast<int>(expert_layout_.layers.size()); ++il)
    if (il < begin || il >= end) expert_layout_.layers[il] = ExpertLayerTensors{};
}

void Model::set_kv_rule(KvRule rule, const ModelSummary& summary) {
  kv_rule_ = rule;
  kv_shape_ = rule(summary);
}

std::unique_ptr<KvCache> Model::make_kv_cache(int n_ctx, const KvCacheConfig& config) const {
  if (static_cast<int>(kv_shape_.layers.size()) < hp_.n_layer)
    fail("internal: the {} model has no KV shape for its {} layers (load it with load_model)",
         hp_.arch, hp_.n_layer);
  // Layers of other pipeline stages keep no K/V here (no heads).
  std::vector<KvLayerShape> layers(hp_.n_layer);
  for (int il = layer_begin(); il < layer_end(); ++il) layers[il] = kv_shape_.layers[il];
  return std::make_unique<KvCache>(std::move(layers), n_ctx, config);
}

std::map<int32_t, int32_t> Model::reserve_batch(const Batch& batch, KvCache& kv) const {
  if (batch.size() == 0) fail("empty batch");
  std::map<int32_t, int32_t> seq_end;
  for (int64_t t = 0; t < batch.size(); ++t) {
    const int32_t tok = batch.tokens[t];
    if (tok < 0 || tok >= hp_.n_vocab)
      fail("token id {} is outside the vocabulary (0..{})", tok, hp_.n_vocab - 1);
    if (batch.pos[t] < 0) fail("negative position {}", batch.pos[t]);
    int32_t& e = seq_end[batch.seq[t]];
    e = std::max(e, batch.pos[t] + 1);
  }
  for (const auto& [s, end] : seq_end) kv.reserve(s, end);
  return seq_end;
}

std::vector<float> Model::logit_rows(const Batch& batch, const std::vector<float>& x,
                                     int64_t width) {
  std::vector<float> picked;
  for (int64_t t = 0; t < batch.size(); ++t)
    if (batch.want_logits[t])
      picked.insert(picked.end(), x.begin() + t * width, x.begin() + (t + 1) * width);
  return picked;
}

void Model::forward(ThreadPool& pool, const Batch& batch, KvCache& kv, ExpertStore& experts,
                    std::vector<float>& logits, const ActivationHook* hook) {
  std::vector<float> x;
  forward_stage(pool, batch, kv, experts, x, logits, hook);
}

void Model::forward_stage(ThreadPool& pool, const Batch& batch, KvCache& kv, ExpertStore& experts,
                          std::vector<float>& x, std::vector<float>& logits, const ActivationHook* hook) {
  const int64_t n_tok = batch.size();
  const int64_t n_embd = hp_.n_embd;
  const std::map<int32_t, int32_t> seq_end = reserve_batch(batch, kv);

  const int64_t n_streams = residual_streams();
  const int64_t width = n_streams * n_embd;
  ForwardContext ctx{pool, batch, kv, experts, n_tok, hook};
  ctx.routing = routing_;
  ctx.shard = shard_;
  ctx.n_embd = n_embd;
  if (first_stage()) {
    x.assign(n_tok * width, 0.0f);
    const uint64_t row = token_embd_.row_bytes();
    for (int64_t t = 0; t < n_tok; ++t) {
      float* xt = x.data() + t * width;
      dequantize_row(token_embd_.type, token_embd_.data + row * batch.tokens[t], xt, n_embd);
      for (int64_t s = 1; s < n_streams; ++s) std::copy_n(xt, n_embd, xt + s * n_embd);
    }
    if (n_streams == 1) ctx.dump("inp_embd", -1, x.data(), n_embd);
  } else if (static_cast<int64_t>(x.size()) != n_tok * width) {
    fail("hidden state of {} floats for layers {}:{}, expected {} tokens × {} = {}", x.size(), layer_begin(),
         layer_end(), n_tok, width, n_tok * width);
  }

  if (routing_) routing_->begin_forward(batch);
  begin_forward(ctx);
  for (int il = layer_begin(); il < layer_end(); ++il) {
    layer(ctx, il, x.data());
    ctx.issue_lookahead();
    if (n_streams == 1) ctx.dump("l_out", il, x.data(), n_embd);
  }
  if (routing_) routing_->end_forward();
  for (const auto& [s, end] : seq_end) kv.set_length(s, std::max(kv.length(s), end));
  if (!last_stage()) {
    logits.clear();
    return;
  }

  const std::vector<float> picked = logit_rows(batch, x, width);
  const int64_t n_out = static_cast<int64_t>(picked.size()) / width;
  std::vector<float> rows(n_out * n_embd);
  if (n_out > 0) head_rows(pool, picked.data(), n_out, rows.data());
  if (!head_shard_) {
    logits.resize(n_out * hp_.n_vocab);
    if (n_out > 0) matmul(pool, output_.mat(), rows.data(), n_out, logits.data());
    return;
  }
  // Every process has the same rows (the same batch), so all skip a step without logits alike.
  logits.clear();
  if (n_out == 0) return;
  std::vector<float> part(n_out * head_rows_owned().size());  // (n_out, this process's rows)
  matmul(pool, head_slice(), rows.data(), n_out, part.data());
  head_shard_->gather_logits(part, n_out, hp_.n_vocab, logits);
}

HeadRows Model::head_rows_owned() const {
  if (!head_shard_) return {0, hp_.n_vocab};
  return head_rows_of(head_shard_->head_rank(), head_shard_->head_ranks(), hp_.n_vocab);
}

MatView Model::head_slice() const {
  const HeadRows r = head_rows_owned();
  MatView v = output_.mat();
  v.data += static_cast<uint64_t>(r.begin) * v.row_stride;
  v.n_out = r.size();
  return v;
}

void Model::take_mtp_layers(const gguf::File& file) {
  const std::string a = hp_.arch + ".";
  const int64_t nextn = hp_.n_nextn;
  if (nextn < 0 || nextn >= hp_.n_layer)
    fail("metadata key '{}nextn_predict_layers' is {}, expected 0..{}", a, nextn, hp_.n_layer - 1);
  if (nextn > 0 && !file.find_tensor(WeightLoader::layer_name(0, "attn_norm.weight")))
    fail(
        "this file holds only an MTP block ({}nextn_predict_layers {}, no layer 0): load the "
        "model and give this file with --mtp",
        a, nextn);
  hp_.n_layer -= static_cast<int>(nextn);
  n_mtp_file_ = static_cast<int>(nextn);
}

void Model::load_mtp_layer(const gguf::File&, const WeightLoader&, int il) {
  fail("architecture '{}' cannot run its MTP block (blk.{})", hp_.arch, il);
}

void Model::load_mtp(const gguf::File& file, uint32_t part_base) {
  if (mtp_loaded_) return;
  const int il = hp_.n_layer;
  const bool separate = part_base > 0;
  const std::string a = hp_.arch + ".";
  if (separate) {
    const std::string arch = file.get_string_or("general.architecture", "");
    if (arch != hp_.arch)
      fail("the MTP file's architecture is '{}', the model's '{}'", arch, hp_.arch);
    const int64_t nextn = file.get_int_or(a + "nextn_predict_layers", 0);
    if (nextn < 1) fail("the MTP file has no MTP block ({}nextn_predict_layers is absent or 0)", a);
    const int64_t blocks = file.get_int_or(a + "block_count", 0);
    if (blocks != il + nextn)
      fail(
          "the MTP file's {}block_count is {}, expected the model's {} layers plus its {} MTP "
          "block(s): it was converted from another model",
          a, blocks, il, nextn);
    const int64_t d = file.get_int_or(a + "embedding_length", 0);
    if (d != hp_.n_embd)
      fail("the MTP file's {}embedding_length is {}, the model's {}", a, d, hp_.n_embd);
    // The block sits past the model's per-layer hparams: its entries are the file's (its array
    // entry il, or its scalar), else the model's last layer's.
    auto extend = [&](std::vector<int>& v, const char* key) {
      if (static_cast<int>(v.size()) > il) return;
      int64_t x = v.empty() ? 0 : v.back();
      if (const gguf::Value* val = file.find(a + key); val && val->type == gguf::ValueType::ARRAY) {
        const std::vector<int64_t> arr = file.get_int_array(a + key);
        if (static_cast<int>(arr.size()) > il) x = arr[il];
      } else if (val) {
        x = file.get_int(a + key);
      }
      v.resize(il + 1, static_cast<int>(x));
    };
    extend(hp_.n_head, "attention.head_count");
    extend(hp_.n_head_kv, "attention.head_count_kv");
    extend(hp_.n_ff, "feed_forward_length");
    if (static_cast<int>(hp_.swa_layers.size()) <= il) hp_.swa_layers.resize(il + 1, false);
    // The block's KV shape by the same rule, over the MTP file's keys (its block_count reaches
    // the block).
    if (kv_rule_ && !kv_shape_.layers.empty()) {
      const KvShape mtp_shape = kv_rule_(read_model_summary(file));
      if (static_cast<int>(mtp_shape.layers.size()) <= il)
        fail("the MTP file's keys do not state its block's KV cache (blk.{})", il);
      kv_shape_.layers.resize(il + 1);
      kv_shape_.layers[il] = mtp_shape.layers[il];
    }
  } else if (n_mtp_file_ <= 0) {
    fail(
        "the model file has no MTP layers ({}nextn_predict_layers is absent or 0): --draft mtp "
        "needs them, or a separate MTP GGUF given with --mtp FILE",
        a);
  }
  if (layer_begin_ != 0 || layer_end() != hp_.n_layer)
    fail("the MTP block runs only with the whole model, not with layers {}:{}", layer_begin_,
         layer_end());
  WeightLoader wl(file, part_base);
  const int64_t n_embd = hp_.n_embd;
  auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
  mtp_.eh_proj = wl.require(n("nextn.eh_proj.weight"), {2 * n_embd, n_embd});
  mtp_.enorm = wl.require_f32(n("nextn.enorm.weight"), {n_embd});
  mtp_.hnorm = wl.require_f32(n("nextn.hnorm.weight"), {n_embd});
  // DeepSeek's MTP shares the embedding and the output head with the model: a separate file's
  // token_embd and output are the converter's copies, and reading them would double those
  // resident weights (2 GiB for V4-Flash). Its output_norm is the MTP head's (sizing.h,
  // mtp_reads_tensor).
  mtp_.shared_head_norm = wl.optional_f32(n("nextn.shared_head_norm.weight"), {n_embd});
  if (!mtp_.shared_head_norm && separate)
    mtp_.shared_head_norm = wl.optional_f32("output_norm.weight", {n_embd});
  if (!mtp_.shared_head_norm) mtp_.shared_head_norm = output_norm_;
  mtp_.embed = wl.optional(n("nextn.embed_tokens.weight"), {n_embd, hp_.n_vocab});
  if (!mtp_.embed) mtp_.embed = token_embd_;
  mtp_.head = wl.optional(n("nextn.shared_head_head.weight"), {n_embd, hp_.n_vocab});
  if (!mtp_.head) mtp_.head = output_;
  if (static_cast<int>(expert_layout_.layers.size()) <= il) expert_layout_.layers.resize(il + 1);
  load_mtp_layer(file, wl, il);
  mtp_loaded_ = true;
}

std::unique_ptr<KvCache> Model::make_mtp_kv_cache(int n_ctx, const KvCacheConfig& config) const {
  if (!mtp_loaded_) fail("internal: MTP KV cache asked for without a loaded MTP block");
  if (static_cast<int>(kv_shape_.layers.size()) <= hp_.n_layer)
    fail("internal: the {} model has no KV shape for its MTP block (blk.{})", hp_.arch,
         hp_.n_layer);
  std::vector<KvLayerShape> layers(hp_.n_layer + 1);
  layers[hp_.n_layer] = kv_shape_.layers[hp_.n_layer];
  return std::make_unique<KvCache>(std::move(layers), n_ctx, config);
}

void Model::mtp_hidden_rows(ThreadPool& pool, const float* x, int64_t n, float* out) const {
  if (residual_streams() == 1) return head_rows(pool, x, n, out);
  std::copy_n(x, n * hidden_width(), out);
}

void Model::mtp_head_input(ThreadPool&, const float* x, int64_t n, float* h) const {
  std::copy_n(x, n * hp_.n_embd, h);
}

void Model::forward_mtp(ThreadPool& pool, const Batch& batch, const float* hidden, KvCache& kv,
                        ExpertStore& experts, std::vector<float>& out_hidden,
                        std::vector<float>& logits, const ActivationHook* hook) {
  if (!mtp_loaded_) fail("internal: forward_mtp without a loaded MTP block");
  const int64_t n_tok = batch.size();
  const int64_t n_embd = hp_.n_embd;
  const int S = residual_streams();
  const int il = hp_.n_layer;
  const std::map<int32_t, int32_t> seq_end = reserve_batch(batch, kv);

  // Each stream of each row: [enorm(embedding of the next token); hnorm(stream)], embedding
  // first as vLLM's deepseek_mtp and llama.cpp concatenate them, then eh_proj.
  std::vector<float> cat(n_tok * S * 2 * n_embd), e(n_embd);
  const uint64_t row = mtp_.embed.row_bytes();
  for (int64_t t = 0; t < n_tok; ++t) {
    dequantize_row(mtp_.embed.type, mtp_.embed.data + row * batch.tokens[t], e.data(), n_embd);
    rmsnorm(e.data(), mtp_.enorm.f32(), e.data(), n_embd, hp_.rms_eps);
    for (int s = 0; s < S; ++s) {
      float* c = cat.data() + (t * S + s) * 2 * n_embd;
      std::copy(e.begin(), e.end(), c);
      rmsnorm(hidden + (t * S + s) * n_embd, mtp_.hnorm.f32(), c + n_embd, n_embd, hp_.rms_eps);
    }
  }
  std::vector<float> x(n_tok * S * n_embd);  // (n_tok, S, n_embd) the block's residual streams
  matmul(pool, mtp_.eh_proj.mat(), cat.data(), n_tok * S, x.data());

  ForwardContext ctx{pool, batch, kv, experts, n_tok, hook};
  ctx.ffn_rows = batch.want_logits.data();
  begin_mtp_forward(ctx);
  ctx.dump("mtp_eh_proj", il, x.data(), S * n_embd);
  layer(ctx, il, x.data());
  ctx.issue_lookahead();
  ctx.dump("l_out", il, x.data(), S * n_embd);
  for (const auto& [s, end] : seq_end) kv.set_length(s, std::max(kv.length(s), end));

  std::vector<float> h(n_tok * n_embd);  // (n_tok, n_embd) what the MTP head sees
  mtp_head_input(pool, x.data(), n_tok, h.data());
  for (int64_t t = 0; t < n_tok; ++t)
    rmsnorm(h.data() + t * n_embd, mtp_.shared_head_norm.f32(), h.data() + t * n_embd, n_embd,
            hp_.rms_eps);
  const std::vector<float> rows = logit_rows(batch, h, n_embd);
  const int64_t n_out = static_cast<int64_t>(rows.size()) / n_embd;
  logits.resize(n_out * hp_.n_vocab);
  if (n_out > 0) matmul(pool, mtp_.head.mat(), rows.data(), n_out, logits.data());
  out_hidden = S == 1 ? std::move(h) : std::move(x);
}

void Model::head_rows(ThreadPool& pool, const float* x, int64_t n, float* y) const {
  const int64_t n_embd = hp_.n_embd;
  head_input(pool, x, n, y);
  for (int64_t t = 0; t < n; ++t)
    rmsnorm(y + t * n_embd, output_norm_.f32(), y + t * n_embd, n_embd, hp_.rms_eps);
}

void Model::head_input(ThreadPool&, const float* x, int64_t n, float* h) const { std::copy_n(x, n * hp_.n_embd, h); }

void Model::set_lookahead(int il, const Tensor& norm, const Tensor& gate_inp, const Tensor& exp_probs_b) {
  if (lookahead_.size() < static_cast<size_t>(hp_.n_layer)) lookahead_.resize(hp_.n_layer);
  lookahead_[il] = {norm, gate_inp, exp_probs_b};
}

void Model::prefetch_next(ForwardContext& ctx, int il, const float* x) {
  const int next = il + 1;
  const bool tapped = ctx.routing && ctx.routing->wants_predictions();
  // The next stage's layers are streamed by that stage's own store.
  if ((!prefetch_ && !tapped) || next >= layer_end() ||
      next >= static_cast<int>(lookahead_.size()) || !lookahead_[next].gate_inp)
    return;
  const LookaheadRouter& r = lookahead_[next];
  const int64_t n_embd = hp_.n_embd;
  const int n_exp = static_cast<int>(r.gate_inp.ne[1]);
  const int k = hp_.n_expert_used;
  std::vector<float> xn(ctx.n_tok * n_embd), logits(ctx.n_tok * n_exp);
  for (int64_t t = 0; t < ctx.n_tok; ++t) rmsnorm(x + t * n_embd, r.norm.f32(), xn.data() + t * n_embd, n_embd, hp_.rms_eps);
  matmul(ctx.pool, r.gate_inp.mat(), xn.data(), ctx.n_tok, logits.data());
  // Every gate score is monotonic in the logit, so the top-k of the logits is the predicted choice
  // unless a selection bias is added to the scores (DeepSeek V3/V4, GLM): then score with
  // gate_scores() and rank as route() does, less the group limit.
  std::vector<int32_t> ranked(ctx.n_tok * k);  // (n_tok, k) each token's prediction, best first
  std::vector<int32_t> order(n_exp);
  std::vector<float> scores(n_exp);
  for (int64_t t = 0; t < ctx.n_tok; ++t) {
    float* l = logits.data() + t * n_exp;
    if (r.exp_probs_b) {
      gate_scores(hp_.gating, l, scores.data(), n_exp);
      std::copy_n(scores.data(), n_exp, l);
      add_inplace(l, r.exp_probs_b.f32(), n_exp);
    }
    for (int e = 0; e < n_exp; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::copy_n(order.begin(), k, ranked.begin() + t * k);
  }
  if (ctx.routing) ctx.routing->predicted(next, k, ranked.data());
  if (!prefetch_) return;
  // One token: its top-k in rank order, so the store can weigh each rank by its measured
  // precision. Several tokens: the union.
  std::vector<int32_t> ids;
  if (ctx.n_tok == 1) {
    ids = std::move(ranked);
  } else {
    std::vector<uint8_t> chosen(n_exp, 0);
    for (const int32_t e : ranked) chosen[e] = 1;
    for (int e = 0; e < n_exp; ++e)
      if (chosen[e]) ids.push_back(e);
  }
  ctx.lookahead = {next, std::move(ids), ctx.n_tok == 1 ? PrefetchHint::kRanked : PrefetchHint::kSet};
}

}  // namespace sluice
