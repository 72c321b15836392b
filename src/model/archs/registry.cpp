// The architecture table and the loader that dispatches on it.
#include "model/archs/registry.h"

#include "core/error.h"
#include "gguf/gguf.h"

namespace sluice {

// Each defined in archs/<family>.cpp.
std::unique_ptr<Model> load_deepseek2(const gguf::File& file);  // DeepSeek V2/V3, Kimi K2 (MLA)
std::unique_ptr<Model> load_deepseek4(const gguf::File& file);  // DeepSeek V4 (hyper-connections, compressed KV)
std::unique_ptr<Model> load_glm4moe(const gguf::File& file);   // glm4moe (GLM-4.5/4.6)
std::unique_ptr<Model> load_gptoss(const gguf::File& file);    // gpt-oss
std::unique_ptr<Model> load_llama(const gguf::File& file);     // llama, dense or Mixtral experts
std::unique_ptr<Model> load_qwen3(const gguf::File& file);     // qwen3 dense and qwen3moe

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
