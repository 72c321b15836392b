// Choosing and building the expert store for a loaded model: in place (ram / mmap) or streamed
// from SSD through a cache sized from the memory budget.
#pragma once

#include <memory>
#include <string>

#include "experts/expert_store.h"
#include "plan/memory_plan.h"
#include "sluice/sluice.h"

namespace sluice {

namespace gguf { class File; }
class KvCache;
class Model;

struct ExpertPlan {
  MemoryFacts facts;   // from the file (plan/sizing), with the engine's KV bytes
  MemoryPlan memory;   // placement, cache size and why
};

// Reads the budget (--mem-limit, else the system) and runs the memory planner for the layers of
// o.layer_begin..o.layer_end (a pipeline stage plans only its own), with the model's MTP block and
// its KV cache when it is loaded (from `mtp_file` when it came from a separate GGUF); throws
// sluice::Error with the planner's reason when the budget cannot hold the fixed costs.
ExpertPlan plan_experts(const gguf::File& file, const Model& model, const EngineOptions& o,
                        const KvCache& kv, int n_ctx, const gguf::File* mtp_file = nullptr);
// The store the plan chose; a separate MTP GGUF's parts follow the model's in its file list
// (Model::load_mtp numbered them so).
std::unique_ptr<ExpertStore> make_expert_store(const gguf::File& file, const Model& model,
                                               const EngineOptions& o, const ExpertPlan& plan,
                                               const gguf::File* mtp_file = nullptr);
// The heat profile of a model file: $SLUICE_HEAT_DIR, else $XDG_CACHE_HOME/sluice, else
// ~/.cache/sluice; "" when no directory can be made.
std::string heat_profile_path(const std::string& model_path, uint64_t file_size);

}  // namespace sluice
