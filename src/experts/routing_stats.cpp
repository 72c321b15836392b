// Routing statistics of a trace (see routing_stats.h).
#include "experts/routing_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <unordered_map>

#include "core/error.h"
#include "experts/cache_sim.h"

namespace sluice {

namespace {

constexpr int kReuseWindow = 8;

// Reuse of each routed layer: per sequence, the sets of its last kReuseWindow rows.
void reuse(const RoutingTrace& t, RoutingStats& st) {
  const int k = t.n_used;
  struct History {
    std::vector<std::vector<uint16_t>> rows;  // ring of the last kReuseWindow rows' chosen ids
    uint64_t n = 0;                           // rows of this sequence so far
  };
  for (const int il : st.routed_layers) {
    std::unordered_map<int32_t, History> seqs;
    double prev_sum = 0, win_sum = 0;
    uint64_t prev_n = 0, win_n = 0;
    for (size_t r = 0; r < t.n_rows(); ++r) {
      const uint16_t* ids = t.chosen_at(r, il);
      History& h = seqs[t.rows[r].seq];
      if (h.rows.empty()) h.rows.resize(kReuseWindow);
      if (h.n >= 1) {
        const auto& prev = h.rows[(h.n - 1) % kReuseWindow];
        int same = 0;
        for (int j = 0; j < k; ++j)
          same += std::find(prev.begin(), prev.end(), ids[j]) != prev.end();
        prev_sum += static_cast<double>(same) / k;
        ++prev_n;
      }
      if (h.n >= kReuseWindow) {
        int same = 0;
        for (int j = 0; j < k; ++j)
          same += std::any_of(h.rows.begin(), h.rows.end(), [&](const std::vector<uint16_t>& w) {
            return std::find(w.begin(), w.end(), ids[j]) != w.end();
          });
        win_sum += static_cast<double>(same) / k;
        ++win_n;
      }
      h.rows[h.n % kReuseWindow].assign(ids, ids + k);
      ++h.n;
    }
    RoutingFigures& f = st.layers[il];
    f.tokens = t.n_rows();
    f.reuse_prev = prev_n ? prev_sum / prev_n : 0.0;
    f.reuse_within_8 = win_n ? win_sum / win_n : 0.0;
  }
}

// Smallest share of experts whose selections add up to `part` of the layer's selections.
double share_carrying(std::vector<uint64_t> counts, double part) {
  std::sort(counts.begin(), counts.end(), std::greater<>());
  const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
  uint64_t sum = 0;
  size_t m = 0;
  while (m < counts.size() && static_cast<double>(sum) < part * static_cast<double>(total))
    sum += counts[m++];
  return counts.empty() ? 0.0 : static_cast<double>(m) / counts.size();
}

// The end of the pass that starts at row r0: the rows after it that join it (each row its own
// pass with row_passes).
size_t pass_end(const RoutingTrace& t, size_t r0, bool row_passes) {
  size_t r1 = r0 + 1;
  while (!row_passes && r1 < t.n_rows() && t.rows[r1].joins_pass) ++r1;
  return r1;
}

std::vector<int> routed_layers(const RoutingTrace& t) {
  std::vector<int> routed;
  for (int il = 0; il < t.n_layer; ++il)
    if (t.layer_routed(il)) routed.push_back(il);
  return routed;
}

void concentration(const RoutingTrace& t, RoutingStats& st) {
  for (const int il : st.routed_layers) {
    std::vector<uint64_t> counts(t.n_expert, 0);
    for (size_t r = 0; r < t.n_rows(); ++r)
      for (int j = 0; j < t.n_used; ++j) ++counts[t.chosen_at(r, il)[j]];
    st.layers[il].experts_share_50 = share_carrying(counts, 0.5);
    st.layers[il].experts_share_90 = share_carrying(counts, 0.9);
  }
}

void caches(const RoutingTrace& t, const RoutingStatsOptions& o, RoutingStats& st) {
  const CacheRequests reqs = cache_requests(t, st.routed_layers, o.row_passes, o.first_row, o.end_row);
  const size_t end = std::min(reqs.count_end, reqs.size());
  st.layer_requests = end - reqs.count_begin;
  st.experts_requested = reqs.begin[end] - reqs.begin[reqs.count_begin];
  // The counted passes' rows: from the first pass that starts at first_row or later to the end of
  // the last that starts before end_row.
  const size_t n = t.n_rows();
  auto joins = [&](size_t r) { return r < n && !o.row_passes && t.rows[r].joins_pass; };
  size_t row_begin = o.first_row, row_end = std::min(o.end_row, n);
  while (joins(row_begin)) ++row_begin;
  while (joins(row_end)) ++row_end;
  for (size_t r = row_begin; r < row_end; ++r) st.passes += !joins(r);
  st.pass_rows = row_end > row_begin ? row_end - row_begin : 0;
  st.row_experts = st.pass_rows * st.routed_layers.size() * t.n_used;
  const auto n_routed = static_cast<double>(st.routed_layers.size() * t.n_expert);
  for (const double f : kCacheFractions) {
    st.cache_keys.push_back(fmt::format("{:g}", f));
    st.cache_slots.push_back(std::max(t.n_used, static_cast<int>(std::lround(f * n_routed))));
  }
  for (const int slots : o.slots) {
    if (slots < 1) fail("a simulated cache needs at least 1 slot, not {}", slots);
    st.cache_keys.push_back(fmt::format("{} slots", slots));
    st.cache_slots.push_back(slots);
  }
  auto record = [&](const std::string& name, const CacheSimResult& res) {
    st.overall.hit_rate[name].push_back(res.hit_rate());
    for (const int il : st.routed_layers)
      st.layers[il].hit_rate[name].push_back(res.layer_hit_rate(il));
  };
  for (const int slots : st.cache_slots) {
    for (const EvictionPolicy p : kEvictionPolicies)
      record(eviction_policy_name(p), simulate_cache(reqs, slots, p));
    record("belady", simulate_belady(reqs, slots));
  }
}

void lookahead(const RoutingTrace& t, RoutingStats& st) {
  if (!t.has_predictions) return;
  const int k = t.n_used;
  uint64_t all_hit = 0, all_n = 0;
  std::vector<uint64_t> all_rank(k, 0);
  for (const int il : st.routed_layers) {
    uint64_t hit = 0, n = 0;
    std::vector<uint64_t> rank(k, 0);
    for (size_t r = 0; r < t.n_rows(); ++r) {
      const uint16_t* p = t.predicted_at(r, il);
      if (p[0] == kNoExpert) continue;
      const uint16_t* c = t.chosen_at(r, il);
      for (int j = 0; j < k; ++j)
        if (std::find(c, c + k, p[j]) != c + k) ++hit, ++rank[j];
      n += k;
    }
    if (n == 0) continue;
    RoutingFigures& f = st.layers[il];
    f.has_lookahead = true;
    // Both sets hold k experts, so precision and recall agree per token; they are kept apart
    // because a gated prefetch (fewer ranks issued) separates them.
    f.lookahead_precision = f.lookahead_recall = static_cast<double>(hit) / n;
    for (int j = 0; j < k; ++j)
      f.lookahead_rank_precision.push_back(static_cast<double>(rank[j]) / (n / k));
    all_hit += hit;
    all_n += n;
    for (int j = 0; j < k; ++j) all_rank[j] += rank[j];
  }
  if (all_n == 0) return;
  st.overall.has_lookahead = true;
  st.overall.lookahead_precision = st.overall.lookahead_recall =
      static_cast<double>(all_hit) / all_n;
  for (int j = 0; j < k; ++j)
    st.overall.lookahead_rank_precision.push_back(static_cast<double>(all_rank[j]) / (all_n / k));
}

}  // namespace

CacheRequests cache_requests(const RoutingTrace& t, const std::vector<int>& routed_layers,
                             bool row_passes, size_t first_row, size_t end_row) {
  CacheRequests reqs;
  reqs.n_layer = t.n_layer;
  reqs.n_expert = t.n_expert;
  reqs.count_begin = reqs.count_end = SIZE_MAX;
  std::vector<uint32_t> seen(t.n_expert, 0);  // stamp of the request that holds the expert
  uint32_t stamp = 0;
  std::vector<int32_t> ids;
  for (size_t r0 = 0; r0 < t.n_rows();) {
    const size_t r1 = pass_end(t, r0, row_passes);  // the pass is rows [r0, r1)
    if (reqs.count_begin == SIZE_MAX && r0 >= first_row) reqs.count_begin = reqs.size();
    if (reqs.count_end == SIZE_MAX && r0 >= end_row) reqs.count_end = reqs.size();
    for (const int il : routed_layers) {
      ids.clear();
      ++stamp;
      for (size_t r = r0; r < r1; ++r) {
        const uint16_t* c = t.chosen_at(r, il);
        if (c[0] == kNoExpert) continue;  // the row skipped the layer
        for (int j = 0; j < t.n_used; ++j)
          if (seen[c[j]] != stamp) seen[c[j]] = stamp, ids.push_back(c[j]);
      }
      reqs.add(il, ids.data(), static_cast<int>(ids.size()));
    }
    r0 = r1;
  }
  if (reqs.count_begin == SIZE_MAX) reqs.count_begin = reqs.size();
  if (reqs.count_end == SIZE_MAX) reqs.count_end = reqs.size();
  return reqs;
}

CacheTimeline cache_timeline(const RoutingTrace& t, const RoutingStatsOptions& o, int slots) {
  t.validate("routing trace");
  const std::vector<int> routed = routed_layers(t);
  const CacheRequests reqs = cache_requests(t, routed, o.row_passes, o.first_row, o.end_row);
  CacheTimeline tl;
  std::vector<CacheSimResult> sims;
  for (const EvictionPolicy p : kEvictionPolicies) {
    tl.policies.push_back(eviction_policy_name(p));
    sims.push_back(simulate_cache(reqs, slots, p));
  }
  tl.policies.push_back("belady");
  sims.push_back(simulate_belady(reqs, slots));
  // cache_requests makes one request per routed layer of each pass, in trace order.
  if (routed.empty()) return tl;
  const size_t per_pass = routed.size();
  size_t row = 0, request = 0;
  while (row < t.n_rows() && request < reqs.size()) {
    const size_t end = pass_end(t, row, o.row_passes);
    if (request >= reqs.count_begin && request < reqs.count_end) {
      CacheTimeline::Pass pass{row, 0, std::vector<uint64_t>(sims.size(), 0)};
      for (size_t q = request; q < request + per_pass; ++q) {
        pass.requested += reqs.begin[q + 1] - reqs.begin[q];
        for (size_t k = 0; k < sims.size(); ++k) pass.hits[k] += sims[k].request_hits[q];
      }
      tl.passes.push_back(std::move(pass));
    }
    request += per_pass;
    row = end;
  }
  return tl;
}

RoutingStats routing_stats(const RoutingTrace& trace, const RoutingStatsOptions& options) {
  trace.validate("routing trace");
  RoutingStats st;
  st.n_layer = trace.n_layer;
  st.n_expert = trace.n_expert;
  st.n_used = trace.n_used;
  st.layers.resize(trace.n_layer);
  st.routed_layers = routed_layers(trace);
  if (st.routed_layers.empty() || trace.n_rows() == 0)
    fail("routing trace: no routed rows to measure ({} rows, {} routed layers)", trace.n_rows(),
         st.routed_layers.size());
  if (options.first_row >= trace.n_rows() || options.end_row <= options.first_row)
    fail("routing trace: rows {} to {} counted, but the trace has {} rows", options.first_row,
         options.end_row == SIZE_MAX ? std::string("its end") : std::to_string(options.end_row),
         trace.n_rows());
  reuse(trace, st);
  concentration(trace, st);
  caches(trace, options, st);
  lookahead(trace, st);
  RoutingFigures& o = st.overall;
  o.tokens = trace.n_rows();
  const auto n = static_cast<double>(st.routed_layers.size());
  for (const int il : st.routed_layers) {
    o.reuse_prev += st.layers[il].reuse_prev / n;
    o.reuse_within_8 += st.layers[il].reuse_within_8 / n;
    o.experts_share_50 += st.layers[il].experts_share_50 / n;
    o.experts_share_90 += st.layers[il].experts_share_90 / n;
  }
  return st;
}

RoutingTrace uniform_like(const RoutingTrace& trace, uint64_t seed) {
  RoutingTrace u = trace;
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> all(trace.n_expert);
  std::iota(all.begin(), all.end(), uint16_t{0});
  auto draw = [&](uint16_t* ids) {
    if (ids[0] == kNoExpert) return;
    // A partial Fisher-Yates shuffle: the first n_used of a random permutation.
    for (int j = 0; j < trace.n_used; ++j) {
      std::uniform_int_distribution<int> pick(j, trace.n_expert - 1);
      std::swap(all[j], all[pick(rng)]);
      ids[j] = all[j];
    }
  };
  for (size_t r = 0; r < u.n_rows(); ++r)
    for (int il = 0; il < u.n_layer; ++il) {
      draw(u.chosen.data() + (r * u.n_layer + il) * u.n_used);
      if (u.has_predictions) draw(u.predicted.data() + (r * u.n_layer + il) * u.n_used);
    }
  return u;
}

}  // namespace sluice
