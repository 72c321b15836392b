// The memory planner (see memory_plan.h). Saturating arithmetic: facts come from untrusted files.
#include "plan/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace sluice {

namespace {

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return mul_overflows(a, b, &r) ? UINT64_MAX : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return add_overflows(a, b, &r) ? UINT64_MAX : r;
}

// Activations, logits, I/O rings and allocator slack: 256 MiB, or an eighth of a small budget.
uint64_t margin_for(uint64_t budget) { return std::min<uint64_t>(256ull << 20, budget / 8); }

// A stream cache larger than every expert plus one spare slot's worth of slack buys nothing.
constexpr uint64_t kCacheSlack = 64ull << 20;

}  // namespace

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kRam: return "ram";
    case Placement::kMmap: return "mmap";
    case Placement::kStream: return "stream";
  }
  return "?";
}

MemoryBudget memory_budget(const MemInfo& mi, uint64_t limit, const std::string& limit_source) {
  if (limit > 0) return {limit, true, limit_source};
  const std::optional<uint64_t> avail = mi.available_bytes();
  if (!avail) return {8ull << 30, false, "an assumed 8 GiB (memory not detectable)"};
  const bool cgroup_binds = mi.cgroup_limit && mi.cgroup_usage &&
                            (!mi.mem_available ||
                             *mi.cgroup_limit - std::min(*mi.cgroup_usage, *mi.cgroup_limit) <= *mi.mem_available);
  if (cgroup_binds) return {*avail, true, "the cgroup limit's headroom"};
  return {*avail, false, "available memory"};
}

MemoryPlan plan_memory(const MemoryFacts& f, const PlanRequest& r) {
  MemoryPlan p;
  const unsigned percent = r.budget.hard ? 95 : 80;
  p.usable = r.budget.bytes / 100 * percent;
  p.margin = margin_for(r.budget.bytes);
  p.kv_bytes = sat_mul(sat_add(sat_mul(f.kv_bytes_per_token, static_cast<uint64_t>(std::max<int64_t>(0, r.n_ctx))),
                               f.kv_fixed_bytes),
                       static_cast<uint64_t>(std::max(1, r.n_slots)));
  p.overhead = r.overhead;
  p.fixed = sat_add(sat_add(sat_add(f.resident_bytes, p.kv_bytes), p.overhead), p.margin);
  const std::string budget_text = fmt::format("{} % of {} ({})", percent, r.budget.source, format_bytes(r.budget.bytes));

  if (r.forced) {
    p.placement = *r.forced;
  } else if (r.cache_bytes > 0) {
    p.placement = Placement::kStream;
  } else {
    p.placement = f.routed_bytes == 0 || sat_add(p.fixed, f.routed_bytes) <= p.usable ? Placement::kRam : Placement::kStream;
  }
  // Nothing to stream: a model without routed experts runs in RAM whatever was asked.
  if (f.routed_bytes == 0 && p.placement == Placement::kStream) p.placement = Placement::kRam;

  if (p.placement == Placement::kStream) {
    if (r.cache_bytes > 0) {
      p.cache_bytes = r.cache_bytes;
      p.reason = "cache size set by --ssd-streaming-cache-experts";
    } else if (p.usable <= p.fixed) {
      p.ok = false;
      p.reason = fmt::format(
          "the memory budget ({} from {}) leaves no room for an expert cache after {} of resident weights, {} of KV "
          "cache{} and a {} margin; set --ssd-streaming-cache-experts or free memory",
          format_bytes(r.budget.bytes), r.budget.source, format_bytes(f.resident_bytes), format_bytes(p.kv_bytes),
          p.overhead ? fmt::format(", {} of front-end overhead", format_bytes(p.overhead)) : "", format_bytes(p.margin));
    } else {
      p.cache_bytes = std::min(p.usable - p.fixed, sat_add(f.routed_bytes, kCacheSlack));
      p.reason = budget_text + (p.overhead ? " minus resident weights, KV, front-end overhead and margin"
                                           : " minus resident weights, KV and margin");
    }
    p.fit_fraction = f.routed_bytes == 0 ? 1.0 : std::min(1.0, static_cast<double>(p.cache_bytes) / f.routed_bytes);
  } else {
    p.reason = r.forced ? "set by --experts" : "the model fits in " + budget_text;
    // mmap leaves the experts to the page cache: what stays of them is what the budget leaves.
    if (p.placement == Placement::kMmap && f.routed_bytes > 0)
      p.fit_fraction = std::min(1.0, static_cast<double>(p.usable > p.fixed ? p.usable - p.fixed : 0) / f.routed_bytes);
  }
  const uint64_t used = sat_add(p.fixed, p.placement == Placement::kRam ? f.routed_bytes : p.cache_bytes);
  p.headroom = p.usable > used ? p.usable - used : 0;
  return p;
}

double active_routed_bytes(const MemoryFacts& f) {
  if (f.n_expert <= 0) return 0;
  return static_cast<double>(f.routed_bytes) *
         std::clamp(static_cast<double>(f.n_expert_used) / f.n_expert, 0.0, 1.0);
}

DecodeEstimate estimate_decode(const MemoryFacts& f, const MemoryPlan& plan, double disk_bytes_per_second,
                               double ram_tokens_per_second) {
  DecodeEstimate e;
  e.hit_rate = plan.placement == Placement::kRam ? 1.0 : plan.fit_fraction;
  e.miss_bytes_per_token = static_cast<uint64_t>(active_routed_bytes(f) * (1.0 - e.hit_rate));
  const double read_seconds =
      disk_bytes_per_second > 0 ? static_cast<double>(e.miss_bytes_per_token) / disk_bytes_per_second : 0;
  if (read_seconds > 0) e.io_tokens_per_second = 1.0 / read_seconds;
  if (ram_tokens_per_second > 0 && (read_seconds > 0 || e.miss_bytes_per_token == 0))
    e.tokens_per_second = 1.0 / (1.0 / ram_tokens_per_second + read_seconds);
  else
    e.tokens_per_second = e.io_tokens_per_second;
  return e;
}

}  // namespace sluice
