// The architecture table and the loader that dispatches on it.
#include "model/archs/registry.h"

#include "core/error.h"
#include "gguf/gguf.h"

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

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : arch_registry()) out.push_back(a.name);
  return out;
}

std::unique_ptr<Model> load_model(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  for (const auto& a : arch_registry())
    if (arch == a.name) return a.load(file);
  std::string list;
  for (const auto& a : arch_registry()) list += (list.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", arch, list);
}

}  // namespace sluice
