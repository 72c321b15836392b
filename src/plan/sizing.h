// Model sizing for `sluice inspect` and for planning expert placement: hyperparameters as the
// file states them, bytes per tensor class per layer, the size of one routed expert, a KV-cache
// estimate and the verdict of how much of the routed-expert set fits in a RAM budget. Reading is
// lenient (absent keys stay unset) so that vocab-only and unfamiliar files can still be inspected.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/hparams.h"  // ModelSummary, read_model_summary
#include "plan/memory_plan.h"
#include "plan/tensor_class.h"

namespace sluice {

struct TokenizerSummary {
  std::string model, pre;
  uint64_t n_vocab = 0;
  std::optional<int64_t> bos_id, eos_id;
  bool has_chat_template = false;
};

using ClassBytes = std::array<uint64_t, kTensorClassCount>;  // indexed by TensorClass

struct LayerBytes {
  std::optional<int> layer;  // nullopt: tensors outside blocks (embeddings, output, norms)
  ClassBytes bytes{};
  uint64_t total() const;
};

// One routed expert of a layer: every routed tensor's per-expert slice summed. Layers with the
// same (bytes, experts) are grouped: a Q4_K_M mix gives different sizes on different layers.
struct ExpertShape {
  std::vector<int> layers;
  int n_experts = 0;
  uint64_t bytes_per_expert = 0;
};

struct KvEstimate {
  int64_t ctx = 0;
  int64_t n_layer = 0;         // layers that keep a cache (MTP blocks excluded)
  uint64_t bytes_per_token = 0;  // all layers that grow with the sequence, at the KV types
  uint64_t fixed_bytes = 0;      // per sequence whatever its length (window rings; deepseek4 states)
  uint64_t bytes = 0;            // bytes_per_token · ctx + fixed_bytes
  KvType type_k = KvType::kF32, type_v = KvType::kF32;
  bool values_are_keys =
      false;  // MLA and deepseek4 read values from the key rows: type_v is unused
};

enum class VerdictLevel { NearInRam, Usable, TooSmall };

struct Verdict {
  uint64_t ram = 0;
  uint64_t resident = 0;       // non-routed weights the forward pass reads (MemoryFacts)
  uint64_t kv = 0;             // every slot's KV cache (MemoryPlan::kv_bytes)
  uint64_t routed = 0;
  uint64_t reserved = 0;       // kept back by the planner: the unusable share, margin and overhead
  uint64_t expert_budget = 0;  // ram − reserved − resident − kv, 0 when they alone exceed ram
  double fraction = 0;         // of routed experts that fit in the budget, capped at 1
  VerdictLevel level = VerdictLevel::TooSmall;
  std::string message;         // "near in-RAM speed", ...
  std::string flags;           // what `run` does with this budget, as flags (from the memory plan);
                               // empty for a model without routed experts
};

struct ModelReport {
  ModelSummary model;
  TokenizerSummary tokenizer;
  int first_mtp_layer = -1;        // as passed to classify_tensor
  std::vector<LayerBytes> layers;  // global row first (when there are global tensors), then by layer
  ClassBytes class_totals{};
  uint64_t total_bytes = 0;
  std::vector<ExpertShape> expert_shapes;
  KvEstimate kv;
  MemoryFacts facts;     // what the planner reads (as Engine::load computes them)
  MemoryPlan plan;       // what `run` does with this budget and context
  DecodeEstimate decode;  // I/O-bound decode speed at the plan's fit fraction
  Verdict verdict;
};

struct SizingOptions {
  std::optional<int64_t> ctx;   // default: the model's context_length capped at 4096
  std::optional<uint64_t> ram;  // a hard budget, as `run --mem-limit`; default: detected as `run` does
  int slots = 1;                // sequences with a KV cache each (serve --parallel)
  KvCacheConfig kv = engine_kv_config(KvType::kF32, KvType::kF32);  // as Engine::load makes its cache
  double disk_bytes_per_second = 0;  // for the decode estimate; 0: no estimate
  double ram_tokens_per_second = 0;  // decode speed with every expert in RAM; 0: I/O ceiling only
};

TokenizerSummary read_tokenizer_summary(const gguf::File& file);
// The KV cache one sequence of ctx positions holds with `config` (kv/kv_cache.h's KvLayout rule).
KvEstimate estimate_kv(const ModelSummary& m, int64_t ctx, const KvCacheConfig& config = {});
// The verdict on `plan` (plan_memory over `facts` with a budget of `ram` bytes): the budget left for
// routed experts is the plan's, usable − fixed (resident weights of the forward layers, the KV cache
// of every slot, the front end's overhead and the margin), so the verdict and the plan cannot
// disagree: NearInRam whenever the plan keeps every expert in RAM, and the fraction is the plan's
// fit fraction when it streams. The thresholds: ≥ 70 % of routed experts fit → NearInRam, ≥ 40 % →
// Usable, else TooSmall. `flags` is left empty: it comes from the memory plan (suggested_flags).
Verdict make_verdict(const MemoryFacts& facts, const MemoryPlan& plan, uint64_t ram);
// The flags that make `run` place experts as `plan` does; empty without routed experts.
std::string suggested_flags(const MemoryFacts& facts, const MemoryPlan& plan);
// Whether a stage running `span` of a model with `n_layer` forward layers reads tensor `name`:
// its layers' tensors; token_embd on the first stage (and on the last when the output head is
// tied to it); output and output_norm on the last; any other global tensor on every stage.
bool stage_reads_tensor(const gguf::File& file, const std::string& name, LayerSpan span, int n_layer);
// Expert parallel: the bytes of an untied output head (output.weight) that rank `rank` of
// `n_ranks` never reads, being the other ranks' rows (model/head_shard.h); 0 for a head tied to
// the token embedding, which every rank reads for its input rows.
uint64_t unread_head_bytes(const gguf::File& file, int rank, int n_ranks);
// The planner's inputs from a model file, counted as the engine counts them: routed expert
// weights of the forward pass's layers; resident is every other tensor of those layers and the
// globals (nextn/MTP blocks are never read). Routed expert biases (gpt-oss) are in neither.
// kv_bytes_per_token is inspect's estimate, which equals the engine's cache (tested per preset).
// With `config` and n_ctx the KV counts are the cache Engine::load makes (rings depend on both);
// the defaults give a full-length f32 cache. With a `span`, only what that pipeline stage reads
// (stage_reads_tensor) and its share of the layers' KV.
MemoryFacts memory_facts(const gguf::File& file, const KvCacheConfig& config = {}, int64_t n_ctx = 1, LayerSpan span = {});
// The tensors of a loaded MTP block (layer `il`, Model::load_mtp) in `file`: the block's own, and
// in a separate MTP GGUF (`separate`) also its head's norm and mixer (output_norm, output_hc_*).
// A separate file's token_embd and output copy the model's and are never read.
bool mtp_reads_tensor(const std::string& name, int il, bool separate);
// Adds a loaded MTP block to `f`: its routed experts to the routed bytes (and the largest
// expert), every other tensor it reads (mtp_reads_tensor) to the resident bytes.
void add_mtp_block(const gguf::File& file, int il, bool separate, MemoryFacts& f);
// A byte count as a flag value that parse_byte_size reads back, rounded down by under 1 %
// ("11.5GiB", "1945KiB").
std::string format_flag_size(uint64_t bytes);
ModelReport analyze_model(const gguf::File& file, const SizingOptions& opts);

}  // namespace sluice
