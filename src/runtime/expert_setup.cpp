// Expert placement: routed experts (ffn_*_exps with their biases, and the legacy per-expert
// tensors) are the only tensors that may stay on disk; everything else is resident. In auto mode
// the model runs in RAM when resident + routed + KV fit the usable budget, streamed otherwise with
// a cache of the usable budget minus resident weights, KV and a margin for activations and buffers
// (256 MiB, or an eighth of a small budget). The usable budget is 95 % of a hard limit
// (--mem-limit, a binding cgroup limit) and 80 % of MemAvailable, which other processes share.
#include "runtime/expert_setup.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "core/units.h"
#include "experts/stream_store.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/tensor_class.h"

namespace sluice {

namespace {

// Activations, logits, I/O rings and allocator slack: 256 MiB, or an eighth of a small budget.
uint64_t margin_for(uint64_t budget) { return std::min<uint64_t>(256ull << 20, budget / 8); }

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// Maps the pages of [data, data + n) of the model's mmap now, synchronously. Kernels without
// MADV_POPULATE_READ get an asynchronous read-ahead hint instead.
void populate(const void* data, uint64_t n) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(data) & ~uintptr_t{4095};
  const size_t len = n + (reinterpret_cast<uintptr_t>(data) - start);
  if (madvise(reinterpret_cast<void*>(start), len, MADV_POPULATE_READ) != 0)
    madvise(reinterpret_cast<void*>(start), len, MADV_WILLNEED);
}

// Multi-token-prediction layers (GLM's nextn) follow the model's layers in the file; the forward
// pass never reads them, so they are neither resident nor streamed and cost no memory.
bool unused_mtp(const std::string& name, const Model& m) {
  const std::optional<int> layer = layer_of(name);
  return layer && *layer >= m.hparams().n_layer;
}

}  // namespace

std::string heat_profile_path(const std::string& model_path, uint64_t file_size) {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* d = std::getenv("SLUICE_HEAT_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = fs::path(x) / "sluice";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = fs::path(h) / ".cache" / "sluice";
  else return "";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "";
  return (dir / (fs::path(model_path).filename().string() + "-" + std::to_string(file_size) + ".heat")).string();
}

ExpertPlan plan_experts(const gguf::File& file, const Model& model, const EngineOptions& o, uint64_t kv_bytes) {
  ExpertPlan p;
  p.routed_bytes = model.expert_layout().routed_bytes();
  for (const auto& t : file.tensors())
    if (!unused_mtp(t.name, model) && classify_tensor(t.name) != TensorClass::RoutedExpert) p.resident_bytes += t.nbytes;
  uint64_t budget = o.mem_limit;
  std::string source = "--mem-limit";
  // A hard limit (--mem-limit, or a cgroup limit that binds before MemAvailable does) is ours to
  // fill up to a 5 % safety band; MemAvailable is shared with other processes, so take 80 %.
  unsigned usable_percent = 95;
  if (budget == 0) {
    const MemInfo mi = read_meminfo();
    auto avail = mi.available_bytes();
    budget = avail ? *avail : (8ull << 30);
    const bool cgroup_binds = mi.cgroup_limit && mi.cgroup_usage && avail &&
                              (!mi.mem_available || *mi.cgroup_limit - std::min(*mi.cgroup_usage, *mi.cgroup_limit) <= *mi.mem_available);
    source = !avail ? "an assumed 8 GiB (memory not detectable)" : cgroup_binds ? "the cgroup limit's headroom" : "available memory";
    if (!cgroup_binds) usable_percent = 80;
  }
  const uint64_t usable = budget / 100 * usable_percent;
  const uint64_t margin = margin_for(budget);
  p.mode = o.experts;
  if (p.routed_bytes == 0 && p.mode == "stream") p.mode = "ram";
  if (p.mode == "auto") {
    if (o.cache_bytes > 0) p.mode = "stream";
    else p.mode = (p.routed_bytes == 0 || p.resident_bytes + p.routed_bytes + kv_bytes + margin <= usable) ? "ram" : "stream";
  }
  if (p.mode == "stream") {
    if (o.cache_bytes > 0) {
      p.cache_bytes = o.cache_bytes;
      p.reason = "cache size set by --ssd-streaming-cache-experts";
    } else {
      const uint64_t fixed = p.resident_bytes + kv_bytes + margin;
      if (usable <= fixed)
        fail("the memory budget ({} from {}) leaves no room for an expert cache after {} of resident weights, {} of KV "
             "cache and a {} margin; set --ssd-streaming-cache-experts or free memory",
             format_bytes(budget), source, format_bytes(p.resident_bytes), format_bytes(kv_bytes), format_bytes(margin));
      p.cache_bytes = std::min<uint64_t>(usable - fixed, p.routed_bytes + (64ull << 20));
      p.reason = fmt::format("{} % of {} ({}) minus resident weights, KV and margin", usable_percent, source, format_bytes(budget));
    }
  } else {
    p.reason = p.mode == o.experts ? "set by --experts" : fmt::format("the model fits in {} % of {} ({})", usable_percent, source, format_bytes(budget));
  }
  return p;
}

std::unique_ptr<ExpertStore> make_expert_store(const gguf::File& file, const Model& model, const EngineOptions& o,
                                               const ExpertPlan& plan) {
  // Resident weights are read on every token: fault them in now rather than during the first
  // tokens (and, in ram mode, the routed experts too — that is what ram means).
  for (const auto& t : file.tensors())
    if (!unused_mtp(t.name, model) && (plan.mode == "ram" || classify_tensor(t.name) != TensorClass::RoutedExpert))
      populate(t.data, t.nbytes);
  if (plan.mode == "ram" || plan.mode == "mmap") return make_in_place_store(model.expert_layout(), plan.mode);
  StreamOptions so;
  so.cache_bytes = plan.cache_bytes;
  so.policy = parse_policy(o.cache_policy);
  so.cold = o.cold;
  so.preload_limit = o.preload_experts;
  so.lock_memory = o.lock_memory;
  so.debug = o.debug;
  so.heat_path = heat_profile_path(o.model_path, file.total_size());
  std::vector<std::string> parts;
  for (size_t i = 0; i < file.n_parts(); ++i) parts.push_back(file.part_path(i));
  return make_stream_store(model.expert_layout(), expert_file_map(model.expert_layout(), model.hparams().n_layer, parts), so,
                           model.hparams().n_expert_used);
}

}  // namespace sluice
