// The architecture table and the loader that dispatches on it.
#include "model/archs/registry.h"

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/blocks.h"

namespace sluice {

// Loaders and rules, each defined in archs/<family>.cpp.
std::unique_ptr<Model> load_deepseek2(const gguf::File& file);  // DeepSeek V2/V3, Kimi K2 (MLA)
std::unique_ptr<Model> load_deepseek4(const gguf::File& file);  // DeepSeek V4 (hyper-connections, compressed KV)
std::unique_ptr<Model> load_glm4moe(const gguf::File& file);   // glm4moe (GLM-4.5/4.6)
std::unique_ptr<Model> load_gptoss(const gguf::File& file);    // gpt-oss
std::unique_ptr<Model> load_llama(const gguf::File& file);     // llama, dense or Mixtral experts
std::unique_ptr<Model> load_qwen3(const gguf::File& file);     // qwen3 dense and qwen3moe
std::vector<bool> gptoss_windowed_layers(int n_layer);

// gen-model's writers, each defined in src/gen/gen_<family>.cpp. Declared here rather than
// included: the table names them, the forward pass never calls them.
namespace gen {
void gen_deepseek2(ModelBuilder& b);  // DeepSeek V3/R1, Kimi K2: MLA, shared experts
void gen_deepseek4(ModelBuilder& b);  // DeepSeek V4: hyper-connections, compressed KV, hash layers
void gen_glm4moe(ModelBuilder& b);    // GLM-4.5/4.6: partial RoPE, shared expert, nextn layers
void gen_gptoss(ModelBuilder& b);     // gpt-oss: biases, attention sinks, MXFP4 experts
void gen_llama(ModelBuilder& b);      // llama dense and Mixtral experts (merged or legacy layout)
void gen_qwen3(ModelBuilder& b);      // qwen3 (dense) and qwen3moe
}  // namespace gen

const std::vector<ArchEntry>& arch_registry() {
  using K = KvKind;
  static const std::vector<ArchEntry> table = {
      // general.architecture, loader, KV kind, windowed layers, routed tensors, gen-model writer
      {"deepseek2", load_deepseek2, K::kLatent, nullptr, merged_expert_tensor, gen::gen_deepseek2},
      {"deepseek4", load_deepseek4, K::kCompressed, nullptr, merged_expert_tensor, gen::gen_deepseek4},
      {"glm4moe", load_glm4moe, K::kHeads, nullptr, merged_expert_tensor, gen::gen_glm4moe},
      {"gpt-oss", load_gptoss, K::kHeads, gptoss_windowed_layers, merged_expert_tensor, gen::gen_gptoss},
      {"llama", load_llama, K::kHeads, nullptr, merged_or_per_expert_tensor, gen::gen_llama},
      {"qwen3", load_qwen3, K::kHeads, nullptr, merged_expert_tensor, gen::gen_qwen3},
      {"qwen3moe", load_qwen3, K::kHeads, nullptr, merged_expert_tensor, gen::gen_qwen3},
  };
  return table;
}

const ArchEntry* find_arch(std::string_view arch) {
  for (const auto& a : arch_registry())
    if (arch == a.name) return &a;
  return nullptr;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : arch_registry()) out.push_back(a.name);
  return out;
}

std::unique_ptr<Model> load_model(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  if (const ArchEntry* a = find_arch(arch)) return a->load(file);
  std::string list;
  for (const auto& a : arch_registry()) list += (list.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", arch, list);
}

}  // namespace sluice
