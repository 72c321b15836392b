// Attention, flash-attention style. Positions are cut into segments of kSegment positions aligned
// to multiples of kSegment; a segment is the unit of the online softmax: its keys are scored, its
// scores turned into softmax numerators against the segment's own maximum, its values summed with
// them, and the segment's (maximum, exp-sum, value sum) folded into the query's running state by
// rescaling to the common maximum. No buffer grows with the context: scores are (tokens, heads,
// kSegment), and causal segments past a block's last token are never visited.
//
// A work item is a block of up to kMaxBlockTokens consecutive tokens of one sequence (a prefill's
// Q tile) and a group of up to kGroupHeads query heads that share a KV head. Keys and values are
// walked in runs of kRun rows (the K/V tile); each run is used by every token and head of the item
// while it sits in L1, so the cache is read from memory once per item: once per decode step for
// all the query heads of a KV head (GQA), once per block of a prefill. Within a run each key row
// is read once for up to kMaxDotRows heads (the quant/attn_tiles kernels, SIMD with scalar twins).
//
// Decode (few items, long context) also splits the positions: an item is then one segment, its
// state stored and folded afterwards, so both cores stream the cache. Either way a query's result
// is the fold of the same per-segment states in position order: it depends only on the query's
// own positions, never on the batch, the block, the other heads, the thread count or whether the
// segments were folded by one item or merged after a split. A resumed session, a pipeline stage, a
// verify batch and one-token decoding therefore reproduce one another bit for bit.
//
// The cache's stored types are read directly: every key type is dotted with the f32 query itself
// (keys widened to f32 inside the kernel), so only the stored rounding reaches the scores; a
// q8_0-rounded query would add its own error. Block-quantized keys (q8_0, q4_0) go through their
// per-key f32-activation dot with the query padded with zeros to whole blocks, as the stored heads
// are. Quantized value rows are dequantized once per run for all the item's queries.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "quant/dispatch.h"
#include "quant/types.h"

namespace sluice {

namespace {

// Positions per segment. A segment's scores for a full item (8 tokens x 8 heads) are 64 KB and
// stay in L2; folding costs one rescale of the value sum per segment, ~1/256 of its work.
constexpr int32_t kSegment = 256;
// Key rows whose addresses (and dequantized values) are gathered per kernel call: 32 f32 rows of
// 128 dims are 16 KB, which stay in L1 while every query of the item uses them.
constexpr int32_t kRun = 32;
// Most tokens per item: their queries and a key run fit L1 together; more tokens would also make
// fewer items than threads can balance.
constexpr int64_t kMaxBlockTokens = 8;
// Most query heads per item: a KV group of GQA models (8 for qwen3-30b's 32/4) in one item, so
// its keys are read once; MLA's 16..128 heads over one latent become several items.
constexpr int kGroupHeads = 8;
// Work items per thread to aim for, so dynamic claiming can balance.
constexpr int64_t kItemsPerThread = 4;
// Most floats of per-segment states kept for a split (decode) pass; larger batches fold in-item.
constexpr int64_t kMaxSplitFloats = int64_t{8} << 20;

// A query head's softmax state over the positions folded so far: max m, Σ exp(s − m), and the
// value sum Σ exp(s − m)·v (in the caller's buffer).
struct State {
  float m = -INFINITY;
  float l = 0.0f;
};

// Folds a segment's (m_g, l_g, acc) into (st, o). From the empty state this copies the segment
// exactly (exp(−inf) = 0, exp(0) = 1), so folding in an item or merging after a split agree.
void fold(State& st, float* o, float m_g, float l_g, const float* acc, int dim) {
  const float m = std::max(st.m, m_g);
  const float a = std::exp(st.m - m), b = std::exp(m_g - m);
  st.m = m;
  st.l = st.l * a + l_g * b;
  for (int d = 0; d < dim; ++d) o[d] = o[d] * a + acc[d] * b;
}

// Writes o / l with the head's sink (an extra logit without a value) in the denominator.
void finish(const State& st, const float* o, float sink, bool has_sink, int dim, float* out) {
  float l = st.l, a = 1.0f;
  if (has_sink) {
    const float m = std::max(st.m, sink);
    a = std::exp(st.m - m);
    l = st.l * a + std::exp(sink - m);
  }
  const float inv = a / l;
  for (int d = 0; d < dim; ++d) out[d] = o[d] * inv;
}

// Positions [k0, k1) a token reads within one segment.
struct Span {
  int32_t k0, k1;
  bool empty() const { return k0 >= k1; }
};

thread_local std::vector<float> t_scores;  // (block tokens, group heads, kSegment)
thread_local std::vector<float> t_acc;     // (block tokens, group heads, head_dim_v)
thread_local std::vector<float> t_out;     // (block tokens, group heads, head_dim_v) running sums
thread_local std::vector<float> t_rows;    // (kRun, v_dim) dequantized value rows
thread_local std::vector<float> t_qpad;    // one query padded to whole blocks

float* sized(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// One item: tokens [t0, t0 + nb) of one sequence, query heads [h0, h0 + nh) of KV head kvh.
struct Item {
  int64_t t0;
  int nb;
  int h0, nh, kvh;
};

class Attender {
 public:
  Attender(const AttentionParams& p, const KvCache& kv, int layer, const float* q,
           const int32_t* seq, const int32_t* pos)
      : p_(p),
        kv_(kv),
        layer_(layer),
        q_(q),
        seq_(seq),
        pos_(pos),
        kt_(kv.type_k()),
        vt_(p.values_in_keys ? kv.type_k() : kv.type_v()),
        tiles_(attention_tiles(kv_storage_type(kt_))),
        vsums_stored_(stored_value_sums(kv_storage_type(vt_))),
        kdot_(f32_activation_dot(kv_storage_type(kt_))),
        k_pad_(kv_padded_dim(kt_, p.head_dim_k)),
        k_head_(kv_head_bytes(kt_, p.head_dim_k)),
        v_dim_(p.values_in_keys ? p.head_dim_k : p.head_dim_v),
        v_head_(kv_head_bytes(vt_, v_dim_)),
        n_rep_(p.n_head / p.n_head_kv),
        groups_((n_rep_ + kGroupHeads - 1) / kGroupHeads) {
    if (kv.shape(layer).head_dim_k != p.head_dim_k || kv.shape(layer).n_head != p.n_head_kv)
      fail("internal: layer {} KV cache holds {} heads of {}, attention reads {} of {}", layer,
           kv.shape(layer).n_head, kv.shape(layer).head_dim_k, p.n_head_kv, p.head_dim_k);
  }

  // Head groups per token.
  int64_t groups_per_token() const { return static_cast<int64_t>(p_.n_head_kv) * groups_; }

  Item item(int64_t t0, int nb, int64_t group) const {
    const int kvh = static_cast<int>(group / groups_), g = static_cast<int>(group % groups_);
    const int h0 = kvh * n_rep_ + g * kGroupHeads;
    return {t0, nb, h0, std::min(kGroupHeads, n_rep_ - g * kGroupHeads), kvh};
  }

  // The first position token t sees.
  int32_t first(int64_t t) const {
    return p_.window > 0 ? std::max<int32_t>(0, pos_[t] - p_.window + 1) : 0;
  }

  // Segment g of the item into states st[b * kGroupHeads + j] and value sums o (same layout, rows
  // of head_dim_v): st is folded with the segment's state when `fold_into`, else overwritten by it
  // (empty tokens get the empty state).
  void segment(const Item& it, int32_t g, State* st, float* o, bool fold_into) const {
    const int32_t s0 = g * kSegment, s1 = s0 + kSegment;
    const int dv = p_.head_dim_v;
    Span sp[kMaxBlockTokens];
    Span all{s1, s0};
    for (int b = 0; b < it.nb; ++b) {
      const int64_t t = it.t0 + b;
      sp[b] = {std::max(s0, first(t)), std::min(s1, pos_[t] + 1)};
      if (!sp[b].empty()) all = {std::min(all.k0, sp[b].k0), std::max(all.k1, sp[b].k1)};
    }
    if (!fold_into)
      for (int i = 0; i < it.nb * kGroupHeads; ++i) st[i] = State{};
    if (all.empty()) return;
    const int seq = seq_[it.t0];
    const int64_t row_stride = int64_t{kGroupHeads} * kSegment;
    float* sc = sized(t_scores, static_cast<size_t>(it.nb * row_stride));
    float* acc = sized(t_acc, static_cast<size_t>(it.nb * kGroupHeads * dv));

    // Scores, key runs shared by every token and head of the item.
    const bool tiled = tiles_.key_scores && k_pad_ == p_.head_dim_k;
    const std::byte* krows[kRun];
    for (int32_t a = all.k0; a < all.k1; a += kRun) {
      const int n = std::min(kRun, all.k1 - a);
      for (int i = 0; i < n; ++i) krows[i] = kv_.k_row(seq, layer_, a + i) + it.kvh * k_head_;
      prefetch_run(seq, a + kRun, all.k1, false, it.kvh);
      for (int b = 0; b < it.nb; ++b) {
        const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
        if (s >= e) continue;
        const float* qb = q_ + ((it.t0 + b) * p_.n_head + it.h0) * p_.head_dim_k;
        float* out = sc + b * row_stride + (s - s0);
        for (int j0 = 0; j0 < it.nh; j0 += kMaxDotRows) {
          const int nq = std::min(kMaxDotRows, it.nh - j0);
          if (tiled) {
            tiles_.key_scores(p_.head_dim_k, krows + (s - a), e - s, qb + j0 * p_.head_dim_k,
                              p_.head_dim_k, nq, out + j0 * kSegment, kSegment);
            continue;
          }
          for (int j = j0; j < j0 + nq; ++j) {
            const float* qj = query(qb + j * p_.head_dim_k);
            for (int32_t k = s; k < e; ++k)
              out[j * kSegment + k - s] = kdot_(k_pad_, krows[k - a], qj);
          }
        }
      }
    }

    // Softmax numerators against the segment's maxima.
    float m_g[kMaxBlockTokens * kGroupHeads], l_g[kMaxBlockTokens * kGroupHeads];
    for (int b = 0; b < it.nb; ++b) {
      if (sp[b].empty()) continue;
      for (int j = 0; j < it.nh; ++j) {
        const int i = b * kGroupHeads + j;
        l_g[i] = tiles_.exp_scores(sc + i * kSegment + (sp[b].k0 - s0), sp[b].k1 - sp[b].k0,
                                   p_.scale, &m_g[i]);
        std::fill(acc + i * dv, acc + (i + 1) * dv, 0.0f);
      }
    }

    // Value sums, value runs shared likewise: f32, f16 and bf16 rows read where they are stored,
    // block-quantized ones dequantized once per run.
    const float* vrows[kRun];
    const std::byte* vraw[kRun];
    const bool convert = vt_ != KvType::kF32 && !vsums_stored_;
    if (convert) sized(t_rows, static_cast<size_t>(kRun) * v_dim_);
    for (int32_t a = all.k0; a < all.k1; a += kRun) {
      const int n = std::min(kRun, all.k1 - a);
      prefetch_run(seq, a + kRun, all.k1, true, it.kvh);
      for (int i = 0; i < n; ++i) {
        const std::byte* raw = (p_.values_in_keys ? kv_.k_row(seq, layer_, a + i)
                                                  : kv_.v_row(seq, layer_, a + i)) +
                               it.kvh * v_head_;
        vraw[i] = raw;
        if (!convert) {
          vrows[i] = reinterpret_cast<const float*>(raw);
        } else {
          float* row = t_rows.data() + static_cast<size_t>(i) * v_dim_;
          kv_load_head(vt_, raw, v_dim_, row);
          vrows[i] = row;
        }
      }
      for (int b = 0; b < it.nb; ++b) {
        const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
        if (s >= e) continue;
        for (int j0 = 0; j0 < it.nh; j0 += kMaxDotRows) {
          const int i = b * kGroupHeads + j0, nq = std::min(kMaxDotRows, it.nh - j0);
          const float* w = sc + i * kSegment + (s - s0);
          if (vsums_stored_)
            vsums_stored_(dv, vraw + (s - a), e - s, w, kSegment, nq, acc + i * dv, dv);
          else
            tiles_.value_sums(dv, vrows + (s - a), e - s, w, kSegment, nq, acc + i * dv, dv);
        }
      }
    }

    for (int b = 0; b < it.nb; ++b) {
      if (sp[b].empty()) continue;
      for (int j = 0; j < it.nh; ++j) {
        const int i = b * kGroupHeads + j;
        if (fold_into) {
          fold(st[i], o + i * dv, m_g[i], l_g[i], acc + i * dv, dv);
        } else {
          st[i] = {m_g[i], l_g[i]};
          std::copy_n(acc + i * dv, dv, o + i * dv);
        }
      }
    }
  }

  // Every segment of the item, folded in order, normalised into out.
  void whole(const Item& it, float* out) const {
    const int dv = p_.head_dim_v;
    State st[kMaxBlockTokens * kGroupHeads];
    float* o = sized(t_out, static_cast<size_t>(it.nb * kGroupHeads * dv));
    std::fill(o, o + it.nb * kGroupHeads * dv, 0.0f);
    int32_t lo = pos_[it.t0], hi = 0;
    for (int b = 0; b < it.nb; ++b) {
      lo = std::min(lo, first(it.t0 + b));
      hi = std::max(hi, pos_[it.t0 + b]);
    }
    for (int32_t g = lo / kSegment; g <= hi / kSegment; ++g) segment(it, g, st, o, true);
    for (int b = 0; b < it.nb; ++b)
      for (int j = 0; j < it.nh; ++j) {
        const int i = b * kGroupHeads + j, h = it.h0 + j;
        finish(st[i], o + i * dv, sink(h), p_.sinks != nullptr, dv,
               out + ((it.t0 + b) * p_.n_head + h) * dv);
      }
  }

  float sink(int h) const { return p_.sinks ? p_.sinks[h] : -INFINITY; }

 private:
  // Asks for the KV head's slices of the next run's rows [a, min(a + kRun, end)) while this run is
  // computed: an item reads a 1/n_head_kv slice of each row, a stride the hardware prefetchers
  // follow poorly, and decode at depth is bound by these reads.
  void prefetch_run(int seq, int32_t a, int32_t end, bool values, int kvh) const {
    const int32_t e = std::min(a + kRun, end);
    const bool v = values && !p_.values_in_keys;
    const uint64_t head = v ? v_head_ : k_head_;
    const uint64_t bytes = v ? kv_head_bytes(vt_, p_.head_dim_v) : head;
    for (int32_t k = a; k < e; ++k) {
      const std::byte* row = (v ? kv_.v_row(seq, layer_, k) : kv_.k_row(seq, layer_, k)) + kvh * head;
      for (uint64_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off);
    }
  }

  // The query padded to the stored head's whole blocks (itself when no padding is needed); valid
  // until the next call on this thread.
  const float* query(const float* q) const {
    if (k_pad_ == p_.head_dim_k) return q;
    t_qpad.assign(k_pad_, 0.0f);
    std::copy_n(q, p_.head_dim_k, t_qpad.begin());
    return t_qpad.data();
  }

  const AttentionParams& p_;
  const KvCache& kv_;
  int layer_;
  const float* q_;
  const int32_t* seq_;
  const int32_t* pos_;
  KvType kt_, vt_;
  AttentionTiles tiles_;
  StoredValueSumsFn vsums_stored_;  // f16/bf16 value rows read as stored; null otherwise
  VecDotFn kdot_;  // stored keys · f32 query, for key types without a tile kernel
  int k_pad_;
  uint64_t k_head_;
  int v_dim_;  // floats per stored value head (MLA: the whole key row)
  uint64_t v_head_;
  int n_rep_;   // query heads per KV head
  int groups_;  // items per KV head and block
};

}  // namespace

void attention(ThreadPool& pool, const AttentionParams& p, const KvCache& kv, int layer,
               const float* q, const int32_t* seq, const int32_t* pos, int64_t n_tok, float* out) {
  if (n_tok == 0) return;
  const Attender at(p, kv, layer, q, seq, pos);
  const int64_t gpt = at.groups_per_token();
  const int64_t want_items = kItemsPerThread * pool.size();
  const int64_t by_items = std::max<int64_t>(1, n_tok * gpt / want_items);
  const int64_t block_cap = std::min(kMaxBlockTokens, by_items);
  std::vector<int64_t> block_start{0};
  int32_t max_pos = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    max_pos = std::max(max_pos, pos[t]);
    if (t > 0 && (seq[t] != seq[t - 1] || t - block_start.back() == block_cap))
      block_start.push_back(t);
  }
  block_start.push_back(n_tok);
  const auto n_blocks = static_cast<int64_t>(block_start.size()) - 1;
  const int64_t n_items = n_blocks * gpt;
  auto item = [&](int64_t it) {
    const int64_t blk = it / gpt;
    return at.item(block_start[blk], static_cast<int>(block_start[blk + 1] - block_start[blk]),
                   it % gpt);
  };

  // Split: one item per (block, group, segment) when the blocks and groups alone leave threads
  // idle (decode, few KV heads) and the context spans several segments.
  const int64_t n_seg = max_pos / kSegment + 1;
  const int64_t split_floats = n_tok * p.n_head * n_seg * (p.head_dim_v + 2);
  if (n_items >= want_items || n_seg < 2 || split_floats > kMaxSplitFloats) {
    pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) at.whole(item(it), out);
    });
    return;
  }

  // States per (token, head, segment); the merge folds them in position order.
  // (Named through references: inside the pool's lambdas a thread_local names the worker's own.)
  thread_local std::vector<State> t_seg_state;
  thread_local std::vector<float> t_seg_o;
  std::vector<State>& seg_state = t_seg_state;
  std::vector<float>& seg_o = t_seg_o;
  seg_state.assign(static_cast<size_t>(n_tok * p.n_head * n_seg), State{});
  seg_o.resize(static_cast<size_t>(n_tok * p.n_head * n_seg * p.head_dim_v));
  const int dv = p.head_dim_v;
  auto slot = [&](int64_t t, int h, int64_t g) { return (t * p.n_head + h) * n_seg + g; };
  pool.parallel_for(n_items * n_seg, [&](int64_t begin, int64_t end) {
    State st[kMaxBlockTokens * kGroupHeads];
    for (int64_t x = begin; x < end; ++x) {
      const Item it = item(x / n_seg);
      const auto g = static_cast<int32_t>(x % n_seg);
      float* o = sized(t_out, static_cast<size_t>(it.nb * kGroupHeads * dv));
      at.segment(it, g, st, o, false);
      for (int b = 0; b < it.nb; ++b)
        for (int j = 0; j < it.nh; ++j) {
          const int i = b * kGroupHeads + j;
          if (st[i].l == 0.0f) continue;  // no position of this segment (the state stays empty)
          const int64_t s = slot(it.t0 + b, it.h0 + j, g);
          seg_state[s] = st[i];
          std::copy_n(o + i * dv, dv, seg_o.data() + s * dv);
        }
    }
  });
  pool.parallel_for(n_tok * p.n_head, [&](int64_t begin, int64_t end) {
    std::vector<float> o(dv);
    for (int64_t x = begin; x < end; ++x) {
      const int64_t t = x / p.n_head;
      const int h = static_cast<int>(x % p.n_head);
      State st;
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t g = 0; g < n_seg; ++g) {
        const State& sg = seg_state[slot(t, h, g)];
        if (sg.l == 0.0f) continue;
        fold(st, o.data(), sg.m, sg.l, seg_o.data() + slot(t, h, g) * dv, dv);
      }
      finish(st, o.data(), at.sink(h), p.sinks != nullptr, dv, out + (t * p.n_head + h) * dv);
    }
  });
}

}  // namespace sluice
