// Expert placement (see expert_placement.h).
#include "experts/expert_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace sluice {

int64_t ExpertPlacement::owned(int rank) const {
  int64_t n = 0;
  for (const auto& layer : owner) n += std::count(layer.begin(), layer.end(), rank);
  return n;
}

int64_t ExpertPlacement::replicated(int rank) const {
  int64_t n = 0;
  for (const auto& layer : replicas)
    for (uint64_t holders : layer) n += holders >> rank & 1;
  return n;
}

int64_t ExpertPlacement::total() const {
  int64_t all = 0;
  for (const auto& layer : owner) all += static_cast<int64_t>(layer.size());
  return all;
}

double ExpertPlacement::owned_fraction(int rank) const {
  const int64_t all = total();
  return all ? static_cast<double>(owned(rank)) / static_cast<double>(all) : 1.0;
}

double ExpertPlacement::held_fraction(int rank) const {
  const int64_t all = total();
  return all ? static_cast<double>(owned(rank) + replicated(rank)) / static_cast<double>(all) : 1.0;
}

void ExpertPlacement::assign(int il, std::span<const int32_t> ids, int n_used,
                             const uint8_t* active, std::vector<int16_t>& slot_rank) const {
  const std::vector<int16_t>& own = owner[il];
  slot_rank.assign(ids.size(), -1);
  std::vector<int64_t> load(n_ranks, 0);
  // Replicated experts the routing chose, with their rows.
  std::vector<int32_t> rows(n_expert, 0);
  const std::vector<uint64_t>* rep = replicas.empty() ? nullptr : &replicas[il];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (active && !active[i / n_used]) continue;
    const int32_t e = ids[i];
    if (rep && (*rep)[e]) {
      ++rows[e];
      continue;
    }
    slot_rank[i] = own[e];
    ++load[own[e]];
  }
  if (!rep) return;
  std::vector<int32_t> chosen;
  for (int e = 0; e < n_expert; ++e)
    if (rows[e]) chosen.push_back(e);
  std::stable_sort(chosen.begin(), chosen.end(), [&](int a, int b) { return rows[a] > rows[b]; });
  std::vector<int16_t> to(n_expert, -1);
  for (int e : chosen) {
    const uint64_t holders = (*rep)[e] | uint64_t{1} << own[e];
    int best = -1;
    for (int r = 0; r < n_ranks; ++r)
      if ((holders >> r & 1) && (best < 0 || load[r] < load[best])) best = r;
    to[e] = static_cast<int16_t>(best);
    load[best] += rows[e];
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (slot_rank[i] < 0 && (!active || active[i / n_used])) slot_rank[i] = to[ids[i]];
}

std::string ExpertPlacement::summary(std::span<const double> heat) const {
  std::vector<double> load(n_ranks, 0.0);
  double total = 0;
  for (size_t il = 0; il < owner.size(); ++il)
    for (size_t e = 0; e < owner[il].size(); ++e) {
      const size_t key = il * n_expert + e;
      const double h = key < heat.size() ? heat[key] : 0.0;
      load[owner[il][e]] += h;
      total += h;
    }
  std::string s;
  for (int r = 0; r < n_ranks; ++r)
    s += fmt::format("{}rank {}: {} experts ({:.1f} %){}{}", r ? "; " : "", r, owned(r),
                     100.0 * owned_fraction(r),
                     replicas.empty() ? ""
                                      : fmt::format(" and {} replicas ({:.1f} % held)",
                                                    replicated(r), 100.0 * held_fraction(r)),
                     total > 0 ? fmt::format(", {:.1f} % of the profiled load", 100.0 * load[r] / total)
                               : "");
  return s;
}

std::string ExpertPlacement::encode() const {
  std::string s = fmt::format("{} {} {}", n_ranks, n_expert, owner.size());
  for (const auto& layer : owner) {
    s += fmt::format(" {}", layer.size());
    for (int16_t r : layer) s += fmt::format(" {}", r);
  }
  s += fmt::format(" {}", replicas.size());
  for (const auto& layer : replicas) {
    s += fmt::format(" {}", layer.size());
    for (uint64_t holders : layer) s += fmt::format(" {}", holders);
  }
  return s;
}

ExpertPlacement ExpertPlacement::decode(const std::string& text) {
  std::istringstream in(text);
  ExpertPlacement p;
  size_t n_layer = 0;
  if (!(in >> p.n_ranks >> p.n_expert >> n_layer)) fail("internal: bad expert placement text");
  p.owner.resize(n_layer);
  for (auto& layer : p.owner) {
    size_t n = 0;
    if (!(in >> n)) fail("internal: bad expert placement text");
    layer.resize(n);
    for (auto& r : layer)
      if (!(in >> r)) fail("internal: bad expert placement text");
  }
  if (!(in >> n_layer)) fail("internal: bad expert placement text");
  p.replicas.resize(n_layer);
  for (auto& layer : p.replicas) {
    size_t n = 0;
    if (!(in >> n)) fail("internal: bad expert placement text");
    layer.resize(n);
    for (auto& holders : layer)
      if (!(in >> holders)) fail("internal: bad expert placement text");
  }
  return p;
}

int max_expert_replicas(int n_expert, int n_ranks) {
  return n_ranks < 2 ? 0 : n_expert - (n_expert + n_ranks - 1) / n_ranks;
}

ExpertPlacement place_experts(const std::vector<bool>& moe_layer, int n_expert, int n_ranks,
                              std::span<const double> heat, int replicas) {
  if (n_ranks < 1) fail("internal: expert placement over {} ranks", n_ranks);
  if (n_expert < n_ranks)
    fail("--split-mode experts: {} processes for {} experts per layer; each needs at least one",
         n_ranks, n_expert);
  if (replicas < 0 || replicas > max_expert_replicas(n_expert, n_ranks))
    fail("--expert-replicas {}: a process can hold at most {} replicas per layer (the experts it "
         "does not own of {} per layer over {} processes)",
         replicas, max_expert_replicas(n_expert, n_ranks), n_expert, n_ranks);
  if (replicas > 0 && n_ranks > 64)
    fail("--expert-replicas needs at most 64 processes (this job has {})", n_ranks);
  ExpertPlacement p;
  p.n_ranks = n_ranks;
  p.n_expert = n_expert;
  p.owner.resize(moe_layer.size());
  const bool have_heat =
      heat.size() == moe_layer.size() * static_cast<size_t>(n_expert) &&
      std::any_of(heat.begin(), heat.end(), [](double h) { return h > 0; });
  for (size_t il = 0; il < moe_layer.size(); ++il) {
    if (!moe_layer[il]) continue;
    auto& owner = p.owner[il];
    owner.assign(n_expert, 0);
    if (!have_heat) {
      for (int e = 0; e < n_expert; ++e) owner[e] = static_cast<int16_t>(e % n_ranks);
      continue;
    }
    const double* h = heat.data() + il * n_expert;
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return h[a] > h[b]; });
    // Room per rank: n_expert / n_ranks, the first n_expert % n_ranks ranks one more.
    std::vector<int> room(n_ranks, n_expert / n_ranks);
    for (int r = 0; r < n_expert % n_ranks; ++r) ++room[r];
    std::vector<double> load(n_ranks, 0.0);
    for (int e : order) {
      int best = -1;
      for (int r = 0; r < n_ranks; ++r)
        if (room[r] > 0 && (best < 0 || load[r] < load[best])) best = r;
      owner[e] = static_cast<int16_t>(best);
      --room[best];
      load[best] += h[e];
    }
  }
  if (replicas == 0) return p;
  // Each rank copies the `replicas` hottest experts of each layer that it does not own.
  p.replicas.resize(moe_layer.size());
  for (size_t il = 0; il < moe_layer.size(); ++il) {
    if (!moe_layer[il]) continue;
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    if (have_heat) {
      const double* h = heat.data() + il * n_expert;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return h[a] > h[b]; });
    }
    auto& holders = p.replicas[il];
    holders.assign(n_expert, 0);
    for (int r = 0; r < n_ranks; ++r) {
      int left = replicas;
      for (int e : order) {
        if (left == 0) break;
        if (p.owner[il][e] == r) continue;
        holders[e] |= uint64_t{1} << r;
        --left;
      }
    }
  }
  return p;
}

}  // namespace sluice
