// gen-model architecture writers, one per family in gen_<family>.cpp. Each sets its family's
// keys and adds its tensors in the real GGUF layout through the shared ModelBuilder pieces. A
// plain table (gen_arch_registry) maps general.architecture to its writer, as model/archs does.
#pragma once

#include <string_view>
#include <vector>

#include "gen/builder.h"

namespace sluice::gen {

struct GenArch {
  const char* arch;  // general.architecture
  void (*write)(ModelBuilder& b);
};

void gen_qwen3(ModelBuilder& b);  // qwen3 (dense) and qwen3moe
void gen_llama(ModelBuilder& b);  // llama dense and Mixtral experts (merged or legacy layout)
void gen_deepseek2(ModelBuilder& b);  // DeepSeek V3/R1, Kimi K2: MLA, shared experts
void gen_gptoss(ModelBuilder& b);     // gpt-oss: biases, attention sinks, MXFP4 experts
void gen_glm4moe(ModelBuilder& b);    // GLM-4.5/4.6: partial RoPE, shared expert, nextn layers
void gen_deepseek4(ModelBuilder& b);  // DeepSeek V4: hyper-connections, compressed KV, hash layers

const std::vector<GenArch>& gen_arch_registry();

}  // namespace sluice::gen
