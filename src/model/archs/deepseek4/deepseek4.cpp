// DeepSeek V4 (`deepseek4`, DeepSeek-V4-Flash). The residual is 4 hyper-connection streams
// (hyper_connections.h); per layer: mix → RMSNorm → attention (ds4_attention.h: q LoRA, one
// shared K=V head, window + compressed rows + sink) → spread back, mix → RMSNorm → MoE (sqrt-
// softplus router with selection bias, or the token id's fixed experts in the first
// hash_layer_count layers; clamped SwiGLU experts plus a clamped shared expert) → spread back.
// The head collapses the streams with its own mixer before the final norm. Layer kinds follow
// attention.compress_ratios: 0 (window only, plain RoPE), 4 (pooled rows with overlap chosen by
// the lightning indexer) and 128 (all pooled rows); compressed layers use their own RoPE base with
// YaRN. The KV cache is kv/ds4_cache.h. The MTP block comes from the separate GGUF the converter
// writes (--mtp FILE): one window-only, non-hash layer on streams built from the main model's final
// streams, with its own head mixer (deepseek4.md §4.8).
#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kv/ds4_cache.h"
#include "model/blocks.h"
#include "model/model.h"
#include "model/archs/deepseek4/ds4_attention.h"
#include "model/archs/deepseek4/hyper_connections.h"
#include "model/weights.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "quant/dequant.h"

namespace sluice {

namespace {

int key_int(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi) fail("metadata key '{}' is {}, expected {}..{}", key, v, lo, hi);
  return static_cast<int>(v);
}

// A per-layer float array that may carry extra (MTP) entries; absent: `fallback` for every layer.
std::vector<float> layer_floats(const gguf::File& f, const std::string& key, int n_layer,
                                const std::vector<float>& fallback) {
  if (!f.has(key)) return fallback;
  std::vector<float> v = f.get_float_array(key);
  if (static_cast<int>(v.size()) < n_layer)
    fail("metadata key '{}' has {} entries, expected at least {}", key, v.size(), n_layer);
  v.resize(n_layer);
  return v;
}

class DeepSeek4 final : public Model {
 public:
  // The router's sqrt(softplus) where the file does not name its gating.
  explicit DeepSeek4(const gguf::File& f)
      : Model(read_hparams(f, {.gating = GatingFunc::kSqrtSoftplus})) {
    const std::string a = hp_.arch + ".";
    // An MTP block (its own nextn.* tensors), when a file counts it in block_count, is not a layer
    // of the main model.
    const int64_t n_mtp = hp_.n_nextn;
    if (n_mtp < 0 || n_mtp >= hp_.n_layer)
      fail("metadata key '{}nextn_predict_layers' is {}, expected 0..{}", a, n_mtp,
           hp_.n_layer - 1);
    if (n_mtp > 0 &&
        f.find_tensor(WeightLoader::layer_name(hp_.n_layer - 1, "nextn.eh_proj.weight")))
      hp_.n_layer -= static_cast<int>(n_mtp);
    if (n_mtp > 0 && !f.find_tensor(WeightLoader::layer_name(0, "attn_norm.weight")))
      fail(
          "this file holds only DeepSeek V4's MTP block ({}nextn_predict_layers {}, no layer 0): "
          "load the model and give this file with --mtp",
          a, n_mtp);
    const int L = hp_.n_layer;
    H_ = hp_.n_head[0];
    for (int il = 0; il < L; ++il)
      if (hp_.n_head[il] != H_ || hp_.n_head_kv[il] != 1)
        fail("deepseek4: layer {} has {} heads and {} KV heads, expected {} and 1", il,
             hp_.n_head[il], hp_.n_head_kv[il], H_);
    D_ = hp_.head_dim_k;
    if (hp_.head_dim_v != D_)
      fail("deepseek4: key_length {} and value_length {} must be equal (K is V)", D_,
           hp_.head_dim_v);
    const int R = hp_.rope.n_rot;
    if (R >= D_) fail("deepseek4: rope.dimension_count {} must be below the head size {}", R, D_);
    Q_ = key_int(f, a + "attention.q_lora_rank", 1, 1 << 20);
    G_ = key_int(f, a + "attention.output_group_count", 1, H_);
    if (H_ % G_) fail("deepseek4: {} heads cannot form {} output groups", H_, G_);
    O_ = key_int(f, a + "attention.output_lora_rank", 1, 1 << 20);
    W_ = key_int(f, a + "attention.sliding_window", 1, 1 << 20);
    hc_.n_streams = static_cast<int>(f.get_int_or(a + "hyper_connection.count", 4));
    if (hc_.n_streams < 1 || hc_.n_streams > 8)
      fail("metadata key '{}hyper_connection.count' is {}, expected 1..8", a, hc_.n_streams);
    hc_.n_iter = static_cast<int>(f.get_int_or(a + "hyper_connection.sinkhorn_iterations", 20));
    if (hc_.n_iter < 1)
      fail("metadata key '{}hyper_connection.sinkhorn_iterations' is {}, expected ≥ 1", a,
           hc_.n_iter);
    hc_.eps = static_cast<float>(f.get_float_or(a + "hyper_connection.epsilon", 1e-6));
    hc_.rms_eps = hp_.rms_eps;

    const std::vector<int64_t>& ratios = hp_.compress_ratios;
    if (ratios.empty()) fail("metadata key '{}attention.compress_ratios' is missing", a);
    if (static_cast<int>(ratios.size()) < L)
      fail(
          "metadata key '{}attention.compress_ratios' has {} entries, expected at least "
          "block_count {}",
          a, ratios.size(), L);
    ratio_.resize(L);
    bool any_csa = false;
    for (int il = 0; il < L; ++il) {
      if (ratios[il] != 0 && ratios[il] != 4 && ratios[il] != 128)
        fail("metadata key '{}attention.compress_ratios' has {} for layer {}, expected 0, 4 or 128",
             a, ratios[il], il);
      ratio_[il] = static_cast<int>(ratios[il]);
      any_csa |= ratio_[il] == 4;
    }
    if (any_csa) {
      Ih_ = key_int(f, a + "attention.indexer.head_count", 1, 1 << 16);
      Id_ = hp_.indexer_key_length;
      if (Id_ == 0) fail("metadata key '{}attention.indexer.key_length' is missing", a);
      if (Id_ < R)
        fail("metadata key '{}attention.indexer.key_length' is {}, expected {}..{}", a, Id_, R,
             1 << 16);
      It_ = key_int(f, a + "attention.indexer.top_k", 1, 1 << 30);
    }

    if (hp_.n_expert <= 0 || hp_.n_ff_exp <= 0)
      fail("deepseek4: needs {}expert_count and {}expert_feed_forward_length", a, a);
    if (hp_.gating != GatingFunc::kSqrtSoftplus)
      fail("metadata key '{}expert_gating_func' must be 4 (sqrt(softplus))", a);
    n_hash_ = static_cast<int>(f.get_int_or(a + "hash_layer_count", 0));
    if (n_hash_ < 0 || n_hash_ > L)
      fail("metadata key '{}hash_layer_count' is {}, expected 0..{}", a, n_hash_, L);
    clamp_exp_ = layer_floats(f, a + "swiglu_clamp_exp", L, std::vector<float>(L, 0.0f));
    clamp_shexp_ = layer_floats(f, a + "swiglu_clamp_shexp", L, clamp_exp_);
    rc_ = router_config(hp_);
    rc_.n_groups = rc_.n_groups_used = 0;

    // RoPE regimes: window-only layers plain; compressed layers their own base with YaRN.
    TailRopeParams plain{R, hp_.rope.freq_base, false, 1.0f, 0};
    TailRopeParams comp{R,
                        static_cast<float>(f.get_float_or(a + "attention.compress_rope_freq_base",
                                                          hp_.rope.freq_base)),
                        hp_.rope.scaling == RopeScaling::kYarn, 1.0f / hp_.rope.freq_scale,
                        hp_.rope.n_ctx_orig};
    rope_plain_ = std::make_unique<TailRope>(plain);
    rope_comp_ = std::make_unique<TailRope>(comp);

    load_embedding_and_head(f);
    WeightLoader wl(f);
    head_hc_ = load_head_mixer(wl);
    layers_.resize(L);
    expert_layout_.n_expert = hp_.n_expert;
    expert_layout_.layers.resize(L);
    for (int il = 0; il < L; ++il) {
      load_layer(wl, il, layers_[il]);
      if (il >= n_hash_)
        set_lookahead(il, layers_[il].ffn_norm, layers_[il].router.gate_inp,
                      layers_[il].router.exp_probs_b);
    }
  }

  // The cache's sizes are the architecture's KV rule (Model::kv_shape, the planner's): its main
  // layers' ratios (a loaded MTP block's entry in ratio_ is not theirs), stored as the key type.
  std::unique_ptr<KvCache> make_kv_cache(int n_ctx, const KvCacheConfig& config) const override {
    Ds4CacheShape shape = stated_shape(config);
    if (static_cast<int>(shape.ratio.size()) < hp_.n_layer)
      fail("internal: deepseek4's KV shape has {} layers, the model {}", shape.ratio.size(),
           hp_.n_layer);
    shape.ratio.resize(hp_.n_layer);
    return std::make_unique<Ds4KvCache>(std::move(shape), n_ctx);
  }

  // The MTP block's window ring alone: the main layers' entries are absent.
  std::unique_ptr<KvCache> make_mtp_kv_cache(int n_ctx,
                                             const KvCacheConfig& config) const override {
    if (!mtp_loaded()) fail("internal: MTP KV cache asked for without a loaded MTP block");
    Ds4CacheShape shape = stated_shape(config);
    shape.ratio.assign(hp_.n_layer + 1, Ds4CacheShape::kAbsent);
    shape.ratio[hp_.n_layer] = 0;
    return std::make_unique<Ds4KvCache>(std::move(shape), n_ctx);
  }

 protected:
  int residual_streams() const override { return hc_.n_streams; }

  // The MTP block is a window-only (ratio 0), selection-routed layer after the main ones, with
  // its own head mixer; its SwiGLU clamps are the MTP file's entries for its index when the
  // arrays have them, else the main model's last layer's.
  void load_mtp_layer(const gguf::File& f, const WeightLoader& wl, int il) override {
    const std::string a = hp_.arch + ".";
    ratio_.resize(il + 1);
    ratio_[il] = 0;
    clamp_exp_ = layer_floats(f, a + "swiglu_clamp_exp", il + 1,
                              std::vector<float>(il + 1, clamp_exp_.back()));
    clamp_shexp_ = layer_floats(f, a + "swiglu_clamp_shexp", il + 1,
                                std::vector<float>(il + 1, clamp_shexp_.back()));
    layers_.resize(il + 1);
    load_layer(wl, il, layers_[il]);
    mtp_head_hc_ = load_head_mixer(wl);
  }

  void begin_mtp_forward(ForwardContext& ctx) override { begin_cache_step(ctx); }

  void mtp_head_input(ThreadPool& pool, const float* x, int64_t n, float* h) const override {
    hc_pre(pool, hc_, mtp_head_hc_, x, n, hp_.n_embd, h, nullptr, nullptr);
  }

  void begin_forward(ForwardContext& ctx) override {
    begin_cache_step(ctx);
    // Hash layers know their experts from the token ids: ask the store for them before any layer.
    const int K = hp_.n_expert_used;
    for (int il = 0; il < n_hash_; ++il) {
      std::vector<uint8_t> used(hp_.n_expert, 0);
      const int32_t* table = reinterpret_cast<const int32_t*>(layers_[il].router.tid2eid.data);
      for (int64_t t = 0; t < ctx.n_tok; ++t)
        for (int k = 0; k < K; ++k) {
          const int32_t e = table[static_cast<int64_t>(ctx.batch.tokens[t]) * K + k];
          if (e >= 0 && e < hp_.n_expert) used[e] = 1;
        }
      std::vector<int32_t> ids;
      for (int e = 0; e < hp_.n_expert; ++e)
        if (used[e]) ids.push_back(e);
      ctx.experts.prefetch(il, ids, PrefetchHint::kCertain);
    }
  }

  void layer(ForwardContext& ctx, int il, float* x) override {
    const Layer& ly = layers_[il];
    const int64_t n = ctx.n_tok, d = hp_.n_embd;
    const int S = hc_.n_streams;
    std::vector<float> a(n * d), xn(n * d), f(n * d), post(n * S), comb(n * S * S);
    hc_pre(ctx.pool, hc_, ly.hc_attn, x, n, d, a.data(), post.data(), comb.data());
    for (int64_t t = 0; t < n; ++t)
      rmsnorm(a.data() + t * d, ly.attn_norm.f32(), xn.data() + t * d, d, hp_.rms_eps);
    ctx.dump("attn_norm", il, xn.data(), d);
    ds4_attention(ctx, il, ly.attn, ly.cfg, xn.data(), f.data());
    hc_post(hc_, f.data(), post.data(), comb.data(), n, d, x);

    hc_pre(ctx.pool, hc_, ly.hc_ffn, x, n, d, a.data(), post.data(), comb.data());
    for (int64_t t = 0; t < n; ++t)
      rmsnorm(a.data() + t * d, ly.ffn_norm.f32(), xn.data() + t * d, d, hp_.rms_eps);
    ctx.dump("ffn_norm", il, xn.data(), d);
    prefetch_next(ctx, il, a.data());
    const int K = rc_.n_used;
    std::vector<int32_t> ids(n * K);
    std::vector<float> wts(n * K);
    route(ctx, il, ly.router, rc_, xn.data(), ids.data(), wts.data());
    moe_experts(ctx, il, ids.data(), wts.data(), K, ExpertActivation::kSwigluClamp, xn.data(),
                f.data(), clamp_exp_[il]);
    if (ly.shexp.gate) {
      const int64_t fs = ly.shexp.gate.ne[1];
      std::vector<float> g(n * fs), u(n * fs), sh(n * d);
      matmul(ctx.pool, ly.shexp.gate.mat(), xn.data(), n, g.data());
      matmul(ctx.pool, ly.shexp.up.mat(), xn.data(), n, u.data());
      swiglu_clamped(g.data(), u.data(), n * fs, clamp_shexp_[il]);
      matmul(ctx.pool, ly.shexp.down.mat(), g.data(), n, sh.data());
      add_inplace(f.data(), sh.data(), n * d);
    }
    ctx.dump("ffn_out", il, f.data(), d);
    hc_post(hc_, f.data(), post.data(), comb.data(), n, d, x);
  }

  void head_input(ThreadPool& pool, const float* x, int64_t n, float* h) const override {
    hc_pre(pool, hc_, head_hc_, x, n, hp_.n_embd, h, nullptr, nullptr);
  }

 private:
  // kv_shape()'s compressed cache with `config`'s row type, once checked against the sizes the
  // layers attend with (read from the same keys, so only a broken rule can fail it).
  Ds4CacheShape stated_shape(const KvCacheConfig& config) const {
    if (!kv_shape().compressed)
      fail("internal: deepseek4 model without its KV shape (load it with load_model)");
    Ds4CacheShape s = *kv_shape().compressed;
    const bool same_ratios =
        s.ratio.size() >= static_cast<size_t>(hp_.n_layer) &&
        std::equal(s.ratio.begin(), s.ratio.begin() + hp_.n_layer, ratio_.begin());
    if (!same_ratios || s.head_dim != D_ || s.index_dim != Id_ || s.window != W_)
      fail("internal: deepseek4's KV shape (D={} Id={} W={}) is not its layers' (D={} Id={} W={})",
           s.head_dim, s.index_dim, s.window, D_, Id_, W_);
    s.type = ds4_row_type(config);
    return s;
  }

  struct Layer {
    HcWeights hc_attn, hc_ffn;
    Tensor attn_norm;  // (d)
    Ds4AttentionWeights attn;
    Ds4AttentionConfig cfg;
    Tensor ffn_norm;  // (d)
    RouterWeights router;
    FfnWeights shexp;  // gate/up (d, F·Ns), down (F·Ns, d)
  };

  // Every sequence of the batch continues its cache; its rings are in flight until set_length.
  static void begin_cache_step(ForwardContext& ctx) {
    auto* kv = dynamic_cast<Ds4KvCache*>(&ctx.kv);
    if (!kv) fail("internal: deepseek4 needs its own KV cache (Model::make_kv_cache)");
    std::vector<int> seen;
    for (int64_t t = 0; t < ctx.n_tok; ++t) {
      const int s = ctx.batch.seq[t];
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      if (ctx.batch.pos[t] != ctx.kv.length(s))
        fail("deepseek4: sequence {} continues at position {} but its cache holds {} positions", s,
             ctx.batch.pos[t], ctx.kv.length(s));
    }
    for (int s : seen) kv->begin_step(s);
  }

  // The head's hyper-connection mixer (output_hc_*): the model's, or the MTP block's own.
  HcWeights load_head_mixer(const WeightLoader& wl) const {
    const int S = hc_.n_streams;
    return {wl.require("output_hc_fn.weight", {S * hp_.n_embd, S}),
            wl.require_f32("output_hc_base.weight", {S}),
            wl.require_f32("output_hc_scale.weight", {1})};
  }

  // Layer il's tensors as `wl` declares them (the model's file, or the MTP file for the MTP
  // block); its routed experts go into expert_layout_.layers[il].
  void load_layer(const WeightLoader& wl, int il, Layer& ly) {
    auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
    const int S = hc_.n_streams;
    const int64_t d = hp_.n_embd, n_mix = (2 + S) * S, Q = Q_;
    const int64_t E = hp_.n_expert, K = hp_.n_expert_used, F = hp_.n_ff_exp;
    const int r = ratio_[il];
    ly.hc_attn = {wl.require(n("hc_attn_fn.weight"), {S * d, n_mix}),
                  wl.require_f32(n("hc_attn_base.weight"), {n_mix}),
                  wl.require_f32(n("hc_attn_scale.weight"), {3})};
    ly.hc_ffn = {wl.require(n("hc_ffn_fn.weight"), {S * d, n_mix}),
                 wl.require_f32(n("hc_ffn_base.weight"), {n_mix}),
                 wl.require_f32(n("hc_ffn_scale.weight"), {3})};
    ly.attn_norm = wl.require_f32(n("attn_norm.weight"), {d});
    Ds4AttentionWeights& A = ly.attn;
    A.wq_a = wl.require(n("attn_q_a.weight"), {d, Q});
    A.q_a_norm = wl.require_f32(n("attn_q_a_norm.weight"), {Q});
    A.wq_b = wl.require(n("attn_q_b.weight"), {Q, int64_t{H_} * D_});
    A.wkv = wl.require(n("attn_kv.weight"), {d, D_});
    A.kv_norm = wl.require_f32(n("attn_kv_a_norm.weight"), {D_});
    A.sinks = wl.require_f32(n("attn_sinks.weight"), {H_});
    A.wo_a = wl.require(n("attn_output_a.weight"), {int64_t{H_} * D_ / G_, int64_t{G_} * O_});
    A.wo_b = wl.require(n("attn_output_b.weight"), {int64_t{G_} * O_, d});
    if (r != 0) A.comp = load_compressor(wl, il, "attn_compressor_", r, d, D_);
    if (r == 4) {
      A.idx_q_b = wl.require(n("indexer.attn_q_b.weight"), {Q, int64_t{Ih_} * Id_});
      A.idx_proj = wl.require(n("indexer.proj.weight"), {d, Ih_});
      A.icomp = load_compressor(wl, il, "indexer_compressor_", 4, d, Id_);
    }
    Ds4AttentionConfig& C = ly.cfg;
    C = {r,
         H_,
         D_,
         G_,
         O_,
         W_,
         Ih_,
         Id_,
         It_,
         hp_.rms_eps,
         r == 0 ? rope_plain_.get() : rope_comp_.get()};

    ly.ffn_norm = wl.require_f32(n("ffn_norm.weight"), {d});
    ly.router.gate_inp = wl.require(n("ffn_gate_inp.weight"), {d, E});
    if (il < n_hash_) {
      ly.router.tid2eid = wl.require(n("ffn_gate_tid2eid.weight"), {K, hp_.n_vocab});
      if (ly.router.tid2eid.type != GgmlType::I32)
        fail("tensor '{}' has type {}, expected I32", n("ffn_gate_tid2eid.weight"),
             type_name(ly.router.tid2eid.type));
    } else {
      ly.router.exp_probs_b = wl.optional_f32(n("exp_probs_b.bias"), {E});
    }
    expert_layout_.layers[il] = load_merged_experts(wl, il, d, F, E);
    if (hp_.n_expert_shared > 0)
      ly.shexp = load_swiglu(wl, il, "_shexp", d, F * hp_.n_expert_shared);
  }

  // blk.N.<prefix>{kv,gate,ape,norm}.weight of a compressor of width w (c = 2 channel groups at
  // ratio 4).
  static Ds4CompressorWeights load_compressor(const WeightLoader& wl, int il,
                                              const std::string& prefix, int r, int64_t d,
                                              int64_t w) {
    auto n = [&](const char* what) {
      return WeightLoader::layer_name(il, (prefix + what).c_str());
    };
    const int64_t cw = Ds4CacheShape::state_width(r) * w;
    Ds4CompressorWeights c;
    c.kv = wl.require(n("kv.weight"), {d, cw});
    c.gate = wl.require(n("gate.weight"), {d, cw});
    const Tensor ape = wl.require(n("ape.weight"), {cw, r});
    c.ape.resize(static_cast<size_t>(r) * cw);
    for (int p = 0; p < r; ++p)
      dequantize_row(ape.type, ape.data + p * ape.row_bytes(), c.ape.data() + p * cw, cw);
    c.norm = wl.require_f32(n("norm.weight"), {w});
    return c;
  }

  HcConfig hc_;
  HcWeights head_hc_, mtp_head_hc_;
  int H_ = 0, D_ = 0, Q_ = 0, G_ = 0, O_ = 0, W_ = 0, Ih_ = 0, Id_ = 0, It_ = 0, n_hash_ = 0;
  std::vector<int> ratio_;
  std::vector<float> clamp_exp_, clamp_shexp_;
  RouterConfig rc_;
  std::unique_ptr<TailRope> rope_plain_, rope_comp_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> load_deepseek4(const gguf::File& file) {
  return std::make_unique<DeepSeek4>(file);
}

}  // namespace sluice
