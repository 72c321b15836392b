// The architecture table and the loader that dispatches on it.
#include "model/archs/registry.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/blocks.h"
#include "model/hparams.h"

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

KvKind kv_kind(const ModelSummary& m) {
  if (const ArchEntry* a = find_arch(m.arch)) return a->kv;
  return m.is_mla ? KvKind::kLatent : KvKind::kHeads;
}

KvShape kv_shape(const ModelSummary& m) {
  KvShape shape;
  if (!m.n_layer || *m.n_layer <= 0 || *m.n_layer > kMaxKvBlocks) return shape;
  const int n_block = static_cast<int>(*m.n_layer);
  // The key size read_hparams completes: key_length, else the embedding over the first layer's
  // heads; values as long as keys unless value_length says otherwise.
  std::optional<int64_t> key = m.key_length;
  if (!key && m.n_embd && !m.n_head.empty() && m.n_head[0] > 0) key = *m.n_embd / m.n_head[0];
  if (!key || *key <= 0 || *key > INT32_MAX) return shape;
  const ArchEntry* entry = find_arch(m.arch);
  switch (kv_kind(m)) {
    case KvKind::kCompressed: {
      // kv/ds4_cache.h: a window ring per layer, pooled rows on compressed layers, indexer keys on
      // ratio-4 layers. compress_ratios may run past block_count (MTP entries).
      if (!m.sliding_window || *m.sliding_window <= 0 || *m.sliding_window > INT32_MAX)
        return shape;
      Ds4CacheShape c;
      const size_t n = std::min(m.compress_ratios.size(), static_cast<size_t>(n_block));
      for (size_t il = 0; il < n; ++il) {
        const int64_t r = m.compress_ratios[il];
        if (r != 0 && r != 4 && r != 128) return shape;
        c.ratio.push_back(static_cast<int>(r));
      }
      const bool indexed = std::find(c.ratio.begin(), c.ratio.end(), 4) != c.ratio.end();
      c.head_dim = static_cast<int>(*key);
      c.index_dim = indexed ? static_cast<int>(std::clamp<int64_t>(m.indexer_key_length.value_or(0),
                                                                   0, INT32_MAX))
                            : 0;
      c.window = static_cast<int>(*m.sliding_window);
      shape.compressed = std::move(c);
      return shape;
    }
    case KvKind::kLatent: {
      // MLA caches the compressed KV latent plus the shared rotary key part, whatever the head
      // count (rope.dimension_count, else the whole key as read_hparams completes it).
      if (!m.is_mla || *m.kv_lora_rank > INT32_MAX) return shape;
      const int64_t width = *m.kv_lora_rank + std::max<int64_t>(0, m.rope_dim.value_or(*key));
      if (width > INT32_MAX) return shape;
      shape.layers.assign(n_block, KvLayerShape{1, static_cast<int>(width), 0, 0});
      return shape;
    }
    case KvKind::kHeads: {
      // K/V heads per layer (one value or one per block; absent: the first layer's query heads,
      // as read_hparams completes head_count_kv). Recurrent or attention-free layers (0 KV heads)
      // keep no cache.
      const std::vector<int64_t>& heads = m.n_head_kv.empty() ? m.n_head : m.n_head_kv;
      const int64_t v = m.value_length.value_or(*key);
      if (heads.empty() || v < 0 || v > INT32_MAX) return shape;
      const bool per_layer =
          !m.n_head_kv.empty() && m.n_head_kv.size() == static_cast<size_t>(n_block);
      const std::vector<bool> swa = entry && entry->windowed_layers
                                        ? entry->windowed_layers(n_block)
                                        : std::vector<bool>(n_block, false);
      const int window =
          static_cast<int>(std::clamp<int64_t>(m.sliding_window.value_or(0), 0, INT32_MAX));
      for (int il = 0; il < n_block; ++il) {
        const int64_t h = per_layer ? heads[il] : heads[0];
        shape.layers.push_back({static_cast<int>(std::clamp<int64_t>(h, 0, INT32_MAX)),
                                static_cast<int>(*key), static_cast<int>(v), swa[il] ? window : 0});
      }
      return shape;
    }
  }
  return shape;
}

std::unique_ptr<Model> load_model(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture");
  if (const ArchEntry* a = find_arch(arch)) {
    std::unique_ptr<Model> model = a->load(file);
    model->set_kv_rule(kv_shape, read_model_summary(file));
    return model;
  }
  std::string list;
  for (const auto& a : arch_registry()) list += (list.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", arch, list);
}

}  // namespace sluice
