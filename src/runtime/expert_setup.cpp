// Expert placement: routed experts (ffn_*_exps and the legacy per-expert tensors) are the only
// tensors that may stay on disk; everything else is resident. Where they go and how large the
// cache is comes from the memory planner (plan/memory_plan.h), the same function `inspect`
// calls; this file reads the budget and builds the chosen store.
#include "runtime/expert_setup.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/meminfo.h"
#include "experts/expert_shard.h"
#include "experts/stream_store.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "plan/sizing.h"
#include "plan/tensor_class.h"

namespace sluice {

namespace {

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

// Multi-token-prediction layers (GLM's nextn) follow the model's layers in the file; unless MTP
// drafting loaded the first of them, the forward pass never reads them, so they are neither
// resident nor streamed and cost no memory.
bool unused_mtp(const std::string& name, const Model& m) {
  const std::optional<int> layer = layer_of(name);
  return layer && *layer >= m.hparams().n_layer + (m.mtp_loaded() ? 1 : 0);
}

// (n_layer · n_expert): 1 where `shard` holds the expert (owns it or a replica).
std::vector<uint8_t> owned_mask(const ExpertLayout& l, const ExpertShard& shard) {
  std::vector<uint8_t> owned(l.layers.size() * static_cast<size_t>(l.n_expert), 0);
  for (int il = 0; il < static_cast<int>(l.layers.size()); ++il)
    if (l.has_layer(il))
      for (int e = 0; e < l.n_expert; ++e)
        owned[static_cast<size_t>(il) * l.n_expert + e] = shard.holds(il, e) ? 1 : 0;
  return owned;
}

// Expert parallel: the share of the routed experts this process holds, its own and its replicas
// (1 without a shard).
double owned_fraction(const Model& m, const ExpertShard* shard) {
  if (!shard) return 1.0;
  const ExpertLayout& l = m.expert_layout();
  const std::vector<uint8_t> held = owned_mask(l, *shard);
  int64_t all = 0;
  for (int il = 0; il < static_cast<int>(l.layers.size()); ++il) all += l.has_layer(il) ? l.n_expert : 0;
  const auto mine = std::count(held.begin(), held.end(), uint8_t{1});
  return all ? static_cast<double>(mine) / static_cast<double>(all) : 1.0;
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

ExpertPlan plan_experts(const gguf::File& file, const Model& model, const EngineOptions& o,
                        const KvCache& kv, int n_ctx, const gguf::File* mtp_file) {
  ExpertPlan p;
  const KvCacheConfig kv_config = engine_kv_config(o.kv_type_k, o.kv_type_v);
  p.facts = memory_facts(file, kv_config, n_ctx, LayerSpan{o.layer_begin, o.layer_end});
  // The engine's own cache, not the estimate: per position plus what a sequence holds whatever its
  // length (deepseek4's rings and compressor states).
  p.facts.kv_bytes_per_token = kv.bytes_per_position();
  p.facts.kv_fixed_bytes = kv.bytes_for(0);
  // An expert-parallel rank holds (in RAM or its cache) only the experts it owns and its replicas.
  p.facts.routed_bytes = static_cast<uint64_t>(static_cast<double>(p.facts.routed_bytes) *
                                               owned_fraction(model, o.expert_shard.get()));
  // ... and only its rows of an untied output head.
  if (o.head_shard)
    p.facts.resident_bytes -=
        unread_head_bytes(file, o.head_shard->head_rank(), o.head_shard->head_ranks());
  if (model.mtp_loaded()) {
    add_mtp_block(mtp_file ? *mtp_file : file, model.hparams().n_layer, mtp_file != nullptr,
                  p.facts);
    const std::unique_ptr<KvCache> mtp_kv = model.make_mtp_kv_cache(n_ctx, kv_config);
    // Each sequence's drafter also keeps one hidden row per position (runtime/mtp_draft.h).
    p.facts.kv_bytes_per_token +=
        mtp_kv->bytes_per_position() + static_cast<uint64_t>(model.hidden_width()) * sizeof(float);
    p.facts.kv_fixed_bytes += mtp_kv->bytes_for(0);
  }
  PlanRequest req;
  req.budget = memory_budget(o.mem_limit > 0 ? MemInfo{} : read_meminfo(), o.mem_limit, "--mem-limit");
  req.n_ctx = n_ctx;
  req.n_slots = o.kv_slots;
  req.cache_bytes = o.cache_bytes;
  req.overhead = o.overhead_bytes;
  switch (o.experts) {
    case ExpertMode::kAuto: break;
    case ExpertMode::kRam: req.forced = Placement::kRam; break;
    case ExpertMode::kMmap: req.forced = Placement::kMmap; break;
    case ExpertMode::kStream: req.forced = Placement::kStream; break;
  }
  p.memory = plan_memory(p.facts, req);
  if (!p.memory.ok) fail("{}", p.memory.reason);
  return p;
}

std::unique_ptr<ExpertStore> make_expert_store(const gguf::File& file, const Model& model,
                                               const EngineOptions& o, const ExpertPlan& plan,
                                               const gguf::File* mtp_file) {
  // Resident weights are read on every token: fault them in now rather than during the first
  // tokens (and, in ram mode, the routed experts too — that is what ram means).
  // A pipeline stage touches only the tensors of its own layers (and the globals it reads).
  const bool ram = plan.memory.placement == Placement::kRam;
  // A loaded MTP block is read like one more layer after the last.
  const LayerSpan span{model.layer_begin(), model.layer_end() + (model.mtp_loaded() ? 1 : 0)};
  // An expert-parallel rank reads only its own rows of an untied output head.
  const bool own_head_rows = o.head_shard && !model.head_tied();
  for (const auto& t : file.tensors())
    if (!unused_mtp(t.name, model) && stage_reads_tensor(file, t.name, span, model.hparams().n_layer) &&
        ((ram && !o.expert_shard) || classify_tensor(t.name, -1, model.hparams().arch) != TensorClass::RoutedExpert) &&
        !(own_head_rows && t.name == "output.weight"))
      populate(t.data, t.nbytes);
  if (own_head_rows) {
    const MatView h = model.head_slice();
    populate(h.data, h.row_stride * static_cast<uint64_t>(h.n_out));
  }
  if (mtp_file)
    for (const auto& t : mtp_file->tensors())
      if (mtp_reads_tensor(t.name, model.hparams().n_layer, true) &&
          (ram || classify_tensor(t.name, -1, model.hparams().arch) != TensorClass::RoutedExpert))
        populate(t.data, t.nbytes);
  // An expert-parallel rank in RAM holds a packed copy of its own experts and its replicas
  // (make_packed_store).
  if (ram && o.expert_shard)
    return make_packed_store(model.expert_layout(),
                             owned_mask(model.expert_layout(), *o.expert_shard),
                             placement_name(plan.memory.placement));
  if (plan.memory.placement != Placement::kStream) return make_in_place_store(model.expert_layout(), placement_name(plan.memory.placement));
  StreamOptions so;
  so.cache_bytes = plan.memory.cache_bytes;
  so.policy = o.cache_policy;
  so.cold = o.cold;
  so.preload_limit = o.preload_experts;
  so.lock_memory = o.lock_memory;
  so.debug = o.debug;
  so.heat_path = heat_profile_path(o.model_path, file.total_size());
  // Stages on one host keep separate heat profiles (each records only its own layers).
  if (!so.heat_path.empty() && (span.begin > 0 || span.end < model.hparams().n_layer))
    so.heat_path += fmt::format(".layers{}-{}", span.begin, span.end);
  // Its map has the MTP block as one more layer, which a profile of the main layers does not fit.
  if (!so.heat_path.empty() && model.mtp_loaded()) so.heat_path += ".mtp";
  if (o.expert_shard) {
    // Each rank caches (and counts) only its own experts: its own profile (ranks may share a
    // host and its cache directory), and its preload never reads another rank's experts.
    so.owned = owned_mask(model.expert_layout(), *o.expert_shard);
    if (!so.heat_path.empty()) so.heat_path += fmt::format(".experts-rank{}", o.expert_shard->rank());
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < file.n_parts(); ++i) parts.push_back(file.part_path(i));
  if (mtp_file)
    for (size_t i = 0; i < mtp_file->n_parts(); ++i) parts.push_back(mtp_file->part_path(i));
  // A loaded MTP block's experts are one more layer of the map (layer index n_layer).
  const int n_layer = static_cast<int>(model.expert_layout().layers.size());
  return make_stream_store(model.expert_layout(),
                           expert_file_map(model.expert_layout(), n_layer, parts), so,
                           model.hparams().n_expert_used);
}

}  // namespace sluice
