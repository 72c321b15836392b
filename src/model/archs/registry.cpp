// The architecture table.
#include "model/archs/archs.h"

namespace sluice {

const std::vector<ArchEntry>& arch_registry() {
  static const std::vector<ArchEntry> table = {
      {"deepseek2", load_deepseek2},
      {"deepseek4", load_deepseek4},
      {"glm4moe", load_glm4moe},
      {"gpt-oss", load_gptoss},
      {"llama", load_llama},
      {"qwen3", load_qwen3},
      {"qwen3moe", load_qwen3},
  };
  return table;
}

}  // namespace sluice
