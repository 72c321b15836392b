// The memory planner: where routed experts live (in RAM, in the mmap's page cache, or streamed
// from SSD through a cache) and how large the expert cache is, for a memory budget. One pure
// function of numbers — no files, no /proc — so `sluice inspect` and Engine::load (which read the
// facts from a file and the budget from the system) cannot disagree, and tests pin it exactly.
//
// The rule: the usable budget is 95 % of a hard limit (--mem-limit, --ram, a cgroup limit that
// binds) or 80 % of MemAvailable (shared with other processes). Fixed costs are the resident
// weights, the KV cache of every slot at full context, the front end's own memory (a server's
// worker threads) and a margin for activations, logits and I/O buffers (256 MiB, or an eighth of
// a small budget). Auto placement keeps everything in RAM
// when routed experts fit after the fixed costs, else streams them with a cache of what is left.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/meminfo.h"

namespace sluice {

enum class Placement { kRam, kMmap, kStream };
const char* placement_name(Placement p);

// What the model file says, in bytes.
struct MemoryFacts {
  uint64_t resident_bytes = 0;      // non-routed weights the forward pass reads
  uint64_t routed_bytes = 0;        // every routed expert
  uint64_t expert_bytes = 0;        // the largest single routed expert (one cache slot)
  int n_expert = 0;                 // routed experts per MoE layer
  int n_expert_used = 0;            // chosen per token and layer
  uint64_t kv_bytes_per_token = 0;  // one sequence, all layers
  uint64_t kv_fixed_bytes = 0;      // one sequence whatever its length (deepseek4 rings and states)
};

// The layers [begin, end) a pipeline stage runs; end −1: through the last layer.
struct LayerSpan {
  int begin = 0;
  int end = -1;
};

struct MemoryBudget {
  uint64_t bytes = 0;
  bool hard = true;    // a limit that is ours to fill (95 %); false: MemAvailable, shared (80 %)
  std::string source;  // for messages: "--mem-limit", "available memory", …
};

struct PlanRequest {
  MemoryBudget budget;
  int64_t n_ctx = 4096;              // context per slot
  int n_slots = 1;                   // sequences holding a KV cache at once
  std::optional<Placement> forced{}; // --experts ram|mmap|stream; nullopt: auto
  uint64_t cache_bytes = 0;          // --ssd-streaming-cache-experts; 0: from the budget
  uint64_t overhead = 0;             // the front end's own memory (EngineOptions::overhead_bytes)
};

struct MemoryPlan {
  bool ok = true;            // false: the budget cannot hold the fixed costs (see reason)
  Placement placement = Placement::kRam;
  uint64_t usable = 0;       // the budget's usable share
  uint64_t margin = 0;       // activations, logits, I/O rings, allocator slack
  uint64_t kv_bytes = 0;     // all slots at full context
  uint64_t overhead = 0;     // the front end's (serve: HTTP workers)
  uint64_t fixed = 0;        // resident + kv + overhead + margin
  uint64_t cache_bytes = 0;  // stream: the expert cache; else 0
  uint64_t headroom = 0;     // usable − fixed − cache (what is left unplanned), 0 when over
  double fit_fraction = 1;   // of routed experts held in memory at once (cache / routed, ≤ 1)
  std::string reason;        // why this placement and this size
};

// The budget `run` plans with, from what the system reports (pure: the caller reads `mi`):
// `limit` when set (a hard limit named `limit_source`), else the cgroup limit's headroom when it
// binds before MemAvailable (hard), else MemAvailable (shared), else an assumed 8 GiB.
MemoryBudget memory_budget(const MemInfo& mi, uint64_t limit, const std::string& limit_source);

MemoryPlan plan_memory(const MemoryFacts& facts, const PlanRequest& request);

// Decode speed: with a share `hit_rate` of expert requests served from memory, each token reads
// (1 − hit) of its active routed bytes from disk at `disk_bytes_per_second`. Without
// `ram_tokens_per_second` (decode speed with every expert in RAM) the estimate is the I/O ceiling;
// with it, compute and reads add up (no overlap: prefetch makes real runs somewhat faster).
struct DecodeEstimate {
  double hit_rate = 1;             // expected share of expert requests served from RAM
  uint64_t miss_bytes_per_token = 0;
  double io_tokens_per_second = 0;  // disk rate / miss bytes; 0: not disk-bound or no disk rate
  double tokens_per_second = 0;     // with compute when ram_tokens_per_second is given, else the ceiling
};
// Routed bytes one token uses: the chosen experts of every MoE layer at the mean expert size. The
// counts come from the file's keys unchecked (inspect reads any file): an expert_used_count
// outside 0..expert_count uses none or all of them.
double active_routed_bytes(const MemoryFacts& facts);
// The expected hit rate is the fit fraction: with routing spread evenly over the experts, a cache
// holding a share f of them serves a share f of the requests (skewed routing does better).
DecodeEstimate estimate_decode(const MemoryFacts& facts, const MemoryPlan& plan, double disk_bytes_per_second,
                               double ram_tokens_per_second = 0);

}  // namespace sluice
