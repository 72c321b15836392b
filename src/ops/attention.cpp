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
// is read once for up to kMaxTileQueries heads (the quant/attn_tiles kernels, SIMD with scalar
// twins).
//
// Decode (few items, long context) also splits the positions: an item is then one segment of every
// head group of a token, its states stored and folded afterwards, so both cores stream the cache
// and each streams whole K/V rows, which lie contiguously in the cache's blocks (a head's slice of
// each row, the 1/n_head_kv stride, took 1.5x as long at depth 16k). Either way a query's result
// is the fold of the same per-segment states in position order: it depends only on the query's
// own positions, never on the batch, the block, the other heads, the thread count or whether the
// segments were folded by one item or merged after a split. A resumed session, a pipeline stage, a
// verify batch and one-token decoding therefore reproduce one another bit for bit.
//
// Every key type is dotted with the f32 query itself, so only the stored rounding reaches the
// scores; a q8_0-rounded query (what an int8 VNNI dot needs) would add its own error. Every stored
// type (f32, f16, bf16, q8_0, q4_0) is read where it is stored and widened inside the kernel, once
// per row for all the queries of a tile.
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
// The run of a one-token item, which requests the next run while it computes this one: 16 whole
// f16 rows of 4 KV heads (16 KB). Measured per layer in a pass (bench_attention DecodeInPass/1,
// f16, Zen 4, requests into L2, one interleaved set of runs): 565-590 us at depth 4096 with runs
// of 16, 587-621 with 8, 644-646 with 32; requesting two runs ahead instead of one, 573-620.
constexpr int32_t kPrefetchedRun = 16;
// Keys per kernel call of a one-token item, a share of the next run being requested before each
// call: smaller bursts of requests, spread through the run's work. bench_attention DecodeInPass/1
// (f16, Zen 4, runs of 16, interleaved rounds in one session, minimum of 5 each, runs that fell
// into a slow mode of that machine left out: 907-973 and 3289-4367 us with either size): 569-588
// us a layer at depth 4096 with calls of 8 keys against 644-715 with 16 (one call per head group,
// the scheme the run lengths above were measured with, on another day), and 2206-2413 at 16384
// against 2500-2654; calls of 4 keys were slower than 8 (627-658 and 2414-2445), and of 2 slower
// than 16.
constexpr int32_t kRequestPiece = 8;
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

// Per item, "slots" being the query heads of its groups (Attender::slots):
thread_local std::vector<float> t_scores;  // (block tokens, slots, kSegment)
thread_local std::vector<float> t_acc;     // (block tokens, slots, head_dim_v)
thread_local std::vector<float> t_max;     // (block tokens, slots) a segment's score maxima
thread_local std::vector<float> t_sum;     // (block tokens, slots) its exp-sums
thread_local std::vector<float> t_out;     // (block tokens, slots, head_dim_v) running sums
thread_local std::vector<State> t_state;   // (block tokens, slots) running states
thread_local std::vector<float> t_keys;    // (kRun, head_dim_k) a key run widened in tiles

template <class T>
T* sized(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Requests the cache line at p into L2 only (prefetcht1). The rows are used a run later; a
// request into L1 (prefetcht0) competes for L1 with the lines the kernels read (longer runs
// requested into L1 were slower: 1052-1064 us for 32 rows against 935-970 for 16). Decode
// attention in a pass (bench_attention DecodeInPass/1, f16, Zen 4) took 935-970 us a layer at
// depth 4096 and 3350-3517 at 16384 requesting into L1, 565-654 and 2209-2239 into L2 (not
// measured on other CPUs). The kernels' loads then hit L2, whose latency the out-of-order core
// hides.
inline void request_line(const std::byte* p) {
  __builtin_prefetch(p, 0, 2);
}

// A contiguous range of cache lines to request, a share at a time.
struct Ahead {
  const std::byte* p = nullptr;
  const std::byte* end = nullptr;
  uint64_t lines = 0;  // the whole range's
  Ahead() = default;
  Ahead(const std::byte* first, const std::byte* last)
      : p(first), end(last), lines(static_cast<uint64_t>(last - first + 63) / 64) {}
  // Requests the next 1/parts of the range (the remainder with the last share).
  void issue_share(int parts) {
    for (uint64_t n = (lines + parts - 1) / parts; n > 0 && p < end; --n, p += 64) request_line(p);
  }
  // Calls f(c, m) for the consecutive pieces [c, c + m) of [s, e), at most `piece` keys each,
  // requesting the next 1/parts of the range before each call.
  template <class F>
  void in_pieces(int parts, int32_t piece, int32_t s, int32_t e, F&& f) {
    for (int32_t c = s; c < e; c += piece) {
      issue_share(parts);
      f(c, std::min(piece, e - c));
    }
  }
};

// Query heads [h0, h0 + nh) of KV head kvh.
struct Group {
  int h0, nh, kvh;
};

// One item: tokens [t0, t0 + nb) of one sequence, head groups [g0, g0 + ng) of the token (groups
// are numbered KV head by KV head, so an item's groups read a contiguous range of KV heads).
struct Item {
  int64_t t0;
  int nb;
  int g0, ng;
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
        k_head_(kv_head_bytes(kt_, p.head_dim_k)),
        v_dim_(p.values_in_keys ? p.head_dim_k : p.head_dim_v),
        v_head_(kv_head_bytes(vt_, v_dim_)),
        n_rep_(p.n_head / p.n_head_kv),
        groups_((n_rep_ + kGroupHeads - 1) / kGroupHeads) {
    if (kv.shape(layer).head_dim_k != p.head_dim_k || kv.shape(layer).n_head != p.n_head_kv)
      fail("internal: layer {} KV cache holds {} heads of {}, attention reads {} of {}", layer,
           kv.shape(layer).n_head, kv.shape(layer).head_dim_k, p.n_head_kv, p.head_dim_k);
    if (!tiles_.key_scores || (vt_ != KvType::kF32 && !vsums_stored_))
      fail("internal: no attention tile reads {} keys and {} values", kv_type_name(kt_),
           kv_type_name(vt_));
  }

  // Head groups per token.
  int64_t groups_per_token() const { return static_cast<int64_t>(p_.n_head_kv) * groups_; }

  Group group(int index) const {
    const int kvh = index / groups_, g = index % groups_;
    return {kvh * n_rep_ + g * kGroupHeads, std::min(kGroupHeads, n_rep_ - g * kGroupHeads), kvh};
  }

  // The first position token t sees.
  int32_t first(int64_t t) const {
    return p_.window > 0 ? std::max<int32_t>(0, pos_[t] - p_.window + 1) : 0;
  }

  // Slots per token of an item: one per query head of its groups (states, value sums, scores).
  static int slots(const Item& it) { return it.ng * kGroupHeads; }

  // Segment g of the item into states st[b * slots + gi * kGroupHeads + j] and value sums o (same
  // layout, rows of head_dim_v): st is folded with the segment's state when `fold_into`, else
  // overwritten by it (empty tokens get the empty state).
  void segment(const Item& it, int32_t g, State* st, float* o, bool fold_into) const {
    const int32_t s0 = g * kSegment, s1 = s0 + kSegment;
    const int dv = p_.head_dim_v;
    const int ns = slots(it);
    Span sp[kMaxBlockTokens];
    Span all{s1, s0};
    for (int b = 0; b < it.nb; ++b) {
      const int64_t t = it.t0 + b;
      sp[b] = {std::max(s0, first(t)), std::min(s1, pos_[t] + 1)};
      if (!sp[b].empty()) all = {std::min(all.k0, sp[b].k0), std::max(all.k1, sp[b].k1)};
    }
    if (!fold_into)
      for (int i = 0; i < it.nb * ns; ++i) st[i] = State{};
    if (all.empty()) return;
    const int seq = seq_[it.t0];
    const int kvh0 = group(it.g0).kvh, kvh1 = group(it.g0 + it.ng - 1).kvh + 1;
    float* sc = sized(t_scores, static_cast<size_t>(it.nb) * ns * kSegment);
    float* acc = sized(t_acc, static_cast<size_t>(it.nb) * ns * dv);
    float* m_g = sized(t_max, static_cast<size_t>(it.nb) * ns);
    float* l_g = sized(t_sum, static_cast<size_t>(it.nb) * ns);

    // Scores, key runs shared by every token and head of the item: each run's rows are located
    // once, and read whole (all the item's KV heads) while they sit in L1.
    const int32_t run = it.nb > 1 ? kRun : kPrefetchedRun;
    // Keys per kernel call, each call after a share of the requests (a block of several tokens
    // requests nothing: one call per run).
    const int32_t piece = it.nb > 1 ? run : kRequestPiece;
    // The calls a run of n keys makes, which share its requests: one per piece and head group (a
    // one-token item's group is one tile of queries).
    auto calls = [&](int n) { return it.ng * ((n + piece - 1) / piece); };
    const Span next_keys{s1, std::min(s1 + kSegment, last_position(it) + 1)};
    const std::byte* rows[kRun];
    const std::byte* krows[kRun];
    // A block of several tokens widens each run's keys once per KV head and scores every token
    // from them: no lane sums and no widening per token (tiled_key_scores gives key_scores' bits).
    const bool tiled = it.nb > 1 && tiles_.tiled_key_scores && p_.head_dim_k % kKeyTile == 0;
    float* kt = tiled ? sized(t_keys, static_cast<size_t>(kRun) * p_.head_dim_k) : nullptr;
    for (int32_t a = all.k0; a < all.k1; a += run) {
      const int n = std::min(run, all.k1 - a);
      const int parts = calls(n);
      kv_.k_rows(seq, layer_, a, n, rows);
      // The last key run requests the first value run.
      Ahead ahead = a + run < all.k1 ? request_run(seq, {a + run, all.k1}, run, false, it, kvh0, kvh1)
                                     : request_run(seq, all, run, true, it, kvh0, kvh1);
      for (int gi = 0; gi < it.ng; ++gi) {
        const Group gr = group(it.g0 + gi);
        for (int i = 0; i < n; ++i) krows[i] = rows[i] + gr.kvh * k_head_;
        if (tiled) tiles_.widen_keys(p_.head_dim_k, krows, n, kt);
        for (int b = 0; b < it.nb; ++b) {
          const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
          if (s >= e) continue;
          const float* qb = q_ + ((it.t0 + b) * p_.n_head + gr.h0) * p_.head_dim_k;
          float* out = sc + (static_cast<int64_t>(b) * ns + gi * kGroupHeads) * kSegment + (s - s0);
          for (int j0 = 0; j0 < gr.nh; j0 += kMaxTileQueries) {
            const int nq = std::min(kMaxTileQueries, gr.nh - j0);
            if (tiled)
              tiles_.tiled_key_scores(p_.head_dim_k, kt, s - a, e - a, qb + j0 * p_.head_dim_k,
                                      p_.head_dim_k, nq, out + j0 * kSegment, kSegment);
            else
              ahead.in_pieces(parts, piece, s, e, [&](int32_t c, int32_t m) {
                tiles_.key_scores(p_.head_dim_k, krows + (c - a), m, qb + j0 * p_.head_dim_k,
                                  p_.head_dim_k, nq, out + j0 * kSegment + (c - s), kSegment);
              });
          }
        }
      }
    }

    // Softmax numerators against the segment's maxima.
    for (int b = 0; b < it.nb; ++b) {
      if (sp[b].empty()) continue;
      for (int gi = 0; gi < it.ng; ++gi)
        for (int j = 0; j < group(it.g0 + gi).nh; ++j) {
          const int i = b * ns + gi * kGroupHeads + j;
          l_g[i] = tiles_.exp_scores(sc + static_cast<int64_t>(i) * kSegment + (sp[b].k0 - s0),
                                     sp[b].k1 - sp[b].k0, p_.scale, &m_g[i]);
          std::fill(acc + static_cast<int64_t>(i) * dv, acc + static_cast<int64_t>(i + 1) * dv,
                    0.0f);
        }
    }

    // Value sums, value runs shared likewise, every type read where it is stored (f32 rows by
    // value_sums, the others widened inside vsums_stored_).
    const std::byte* vraw[kRun];
    const float* vrows[kRun];
    for (int32_t a = all.k0; a < all.k1; a += run) {
      const int n = std::min(run, all.k1 - a);
      const int parts = calls(n);
      if (p_.values_in_keys)
        kv_.k_rows(seq, layer_, a, n, rows);
      else
        kv_.v_rows(seq, layer_, a, n, rows);
      // The last value run requests the next segment's first key run: a thread's items are
      // consecutive segments (ThreadPool::parallel_for hands out ranges), so that is usually its
      // next item; one run per range is read in vain.
      Ahead ahead = a + run < all.k1 ? request_run(seq, {a + run, all.k1}, run, true, it, kvh0, kvh1)
                                     : request_run(seq, next_keys, run, false, it, kvh0, kvh1);
      for (int gi = 0; gi < it.ng; ++gi) {
        const Group gr = group(it.g0 + gi);
        for (int i = 0; i < n; ++i) {
          vraw[i] = rows[i] + gr.kvh * v_head_;
          vrows[i] = reinterpret_cast<const float*>(vraw[i]);
        }
        for (int b = 0; b < it.nb; ++b) {
          const int32_t s = std::max(a, sp[b].k0), e = std::min(a + n, sp[b].k1);
          if (s >= e) continue;
          for (int j0 = 0; j0 < gr.nh; j0 += kMaxTileQueries) {
            const int i = b * ns + gi * kGroupHeads + j0,
                      nq = std::min(kMaxTileQueries, gr.nh - j0);
            const float* w = sc + static_cast<int64_t>(i) * kSegment;  // position s0's weight
            float* ai = acc + static_cast<int64_t>(i) * dv;
            // Pieces in key order: each call adds its keys to the sums the previous one left.
            ahead.in_pieces(parts, piece, s, e, [&](int32_t c, int32_t m) {
              if (vsums_stored_)
                vsums_stored_(dv, vraw + (c - a), m, w + (c - s0), kSegment, nq, ai, dv);
              else
                tiles_.value_sums(dv, vrows + (c - a), m, w + (c - s0), kSegment, nq, ai, dv);
            });
          }
        }
      }
    }

    for (int b = 0; b < it.nb; ++b) {
      if (sp[b].empty()) continue;
      for (int gi = 0; gi < it.ng; ++gi)
        for (int j = 0; j < group(it.g0 + gi).nh; ++j) {
          const int i = b * ns + gi * kGroupHeads + j;
          if (fold_into) {
            fold(st[i], o + static_cast<int64_t>(i) * dv, m_g[i], l_g[i],
                 acc + static_cast<int64_t>(i) * dv, dv);
          } else {
            st[i] = {m_g[i], l_g[i]};
            std::copy_n(acc + static_cast<int64_t>(i) * dv, dv, o + static_cast<int64_t>(i) * dv);
          }
        }
    }
  }

  // Every segment of the item, folded in order, normalised into out.
  void whole(const Item& it, float* out) const {
    const int dv = p_.head_dim_v, ns = slots(it);
    const size_t n = static_cast<size_t>(it.nb) * ns;
    State* st = sized(t_state, n);
    std::fill(st, st + n, State{});
    float* o = sized(t_out, n * dv);
    std::fill(o, o + n * dv, 0.0f);
    int32_t lo = pos_[it.t0];
    for (int b = 0; b < it.nb; ++b) lo = std::min(lo, first(it.t0 + b));
    const int32_t hi = last_position(it);
    for (int32_t g = lo / kSegment; g <= hi / kSegment; ++g) segment(it, g, st, o, true);
    for (int b = 0; b < it.nb; ++b)
      for (int gi = 0; gi < it.ng; ++gi) {
        const Group gr = group(it.g0 + gi);
        for (int j = 0; j < gr.nh; ++j) {
          const int i = b * ns + gi * kGroupHeads + j, h = gr.h0 + j;
          finish(st[i], o + static_cast<int64_t>(i) * dv, sink(h), p_.sinks != nullptr, dv,
                 out + ((it.t0 + b) * p_.n_head + h) * dv);
        }
      }
  }

  float sink(int h) const { return p_.sinks ? p_.sinks[h] : -INFINITY; }

  // The last position any token of the item reads.
  int32_t last_position(const Item& it) const {
    int32_t hi = 0;
    for (int b = 0; b < it.nb; ++b) hi = std::max(hi, pos_[it.t0 + b]);
    return hi;
  }

 private:
  // Asks for KV heads [kvh0, kvh1) of the rows [sp.k0, min(sp.k0 + run, sp.k1)) of the keys or
  // values, to be read while the current run is computed. Decode at depth is bound by these reads,
  // and an item that holds fewer than all KV heads reads a slice of each row, a stride the hardware
  // prefetchers follow poorly. A block of several tokens (prefill) instead reuses each row for all
  // its tokens and finds it in L2/L3, since the blocks before it read the same rows: it skips this
  // (measured: ~11 % of a prefill at depth went to these requests). Rows of a run lie in one
  // allocation block unless a ring wraps (segments and runs align with KvCache::kBlock), so the run
  // is usually one contiguous range: that is returned, to be requested a share at a time between
  // the run's kernel calls (requested at once, the lines fill the load queues and the kernels
  // stall behind them). Other runs are requested here.
  Ahead request_run(int seq, Span sp, int32_t run, bool values, const Item& it, int kvh0,
                    int kvh1) const {
    const int32_t a = sp.k0, e = std::min(sp.k0 + run, sp.k1);
    if (it.nb > 1 || a >= e) return {};
    const bool v = values && !p_.values_in_keys;
    const uint64_t head = v ? v_head_ : k_head_;
    const uint64_t bytes =
        (kvh1 - kvh0 - 1) * head + (v ? kv_head_bytes(vt_, p_.head_dim_v) : head);
    const std::byte* rows[kRun];
    if (v)
      kv_.v_rows(seq, layer_, a, e - a, rows);
    else
      kv_.k_rows(seq, layer_, a, e - a, rows);
    const std::byte* first = rows[0] + kvh0 * head;
    const std::byte* last = rows[e - 1 - a] + kvh0 * head;
    const uint64_t stride = p_.n_head_kv * head;
    if (bytes == stride && last == first + (e - 1 - a) * stride) return {first, last + stride};
    for (int32_t i = 0; i < e - a; ++i)
      for (uint64_t off = 0; off < bytes; off += 64) request_line(rows[i] + kvh0 * head + off);
    return {};
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
  // Item `it` of blocks × (groups / per_item): `per_item` consecutive head groups of one block.
  auto item = [&](int64_t it, int per_item) {
    const int64_t per_block = gpt / per_item, blk = it / per_block;
    return Item{block_start[blk], static_cast<int>(block_start[blk + 1] - block_start[blk]),
                static_cast<int>(it % per_block) * per_item, per_item};
  };

  // Split: one item per (block, segment) when the blocks and groups alone leave threads idle
  // (decode, few KV heads) and the context spans several segments. A split item takes every head
  // group of its block, so it streams whole K/V rows (contiguous memory), unless that leaves too
  // few items to share: then one group per item.
  const int64_t n_seg = max_pos / kSegment + 1;
  const int64_t split_floats = n_tok * p.n_head * n_seg * (p.head_dim_v + 2);
  if (n_blocks * gpt >= want_items || n_seg < 2 || split_floats > kMaxSplitFloats) {
    pool.parallel_for(n_blocks * gpt, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) at.whole(item(it, 1), out);
    });
    return;
  }
  const int per_item = n_blocks * n_seg >= want_items ? static_cast<int>(gpt) : 1;
  const int64_t n_items = n_blocks * (gpt / per_item);

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
    for (int64_t x = begin; x < end; ++x) {
      const Item it = item(x / n_seg, per_item);
      const auto g = static_cast<int32_t>(x % n_seg);
      const int ns = Attender::slots(it);
      State* st = sized(t_state, static_cast<size_t>(it.nb) * ns);
      float* o = sized(t_out, static_cast<size_t>(it.nb) * ns * dv);
      at.segment(it, g, st, o, false);
      for (int b = 0; b < it.nb; ++b)
        for (int gi = 0; gi < it.ng; ++gi) {
          const Group gr = at.group(it.g0 + gi);
          for (int j = 0; j < gr.nh; ++j) {
            const int i = b * ns + gi * kGroupHeads + j;
            if (st[i].l == 0.0f) continue;  // no position of this segment (the state stays empty)
            const int64_t s = slot(it.t0 + b, gr.h0 + j, g);
            seg_state[s] = st[i];
            std::copy_n(o + static_cast<int64_t>(i) * dv, dv, seg_o.data() + s * dv);
          }
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
