// Pipeline placement: which contiguous layers each host of an N-stage run takes. A stage's cost
// is its estimated time per decoded token on its host — the weights it reads (resident bytes plus
// the active routed experts) at a fixed compute rate, plus the experts its cache misses at that
// host's budget, read at that host's disk rate — so a host with less memory or a slower disk gets
// fewer layers, not just fewer bytes. Each stage's memory is planned by plan_memory (one planner)
// on the stage's own facts. The split minimises the slowest stage (the pipeline's pace).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan/memory_plan.h"

namespace sluice {

struct HostFacts {
  std::string host;
  MemoryBudget budget;
  double disk_bytes_per_second = 0;  // 0: unknown (misses cost nothing in the estimate)
};

struct StagePlan {
  LayerSpan span;
  MemoryFacts facts;
  MemoryPlan memory;
  DecodeEstimate decode;
  double seconds_per_token = 0;  // estimated; infinity when the budget cannot hold the stage
};

struct PipelinePlan {
  bool ok = true;  // false: no split fits every host's budget (see reason)
  std::vector<StagePlan> stages;
  std::string reason;
};

// Weight bytes per second one host's compute gets through when reading resident weights and
// experts from RAM: the estimate's unit of compute time (a typical desktop's memory-bound rate).
inline constexpr double kComputeBytesPerSecond = 10e9;

// `facts_for(span)` gives the planner inputs of a span of layers (plan/sizing's memory_facts);
// `request` the context, slots and forced placement each stage plans with (its budget is each
// host's). One stage per host, in host order.
PipelinePlan plan_pipeline(const std::function<MemoryFacts(LayerSpan)>& facts_for, int n_layer,
                           const std::vector<HostFacts>& hosts, const PlanRequest& request);
// The same evaluation for a given split (--stages).
PipelinePlan evaluate_pipeline(const std::function<MemoryFacts(LayerSpan)>& facts_for,
                               const std::vector<LayerSpan>& spans,
                               const std::vector<HostFacts>& hosts, const PlanRequest& request);
// Parses --stages "0:8,8:16": n_stages contiguous, non-empty ranges covering 0..n_layer in order;
// throws naming the flag and the expected form otherwise.
std::vector<LayerSpan> parse_stages(const std::string& text, int n_layer, int n_stages);

}  // namespace sluice
