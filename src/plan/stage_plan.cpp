// Pipeline placement (see stage_plan.h): a dynamic program over contiguous splits, each stage
// planned and timed by the memory planner's own functions.
#include "plan/stage_plan.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"

namespace sluice {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

StagePlan plan_stage(const MemoryFacts& facts, LayerSpan span, const HostFacts& host,
                     const PlanRequest& base) {
  StagePlan s;
  s.span = span;
  s.facts = facts;
  PlanRequest r = base;
  r.budget = host.budget;
  s.memory = plan_memory(facts, r);
  if (!s.memory.ok) {
    s.seconds_per_token = kInf;
    return s;
  }
  s.decode = estimate_decode(facts, s.memory, host.disk_bytes_per_second);
  const double active = active_routed_bytes(facts);
  const double read = host.disk_bytes_per_second > 0
                          ? s.decode.miss_bytes_per_token / host.disk_bytes_per_second
                          : 0;
  s.seconds_per_token =
      (static_cast<double>(facts.resident_bytes) + active) / kComputeBytesPerSecond + read;
  return s;
}

std::string describe_failure(const std::vector<StagePlan>& stages,
                             const std::vector<HostFacts>& hosts) {
  for (size_t i = 0; i < stages.size(); ++i)
    if (!stages[i].memory.ok)
      return fmt::format("stage {} (layers {}:{}) on {}: {}", i, stages[i].span.begin,
                         stages[i].span.end, hosts[i].host, stages[i].memory.reason);
  return "";
}

}  // namespace

PipelinePlan evaluate_pipeline(const std::function<MemoryFacts(LayerSpan)>& facts_for,
                               const std::vector<LayerSpan>& spans,
                               const std::vector<HostFacts>& hosts, const PlanRequest& request) {
  if (spans.size() != hosts.size())
    fail("{} stages for {} hosts: expected one stage per host", spans.size(), hosts.size());
  PipelinePlan p;
  for (size_t i = 0; i < spans.size(); ++i)
    p.stages.push_back(plan_stage(facts_for(spans[i]), spans[i], hosts[i], request));
  p.reason = describe_failure(p.stages, hosts);
  p.ok = p.reason.empty();
  if (p.ok) p.reason = "layers as given by --stages";
  return p;
}

PipelinePlan plan_pipeline(const std::function<MemoryFacts(LayerSpan)>& facts_for, int n_layer,
                           const std::vector<HostFacts>& hosts, const PlanRequest& request) {
  const int n = static_cast<int>(hosts.size());
  if (n < 1) fail("a pipeline needs at least one host");
  if (n > n_layer)
    fail("{} stages for a model of {} layers: expected at most one stage per layer", n, n_layer);
  std::map<std::pair<int, int>, double> cost;  // (stage, begin·n_layer + end) → seconds per token
  auto stage_cost = [&](int s, int b, int e) {
    auto [it, fresh] = cost.try_emplace({s, b * (n_layer + 1) + e}, 0.0);
    if (fresh)
      it->second = plan_stage(facts_for({b, e}), {b, e}, hosts[s], request).seconds_per_token;
    return it->second;
  };
  // best[s][e]: the slowest stage's time when stages 0..s cover layers 0..e; from[s][e]: stage s's
  // first layer.
  std::vector<std::vector<double>> best(n, std::vector<double>(n_layer + 1, kInf));
  std::vector<std::vector<int>> from(n, std::vector<int>(n_layer + 1, -1));
  for (int e = 1; e <= n_layer - (n - 1); ++e) {
    best[0][e] = stage_cost(0, 0, e);
    from[0][e] = 0;
  }
  for (int s = 1; s < n; ++s)
    for (int e = s + 1; e <= n_layer - (n - 1 - s); ++e)
      for (int b = s; b < e; ++b) {
        if (best[s - 1][b] == kInf) continue;
        const double t = std::max(best[s - 1][b], stage_cost(s, b, e));
        // Ties go to the later cut: earlier stages take more layers, so later ones stay lighter.
        if (t <= best[s][e]) {
          best[s][e] = t;
          from[s][e] = b;
        }
      }
  std::vector<LayerSpan> spans(n);
  if (best[n - 1][n_layer] == kInf) {
    // Nothing fits: report the even split's first failing stage, which says what is short.
    for (int s = 0; s < n; ++s) spans[s] = {s * n_layer / n, (s + 1) * n_layer / n};
    PipelinePlan p = evaluate_pipeline(facts_for, spans, hosts, request);
    p.ok = false;
    p.reason = "no split of the layers fits every host's memory budget; even split: " + p.reason;
    return p;
  }
  for (int s = n - 1, e = n_layer; s >= 0; --s) {
    spans[s] = {from[s][e], e};
    e = from[s][e];
  }
  PipelinePlan p = evaluate_pipeline(facts_for, spans, hosts, request);
  p.reason =
      fmt::format("layers split to balance the estimated time per token (slowest stage {:.2f} ms)",
                  best[n - 1][n_layer] * 1e3);
  return p;
}

std::vector<LayerSpan> parse_stages(const std::string& text, int n_layer, int n_stages) {
  std::vector<LayerSpan> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t colon = part.find(':');
    LayerSpan s;
    size_t used_b = 0, used_e = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument(part);
      s.begin = std::stoi(part.substr(0, colon), &used_b);
      s.end = std::stoi(part.substr(colon + 1), &used_e);
    } catch (const std::exception&) {
      fail("--stages '{}': '{}' is not BEGIN:END (expected e.g. 0:8,8:{})", text, part, n_layer);
    }
    if (used_b != colon || used_e != part.size() - colon - 1)
      fail("--stages '{}': '{}' is not BEGIN:END (expected e.g. 0:8,8:{})", text, part, n_layer);
    const int expected_begin = out.empty() ? 0 : out.back().end;
    if (s.begin != expected_begin || s.end <= s.begin || s.end > n_layer)
      fail("--stages '{}': range {}:{} must start at {} and end after it, at most at {}", text,
           s.begin, s.end, expected_begin, n_layer);
    out.push_back(s);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (static_cast<int>(out.size()) != n_stages || out.back().end != n_layer)
    fail("--stages '{}': expected {} ranges covering layers 0:{}", text, n_stages, n_layer);
  return out;
}

}  // namespace sluice
