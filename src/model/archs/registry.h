// Registry of architecture loaders, one per archs/<family>.cpp. A plain table (not static
// self-registration) because libsluice is a static library and unreferenced registrars vanish.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace sluice {

struct ArchEntry {
  const char* name;  // general.architecture
  std::unique_ptr<Model> (*load)(const gguf::File& file);
};

std::unique_ptr<Model> load_deepseek2(const gguf::File& file);  // DeepSeek V2/V3, Kimi K2 (MLA)
std::unique_ptr<Model> load_deepseek4(const gguf::File& file);  // DeepSeek V4 (hyper-connections, compressed KV)
std::unique_ptr<Model> load_glm4moe(const gguf::File& file);   // glm4moe (GLM-4.5/4.6)
std::unique_ptr<Model> load_gptoss(const gguf::File& file);    // gpt-oss
std::unique_ptr<Model> load_llama(const gguf::File& file);     // llama, dense or Mixtral experts
std::unique_ptr<Model> load_qwen3(const gguf::File& file);     // qwen3 dense and qwen3moe

const std::vector<ArchEntry>& arch_registry();

// Loads the architecture named by general.architecture; throws naming unsupported ones.
std::unique_ptr<Model> load_model(const gguf::File& file);
std::vector<std::string> supported_architectures();

}  // namespace sluice
