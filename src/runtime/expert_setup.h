// Choosing and building the expert store for a loaded model: in place (ram / mmap) or streamed
// from SSD through a cache sized from the memory budget.
#pragma once

#include <memory>
#include <string>

#include "experts/expert_store.h"
#include "sluice/sluice.h"

namespace sluice {

namespace gguf { class File; }
class Model;

struct ExpertPlan {
  std::string mode;            // ram | mmap | stream
  uint64_t resident_bytes = 0;
  uint64_t routed_bytes = 0;
  uint64_t cache_bytes = 0;    // stream mode
  std::string reason;          // why this mode / this size, for the startup report
};

ExpertPlan plan_experts(const gguf::File& file, const Model& model, const EngineOptions& o, uint64_t kv_bytes);
std::unique_ptr<ExpertStore> make_expert_store(const gguf::File& file, const Model& model, const EngineOptions& o,
                                               const ExpertPlan& plan);
// The heat profile of a model file: $SLUICE_HEAT_DIR, else $XDG_CACHE_HOME/sluice, else
// ~/.cache/sluice; "" when no directory can be made.
std::string heat_profile_path(const std::string& model_path, uint64_t file_size);

}  // namespace sluice
