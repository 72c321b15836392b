// The one table of architectures: per family (general.architecture) its loader and the metadata
// rules that sizing, the memory plan, inspect, gen-model and the loaded model's KV cache read: how
// its layers cache K/V (kv_shape), which layers are windowed, which tensors are routed experts and
// gen-model's writer. A plain table (not static self-registration) because libsluice is a static
// library and unreferenced registrars vanish; the families' functions are declared beside the table
// (registry.cpp), so adding one touches its own file and that line.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace sluice {

namespace gen { class ModelBuilder; }

// What one layer keeps per position: the kind of kv_shape's rule (below), which both the planner
// and the loaded model's cache (Model::make_kv_cache) follow.
enum class KvKind {
  kHeads,       // K and V rows per KV head (GQA): head_count_kv × key_length / value_length
  kLatent,      // MLA: one latent row of kv_lora_rank + the rotary dims; values are read from it
  kCompressed,  // DeepSeek V4: pooled rows, indexer keys, a window ring (kv/ds4_cache.h)
};

struct ArchEntry {
  const char* name;  // general.architecture
  std::unique_ptr<Model> (*load)(const gguf::File& file);
  KvKind kv = KvKind::kHeads;
  // Which of n_layer layers attend through attention.sliding_window (the files do not say);
  // null: none.
  std::vector<bool> (*windowed_layers)(int n_layer) = nullptr;
  // Whether a block tensor is a routed expert, from its name after "blk.N." ("ffn_up_exps.weight");
  // plan/tensor_class.h has the layouts families share.
  bool (*routed_tensor)(std::string_view block_rest) = nullptr;
  // gen-model's writer of the family's keys and tensors (src/gen/gen_<family>.cpp).
  void (*gen)(gen::ModelBuilder& b) = nullptr;
};

const std::vector<ArchEntry>& arch_registry();
// The entry of `arch`; null for an architecture sluice cannot run.
const ArchEntry* find_arch(std::string_view arch);

// How `m`'s layers cache K/V: its family's kind; for an architecture sluice cannot run, the MLA
// latent when the file names a kv_lora_rank, else K/V heads.
KvKind kv_kind(const ModelSummary& m);
// The KV cache `m` describes under that kind's rule, for every block of the file (completing
// absent keys as read_hparams does): what estimate_kv sizes and the loaded model's cache holds.
// Empty when the keys the rule needs are missing or out of range.
KvShape kv_shape(const ModelSummary& m);

// Loads the architecture named by general.architecture and hands it its KV shape (kv_shape);
// throws naming unsupported ones.
std::unique_ptr<Model> load_model(const gguf::File& file);
std::vector<std::string> supported_architectures();

}  // namespace sluice
