// Shared transformer blocks; see blocks.h. Buffers are per call: allocation is negligible next to
// the matmuls, and it keeps blocks reentrant for batched multi-sequence steps.
#include "model/blocks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace sluice {

void linear(ForwardContext& ctx, const Tensor& w, const Tensor& b, const float* x, float* y) {
  matmul(ctx.pool, w.mat(), x, ctx.n_tok, y);
  if (b) {
    const int64_t n_out = w.ne[1];
    for (int64_t t = 0; t < ctx.n_tok; ++t) add_inplace(y + t * n_out, b.f32(), n_out);
  }
}

void attention_block(ForwardContext& ctx, int il, const AttentionWeights& w, const AttentionConfig& c, float* x) {
  const int64_t n_tok = ctx.n_tok;
  const int64_t n_embd = w.norm.ne[0];
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim_k;
  const int64_t k_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim_k;
  const int64_t v_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim_v;
  // The cache is laid out by the architecture's KV rule (Model::kv_shape), the layer by its
  // hparams: a disagreement would store rows of the wrong width.
  const KvLayerShape& cs = ctx.kv.shape(il);
  if (cs.n_head != c.n_head_kv || cs.head_dim_k != c.head_dim_k || cs.head_dim_v != c.head_dim_v ||
      cs.window != c.window)
    fail(
        "internal: layer {} KV cache holds {} heads of {}/{} floats (window {}), attention needs "
        "{} of {}/{} (window {})",
        il, cs.n_head, cs.head_dim_k, cs.head_dim_v, cs.window, c.n_head_kv, c.head_dim_k,
        c.head_dim_v, c.window);
  std::vector<float> xn(n_tok * n_embd), q(n_tok * q_dim), k(n_tok * k_dim), v(n_tok * v_dim);
  for (int64_t t = 0; t < n_tok; ++t) rmsnorm(x + t * n_embd, w.norm.f32(), xn.data() + t * n_embd, n_embd, c.eps);
  ctx.dump("attn_norm", il, xn.data(), n_embd);
  linear(ctx, w.wq, w.bq, xn.data(), q.data());
  linear(ctx, w.wk, w.bk, xn.data(), k.data());
  linear(ctx, w.wv, w.bv, xn.data(), v.data());
  for (int64_t t = 0; t < n_tok; ++t) {
    float* qt = q.data() + t * q_dim;
    float* kt = k.data() + t * k_dim;
    if (w.q_norm)
      for (int h = 0; h < c.n_head; ++h) rmsnorm(qt + h * c.head_dim_k, w.q_norm.f32(), qt + h * c.head_dim_k, c.head_dim_k, c.eps);
    if (w.k_norm)
      for (int h = 0; h < c.n_head_kv; ++h) rmsnorm(kt + h * c.head_dim_k, w.k_norm.f32(), kt + h * c.head_dim_k, c.head_dim_k, c.eps);
    const int32_t pos = ctx.batch.pos[t];
    c.rope->apply(qt, c.n_head, c.head_dim_k, pos);
    c.rope->apply(kt, c.n_head_kv, c.head_dim_k, pos);
    ctx.kv.store(ctx.batch.seq[t], il, pos, kt, v.data() + t * v_dim);
  }
  ctx.dump("Qcur", il, q.data(), q_dim);
  ctx.dump("Kcur", il, k.data(), k_dim);
  ctx.dump("Vcur", il, v.data(), v_dim);

  AttentionParams ap;
  ap.n_head = c.n_head;
  ap.n_head_kv = c.n_head_kv;
  ap.head_dim_k = c.head_dim_k;
  ap.head_dim_v = c.head_dim_v;
  ap.scale = c.scale;
  ap.window = c.window;
  ap.sinks = w.sinks ? w.sinks.f32() : nullptr;
  const int64_t o_dim = static_cast<int64_t>(c.n_head) * c.head_dim_v;
  std::vector<float> attn(n_tok * o_dim), out(n_tok * n_embd);
  attention(ctx.pool, ap, ctx.kv, il, q.data(), ctx.batch.seq.data(), ctx.batch.pos.data(), n_tok, attn.data());
  ctx.dump("kqv_out", il, attn.data(), o_dim);
  linear(ctx, w.wo, w.bo, attn.data(), out.data());
  ctx.dump("attn_out", il, out.data(), n_embd);
  add_inplace(x, out.data(), n_tok * n_embd);
}

void swiglu_ffn(ForwardContext& ctx, int il, const FfnWeights& w, const float* xn, float* out, const char* name) {
  const int64_t n_ff = w.gate.ne[1];
  std::vector<float> g(ctx.n_tok * n_ff), u(ctx.n_tok * n_ff);
  matmul_pair(ctx.pool, w.gate.mat(), w.up.mat(), xn, ctx.n_tok, g.data(), u.data());
  swiglu(g.data(), u.data(), g.data(), ctx.n_tok * n_ff);
  matmul(ctx.pool, w.down.mat(), g.data(), ctx.n_tok, out);
  ctx.dump(name, il, out, w.down.ne[1]);
}

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// log(1 + eˣ) without overflow.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Indices of the k largest values, largest first; ties keep the lower index first.
void top_k(const float* v, int n, int k, int32_t* out) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  std::copy_n(idx.begin(), k, out);
}

}  // namespace

void gate_scores(GatingFunc g, const float* logits, float* scores, int n) {
  switch (g) {
    case GatingFunc::kSoftmax:
      std::copy_n(logits, n, scores);
      softmax(scores, n);
      break;
    case GatingFunc::kSigmoid:
      for (int e = 0; e < n; ++e) scores[e] = sigmoid(logits[e]);
      break;
    case GatingFunc::kSoftmaxWeight:
      std::copy_n(logits, n, scores);
      break;
    case GatingFunc::kSqrtSoftplus:
      for (int e = 0; e < n; ++e) scores[e] = std::sqrt(softplus(logits[e]));
      break;
  }
}

void swiglu_clamped(float* g, const float* u, int64_t n, float limit) {
  if (limit <= 1e-6f) return swiglu(g, u, g, n);
  for (int64_t i = 0; i < n; ++i) g[i] = silu(std::min(g[i], limit)) * std::clamp(u[i], -limit, limit);
}

void route(ForwardContext& ctx, int il, const RouterWeights& w, const RouterConfig& c, const float* xn,
           int32_t* ids, float* weights) {
  const int n_exp = c.n_expert;
  std::vector<float> logits(ctx.n_tok * n_exp);
  linear(ctx, w.gate_inp, w.gate_inp_b, xn, logits.data());
  ctx.dump("ffn_moe_logits", il, logits.data(), n_exp);
  std::vector<float> probs(n_exp), select(n_exp);
  for (int64_t t = 0; t < ctx.n_tok; ++t) {
    const float* lt = logits.data() + t * n_exp;
    gate_scores(c.gating, lt, probs.data(), n_exp);
    int32_t* it = ids + t * c.n_used;
    float* wt = weights + t * c.n_used;
    if (w.tid2eid) {
      // Hash routing: the token id fixes the experts; the router still weights them.
      const int32_t* fixed = reinterpret_cast<const int32_t*>(w.tid2eid.data) + static_cast<int64_t>(ctx.batch.tokens[t]) * c.n_used;
      for (int k = 0; k < c.n_used; ++k) {
        if (fixed[k] < 0 || fixed[k] >= n_exp) fail("layer {}: tid2eid maps token {} to expert {}, expected 0..{}", il, ctx.batch.tokens[t], fixed[k], n_exp - 1);
        it[k] = fixed[k];
      }
    }
    for (int e = 0; e < n_exp; ++e) select[e] = probs[e] + (w.exp_probs_b ? w.exp_probs_b.f32()[e] : 0.0f);
    if (c.n_groups > 1 && c.n_groups_used < c.n_groups) {
      // Group-limited routing: a group scores the sum of its two best selection values; experts
      // outside the best n_groups_used groups cannot be chosen.
      const int per_group = n_exp / c.n_groups;
      std::vector<float> group_score(c.n_groups);
      for (int g = 0; g < c.n_groups; ++g) {
        int32_t best[2];
        top_k(select.data() + g * per_group, per_group, std::min(2, per_group), best);
        group_score[g] = select[g * per_group + best[0]] + (per_group > 1 ? select[g * per_group + best[1]] : 0.0f);
      }
      std::vector<int32_t> keep(c.n_groups_used);
      top_k(group_score.data(), c.n_groups, c.n_groups_used, keep.data());
      std::vector<bool> allowed(c.n_groups, false);
      for (int32_t g : keep) allowed[g] = true;
      for (int e = 0; e < n_exp; ++e)
        if (!allowed[e / per_group]) select[e] = -std::numeric_limits<float>::infinity();
    }
    if (!w.tid2eid) top_k(select.data(), n_exp, c.n_used, it);
    for (int k = 0; k < c.n_used; ++k) wt[k] = probs[it[k]];
    if (c.gating == GatingFunc::kSoftmaxWeight) softmax(wt, c.n_used);
    if (c.norm) {
      float sum = 0.0f;
      for (int k = 0; k < c.n_used; ++k) sum += wt[k];
      sum = std::max(sum, 6.103515625e-5f);
      for (int k = 0; k < c.n_used; ++k) wt[k] /= sum;
    }
    if (c.scale != 1.0f)
      for (int k = 0; k < c.n_used; ++k) wt[k] *= c.scale;
  }
  if (ctx.routing) ctx.routing->routed(il, c.n_used, ids);
}

namespace {

// The expert's activation over its m rows of gate (in place) and up projections.
void activate_rows(const ExpertWeights& w, ExpertActivation act, float limit, int64_t m,
                   int64_t n_ff, float* g, float* u) {
  for (int64_t r = 0; r < m; ++r) {
    float* gr = g + r * n_ff;
    float* ur = u + r * n_ff;
    if (w.gate_bias) add_inplace(gr, w.gate_bias, n_ff);
    if (w.up_bias) add_inplace(ur, w.up_bias, n_ff);
    if (act == ExpertActivation::kSwiglu) {
      swiglu(gr, ur, gr, n_ff);
    } else if (act == ExpertActivation::kSwigluClamp) {
      swiglu_clamped(gr, ur, n_ff, limit);
    } else {
      constexpr float kAlpha = 1.702f, kLimit = 7.0f;
      for (int64_t i = 0; i < n_ff; ++i) {
        const float x = std::min(gr[i], kLimit);
        const float y = std::clamp(ur[i], -kLimit, kLimit);
        gr[i] = x / (1.0f + std::exp(-kAlpha * x)) * (y + 1.0f);
      }
    }
  }
}

// The expert's down-projected rows d, biased and weighted, into their (token, slot) rows.
void scatter_rows(const ExpertWeights& w, const std::vector<int32_t>& rows, const float* weights,
                  int64_t n_embd, float* d, float* slot_out) {
  for (size_t r = 0; r < rows.size(); ++r) {
    float* dr = d + r * n_embd;
    if (w.down_bias) add_inplace(dr, w.down_bias, n_embd);
    const float wgt = weights[rows[r]];
    float* so = slot_out + static_cast<int64_t>(rows[r]) * n_embd;
    for (int64_t i = 0; i < n_embd; ++i) so[i] = dr[i] * wgt;
  }
}

// Rows of experts computed per batch when all of a layer's experts are addressable: bounds the
// gathered inputs and projections (~12 KB a row at 2048 wide) while still putting dozens of
// experts in each pool round trip.
constexpr int64_t kExpertBatchRows = 1024;

// All handed experts in batches of up to kExpertBatchRows rows: each batch gathers its rows'
// inputs, runs every expert's gate and up projections in one matmul_tasks round trip, the
// activations in one parallel pass, the down projections in a second round trip, and the scatter
// in a last pass. One expert after another costs two or three pool synchronisations per expert,
// and the serial copies, activations and scatters between them leave the other threads idle.
// An expert's numbers do not depend on its batch: each output is its lone matmul's (same cut).
// Buffers of run_expert_batches, kept across the calls of one layer (a streamed layer makes one
// call per expert).
struct ExpertScratch {
  std::vector<float> xe, g, u, d;
  std::vector<int64_t> first;  // first row of each expert of the batch in xe/g/u/d
  std::vector<MatmulTask> tasks;
};

void run_expert_batches(ForwardContext& ctx,
                        const std::vector<std::pair<int, ExpertWeights>>& handed,
                        const std::vector<std::vector<int32_t>>& rows_of, const float* weights,
                        int n_used, ExpertActivation act, float limit, const float* xn,
                        float* slot_out, ExpertScratch& scratch) {
  const int64_t n_embd = handed[0].second.gate.n_in;
  const int64_t n_ff = handed[0].second.gate.n_out;
  // Named references, not a structured binding: the lambdas below capture them, which clang
  // before 16 (the fuzz build) rejects for bindings.
  std::vector<float> &xe = scratch.xe, &g = scratch.g, &u = scratch.u, &d = scratch.d;
  std::vector<int64_t>& first = scratch.first;
  std::vector<MatmulTask>& tasks = scratch.tasks;
  for (size_t b0 = 0; b0 < handed.size();) {
    size_t b1 = b0;
    int64_t n_rows = 0;
    first.clear();
    while (b1 < handed.size() &&
           (b1 == b0 ||
            n_rows + static_cast<int64_t>(rows_of[handed[b1].first].size()) <= kExpertBatchRows)) {
      first.push_back(n_rows);
      n_rows += static_cast<int64_t>(rows_of[handed[b1].first].size());
      ++b1;
    }
    first.push_back(n_rows);
    const auto n_batch = static_cast<int64_t>(b1 - b0);
    xe.resize(n_rows * n_embd);
    g.resize(n_rows * n_ff);
    u.resize(n_rows * n_ff);
    d.resize(n_rows * n_embd);
    auto rows_at = [&](int64_t e) -> const std::vector<int32_t>& {
      return rows_of[handed[b0 + e].first];
    };
    ctx.pool.parallel_for(n_batch, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        const auto& rows = rows_at(e);
        for (size_t r = 0; r < rows.size(); ++r)
          std::copy_n(xn + (rows[r] / n_used) * n_embd, n_embd,
                      xe.data() + (first[e] + r) * n_embd);
      }
    });
    tasks.clear();
    for (int64_t e = 0; e < n_batch; ++e) {
      const ExpertWeights& w = handed[b0 + e].second;
      const int64_t m = first[e + 1] - first[e];
      tasks.push_back({w.gate, xe.data() + first[e] * n_embd, m, g.data() + first[e] * n_ff});
      tasks.push_back({w.up, xe.data() + first[e] * n_embd, m, u.data() + first[e] * n_ff});
    }
    matmul_tasks(ctx.pool, tasks);
    ctx.pool.parallel_for(n_batch, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e)
        activate_rows(handed[b0 + e].second, act, limit, first[e + 1] - first[e], n_ff,
                      g.data() + first[e] * n_ff, u.data() + first[e] * n_ff);
    });
    tasks.clear();
    for (int64_t e = 0; e < n_batch; ++e) {
      tasks.push_back({handed[b0 + e].second.down, g.data() + first[e] * n_ff,
                       first[e + 1] - first[e], d.data() + first[e] * n_embd});
    }
    matmul_tasks(ctx.pool, tasks);
    ctx.pool.parallel_for(n_batch, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e)
        scatter_rows(handed[b0 + e].second, rows_at(e), weights, n_embd,
                     d.data() + first[e] * n_embd, slot_out);
    });
    b0 = b1;
  }
}

}  // namespace

void moe_experts(ForwardContext& ctx, int il, const int32_t* ids, const float* weights, int n_used,
                 ExpertActivation act, const float* xn, float* out, float limit) {
  const int64_t n_tok = ctx.n_tok;
  // Rows routed to each expert, as (token, slot) pairs; experts listed in first-use order.
  std::vector<int32_t> experts;
  std::vector<std::vector<int32_t>> rows_of;  // parallel to experts: token·n_used + slot
  std::vector<int32_t> where(1, -1);
  // Expert parallel: the process computing each slot (this one, or another that fills it).
  const std::span<const int16_t> slot_rank =
      ctx.shard ? ctx.shard->assign(il, std::span<const int32_t>(ids, n_tok * n_used), n_used,
                                    ctx.ffn_rows)
                : std::span<const int16_t>();
  for (int64_t i = 0; i < n_tok * n_used; ++i) {
    if (ctx.ffn_rows && !ctx.ffn_rows[i / n_used]) continue;
    const int32_t e = ids[i];
    if (ctx.shard && slot_rank[i] != ctx.shard->rank()) continue;  // another process fills it
    if (e >= static_cast<int32_t>(where.size())) where.resize(e + 1, -1);
    if (where[e] < 0) {
      where[e] = static_cast<int32_t>(experts.size());
      experts.push_back(e);
      rows_of.emplace_back();
    }
    rows_of[where[e]].push_back(static_cast<int32_t>(i));
  }

  // Each slot's weighted expert output, summed per token in slot order once all experts ran, so
  // the sum does not depend on the order the store hands experts out. Every slot is written.
  int64_t n_embd = 0;
  float* slot_out = nullptr;  // ctx.reused(PassBuffer::kMoeSlots): (n_tok·n_used, n_embd)
  if (experts.empty() && ctx.ffn_rows && !ctx.shard) {  // no row's output is read: nothing to fetch
    ctx.issue_lookahead();
    return;
  }
  ctx.experts.begin(il, experts);
  ctx.issue_lookahead();
  int index = 0;
  ExpertWeights w;
  // Experts whose weights stay valid until end() run together in batches; a streaming store
  // recycles the previous expert's slot at each handout, so each of its experts is a batch alone.
  std::vector<std::pair<int, ExpertWeights>> handed;
  ExpertScratch scratch;
  auto run = [&] {
    n_embd = handed[0].second.gate.n_in;
    // The same size at every batch of the layer, so the same buffer: earlier batches' slots stay.
    slot_out = ctx.reused(PassBuffer::kMoeSlots, static_cast<size_t>(n_tok * n_used * n_embd));
    run_expert_batches(ctx, handed, rows_of, weights, n_used, act, limit, xn, slot_out, scratch);
    handed.clear();
  };
  const bool together = ctx.experts.handed_weights_persist();
  while (ctx.experts.next(&index, &w)) {
    handed.emplace_back(index, w);
    if (!together) run();
  }
  if (!handed.empty()) run();
  ctx.experts.end();
  if (ctx.shard) {
    // This process may own none of the layer's chosen experts; it still trades slots.
    n_embd = ctx.n_embd;
    slot_out = ctx.reused(PassBuffer::kMoeSlots, static_cast<size_t>(n_tok * n_used * n_embd));
    ctx.shard->exchange(il, slot_rank, n_embd, slot_out);
  }
  if (n_embd == 0) fail("internal: layer {} routed no tokens to any expert", il);
  ctx.pool.parallel_for(n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (ctx.ffn_rows && !ctx.ffn_rows[t]) continue;
      float* o = out + t * n_embd;
      std::copy_n(slot_out + t * n_used * n_embd, n_embd, o);
      for (int k = 1; k < n_used; ++k) add_inplace(o, slot_out + (t * n_used + k) * n_embd, n_embd);
    }
  });
  ctx.dump("ffn_moe_out", il, out, n_embd);
}

RouterConfig router_config(const HParams& hp) {
  RouterConfig rc;
  rc.n_expert = hp.n_expert;
  rc.n_used = hp.n_expert_used;
  rc.gating = hp.gating;
  rc.norm = hp.expert_weights_norm;
  rc.scale = hp.expert_weights_scale;
  rc.n_groups = hp.n_expert_groups;
  rc.n_groups_used = hp.n_group_used;
  return rc;
}

AttentionWeights load_attention(const WeightLoader& wl, int il, int64_t n_embd, int64_t q_dim,
                                int64_t k_dim, int64_t v_dim, int64_t o_dim) {
  auto n = [&](const char* what) { return WeightLoader::layer_name(il, what); };
  AttentionWeights a;
  a.norm = wl.require_f32(n("attn_norm.weight"), {n_embd});
  a.wq = wl.require(n("attn_q.weight"), {n_embd, q_dim});
  a.wk = wl.require(n("attn_k.weight"), {n_embd, k_dim});
  a.wv = wl.require(n("attn_v.weight"), {n_embd, v_dim});
  a.wo = wl.require(n("attn_output.weight"), {o_dim, n_embd});
  return a;
}

FfnWeights load_swiglu(const WeightLoader& wl, int il, const std::string& suffix, int64_t n_embd, int64_t n_ff) {
  auto n = [&](const char* role) { return WeightLoader::layer_name(il, (std::string(role) + suffix + ".weight").c_str()); };
  return {wl.require(n("ffn_gate"), {n_embd, n_ff}), wl.require(n("ffn_up"), {n_embd, n_ff}),
          wl.require(n("ffn_down"), {n_ff, n_embd})};
}

ExpertLayerTensors load_merged_experts(const WeightLoader& wl, int il, int64_t n_embd, int64_t n_ff, int64_t n_expert) {
  ExpertLayerTensors e;
  e.gate = wl.require(WeightLoader::layer_name(il, "ffn_gate_exps.weight"), {n_embd, n_ff, n_expert});
  e.up = wl.require(WeightLoader::layer_name(il, "ffn_up_exps.weight"), {n_embd, n_ff, n_expert});
  e.down = wl.require(WeightLoader::layer_name(il, "ffn_down_exps.weight"), {n_ff, n_embd, n_expert});
  return e;
}

bool merged_expert_tensor(std::string_view rest) {
  const std::string_view base = rest.substr(0, rest.find('.'));
  return base == "ffn_gate_exps" || base == "ffn_up_exps" || base == "ffn_down_exps";
}

bool merged_or_per_expert_tensor(std::string_view rest) {
  if (merged_expert_tensor(rest)) return true;
  const size_t dot = rest.find('.');
  const std::string_view base = rest.substr(0, dot);
  if (dot == std::string_view::npos || (base != "ffn_gate" && base != "ffn_up" && base != "ffn_down")) return false;
  const std::string_view index = rest.substr(dot + 1, rest.find('.', dot + 1) - dot - 1);
  int e = 0;
  const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), e);
  return !index.empty() && ec == std::errc() && end == index.data() + index.size() && e >= 0;
}

void ffn_block(ForwardContext& ctx, int il, const FfnLayerWeights& w, const RouterConfig& rc, ExpertActivation act,
               float eps, float* x) {
  const int64_t n_embd = w.norm.ne[0];
  std::vector<float> xn(ctx.n_tok * n_embd), out(ctx.n_tok * n_embd);
  for (int64_t t = 0; t < ctx.n_tok; ++t) rmsnorm(x + t * n_embd, w.norm.f32(), xn.data() + t * n_embd, n_embd, eps);
  ctx.dump("ffn_norm", il, xn.data(), n_embd);
  if (!w.router.gate_inp) {
    swiglu_ffn(ctx, il, w.dense, xn.data(), out.data(), "ffn_out");
  } else {
    std::vector<int32_t> ids(ctx.n_tok * rc.n_used);
    std::vector<float> weights(ctx.n_tok * rc.n_used);
    route(ctx, il, w.router, rc, xn.data(), ids.data(), weights.data());
    moe_experts(ctx, il, ids.data(), weights.data(), rc.n_used, act, xn.data(), out.data());
    if (w.shexp.gate) {
      std::vector<float> shared(ctx.n_tok * n_embd);
      swiglu_ffn(ctx, il, w.shexp, xn.data(), shared.data(), "ffn_shexp");
      add_inplace(out.data(), shared.data(), ctx.n_tok * n_embd);
    }
  }
  add_inplace(x, out.data(), ctx.n_tok * n_embd);
}

}  // namespace sluice
