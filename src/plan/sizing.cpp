// Model sizing. Byte counts come from the tensor infos (never from hyperparameters), so they are
// exact for any quantization mix; hyperparameters only feed the KV-cache estimate.
#include "plan/sizing.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/meminfo.h"
#include "kv/ds4_cache.h"
#include "model/archs/registry.h"
#include "model/head_shard.h"
#include "model/hparams.h"

namespace sluice {

namespace {

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return mul_overflows(a, b, &r) ? UINT64_MAX : r;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return add_overflows(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace

uint64_t LayerBytes::total() const {
  uint64_t s = 0;
  for (uint64_t b : bytes) s += b;
  return s;
}

TokenizerSummary read_tokenizer_summary(const gguf::File& f) {
  TokenizerSummary t;
  t.model = f.get_string_or("tokenizer.ggml.model", "");
  t.pre = f.get_string_or("tokenizer.ggml.pre", "");
  if (const gguf::Value* v = f.find("tokenizer.ggml.tokens")) {
    if (v->type != gguf::ValueType::ARRAY)
      fail("metadata key 'tokenizer.ggml.tokens' has type {}, expected array of string",
           gguf::value_type_name(v->type));
    t.n_vocab = v->arr().items.size();
  }
  if (f.has("tokenizer.ggml.bos_token_id")) t.bos_id = f.get_int("tokenizer.ggml.bos_token_id");
  if (f.has("tokenizer.ggml.eos_token_id")) t.eos_id = f.get_int("tokenizer.ggml.eos_token_id");
  t.has_chat_template = f.has("tokenizer.chat_template");
  return t;
}

KvEstimate estimate_kv(const ModelSummary& m, int64_t ctx, const KvCacheConfig& config) {
  KvEstimate kv;
  kv.ctx = ctx;
  kv.type_k = config.type_k;
  kv.type_v = config.type_v;
  // The family's rule (its registry entry, kv_shape), the one the loaded model's cache is laid
  // out by, over the main layers (not the MTP blocks block_count counts).
  const KvKind kind = kv_kind(m);
  kv.values_are_keys = kind != KvKind::kHeads;
  // DeepSeek V4 refuses a value type other than its key type (values are keys) before anything.
  const KvType row_type = kind == KvKind::kCompressed ? ds4_row_type(config) : config.type_k;
  if (!m.n_layer || *m.n_layer <= 0 || *m.n_layer > kMaxKvBlocks) return kv;
  kv.n_layer = std::max<int64_t>(0, *m.n_layer - m.n_mtp_layers.value_or(0));
  const KvShape shape = kv_shape(m);
  const size_t n_main = static_cast<size_t>(kv.n_layer);
  if (shape.compressed) {
    // The cache's own rule (kv/ds4_cache.h): pooled rows and indexer keys per position, plus the
    // window ring and compressor states of every layer.
    if (shape.compressed->ratio.size() < n_main) return kv;
    Ds4CacheShape c = *shape.compressed;
    c.ratio.resize(n_main);
    c.type = row_type;
    kv.bytes_per_token = c.bytes_per_position();
    kv.fixed_bytes = c.fixed_bytes();
  } else {
    // The cache's own rule (KvLayout) over those layers.
    if (shape.layers.size() < n_main) return kv;
    KvLayout layout;
    layout.config = config;
    layout.n_ctx = static_cast<int>(std::clamp<int64_t>(ctx, 1, INT32_MAX));
    layout.layers.assign(shape.layers.begin(), shape.layers.begin() + n_main);
    kv.bytes_per_token = layout.bytes_per_position();
    kv.fixed_bytes = layout.fixed_bytes();
  }
  kv.bytes = sat_add(sat_mul(kv.bytes_per_token, static_cast<uint64_t>(std::max<int64_t>(0, ctx))), kv.fixed_bytes);
  return kv;
}

std::string format_flag_size(uint64_t bytes) {
  // The largest unit that still shows at least 100 of it (or tenths of GiB from 10 GiB on), so
  // rounding down gives away under 1 % of the budget.
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (bytes >= 10 * kGiB) {
    const uint64_t tenths = static_cast<uint64_t>(static_cast<unsigned __int128>(bytes) * 10 / kGiB);
    return tenths % 10 ? fmt::format("{}.{}GiB", tenths / 10, tenths % 10) : fmt::format("{}GiB", tenths / 10);
  }
  if (bytes >= 100 * kMiB) return fmt::format("{}MiB", bytes / kMiB);
  if (bytes >= 100 * kKiB) return fmt::format("{}KiB", bytes / kKiB);
  return fmt::format("{}B", bytes);
}

Verdict make_verdict(const MemoryFacts& facts, const MemoryPlan& plan, uint64_t ram) {
  Verdict v;
  v.ram = ram;
  v.resident = facts.resident_bytes;
  v.kv = plan.kv_bytes;
  v.routed = facts.routed_bytes;
  const uint64_t unusable = ram > plan.usable ? ram - plan.usable : 0;
  v.reserved = sat_add(sat_add(unusable, plan.margin), plan.overhead);
  const bool fixed_fits = plan.fixed <= plan.usable;
  v.expert_budget = fixed_fits ? plan.usable - plan.fixed : 0;
  const uint64_t routed = facts.routed_bytes;
  using u128 = unsigned __int128;
  if (routed == 0) {
    v.fraction = fixed_fits ? 1.0 : 0.0;
  } else {
    v.fraction = std::min(1.0, static_cast<double>(v.expert_budget) / static_cast<double>(routed));
  }
  // Thresholds in exact integer arithmetic so that exactly 70 % and 40 % land on the upper side.
  const u128 budget = routed == 0 ? (fixed_fits ? 1 : 0) : v.expert_budget;
  const u128 whole = routed == 0 ? 1 : routed;
  if (budget * 10 >= whole * 7) {
    v.level = VerdictLevel::NearInRam;
    v.message = "near in-RAM speed";
  } else if (budget * 10 >= whole * 4) {
    v.level = VerdictLevel::Usable;
    v.message = "usable, prompt-dependent";
  } else {
    v.level = VerdictLevel::TooSmall;
    v.message = !fixed_fits ? "choose a smaller quant (resident weights and KV cache alone exceed the RAM)"
                            : "choose a smaller quant";
  }
  return v;
}

std::string suggested_flags(const MemoryFacts& facts, const MemoryPlan& plan) {
  if (facts.routed_bytes == 0) return "";
  if (!plan.ok) return "--experts stream";
  if (plan.placement != Placement::kStream) return fmt::format("--experts {}", placement_name(plan.placement));
  return "--experts stream --ssd-streaming-cache-experts " + format_flag_size(plan.cache_bytes);
}

bool stage_reads_tensor(const gguf::File& file, const std::string& name, LayerSpan span, int n_layer) {
  const int end = span.end < 0 ? n_layer : span.end;
  if (const std::optional<int> layer = layer_of(name)) return *layer >= span.begin && *layer < end;
  const bool first = span.begin == 0, last = end >= n_layer;
  if (name == "token_embd.weight") return first || (last && !file.find_tensor("output.weight"));
  if (name.starts_with("output")) return last;
  return true;
}

uint64_t unread_head_bytes(const gguf::File& file, int rank, int n_ranks) {
  const gguf::TensorInfo* t = file.find_tensor("output.weight");
  if (!t || n_ranks <= 1) return 0;
  const HeadRows own = head_rows_of(rank, n_ranks, t->ne[1]);
  return t->nbytes - t->row_bytes() * static_cast<uint64_t>(own.size());
}

bool mtp_reads_tensor(const std::string& name, int il, bool separate) {
  if (layer_of(name) == il) return true;
  return separate && (name == "output_norm.weight" || name.starts_with("output_hc_"));
}

void add_mtp_block(const gguf::File& file, int il, bool separate, MemoryFacts& f) {
  uint64_t expert = 0;
  const std::string arch = file.get_string_or("general.architecture", "");
  for (const auto& t : file.tensors()) {
    if (!mtp_reads_tensor(t.name, il, separate)) continue;
    if (classify_tensor(t.name, -1, arch) != TensorClass::RoutedExpert) {
      f.resident_bytes = sat_add(f.resident_bytes, t.nbytes);
      continue;
    }
    f.routed_bytes = sat_add(f.routed_bytes, t.nbytes);
    if (auto s = expert_slice(t)) expert += s->bytes_per_expert;
  }
  f.expert_bytes = std::max(f.expert_bytes, expert);
}

MemoryFacts memory_facts(const gguf::File& file, const KvCacheConfig& config, int64_t n_ctx, LayerSpan span) {
  const ModelSummary m = read_model_summary(file);
  int first_mtp = -1;
  if (m.n_layer && m.n_mtp_layers && *m.n_mtp_layers > 0)
    first_mtp = static_cast<int>(std::clamp<int64_t>(*m.n_layer - *m.n_mtp_layers, 0, INT32_MAX));
  const int n_forward = first_mtp >= 0 ? first_mtp : static_cast<int>(std::clamp<int64_t>(m.n_layer.value_or(0), 0, INT32_MAX));
  const bool whole = span.begin == 0 && (span.end < 0 || span.end >= n_forward);
  MemoryFacts f;
  std::map<int, uint64_t> expert_bytes;  // layer → one expert's bytes
  for (const auto& t : file.tensors()) {
    const std::optional<int> layer = layer_of(t.name);
    if (layer && first_mtp >= 0 && *layer >= first_mtp) continue;  // never read by the forward pass
    if (!whole && !stage_reads_tensor(file, t.name, span, n_forward)) continue;
    if (classify_tensor(t.name, first_mtp, m.arch) != TensorClass::RoutedExpert) {
      f.resident_bytes = sat_add(f.resident_bytes, t.nbytes);
      continue;
    }
    f.routed_bytes = sat_add(f.routed_bytes, t.nbytes);
    if (auto s = expert_slice(t); s && layer) expert_bytes[*layer] += s->bytes_per_expert;
  }
  for (const auto& [layer, b] : expert_bytes) f.expert_bytes = std::max(f.expert_bytes, b);
  f.n_expert = static_cast<int>(m.n_expert.value_or(0));
  f.n_expert_used = static_cast<int>(m.n_expert_used.value_or(0));
  const KvEstimate kv = estimate_kv(m, n_ctx, config);
  f.kv_bytes_per_token = kv.bytes_per_token;
  f.kv_fixed_bytes = kv.fixed_bytes;
  if (!whole && kv.n_layer > 0) {
    // A stage's share of the layers (splittable architectures have the same K/V width per layer
    // or nearly so; the engine plans with its own cache's exact size).
    const int64_t n = std::max(0, (span.end < 0 ? n_forward : std::min(span.end, n_forward)) - span.begin);
    f.kv_bytes_per_token = f.kv_bytes_per_token / static_cast<uint64_t>(kv.n_layer) * static_cast<uint64_t>(n);
    f.kv_fixed_bytes = f.kv_fixed_bytes / static_cast<uint64_t>(kv.n_layer) * static_cast<uint64_t>(n);
  }
  return f;
}

ModelReport analyze_model(const gguf::File& file, const SizingOptions& opts) {
  ModelReport r;
  r.model = read_model_summary(file);
  r.tokenizer = read_tokenizer_summary(file);

  if (r.model.n_layer && r.model.n_mtp_layers && *r.model.n_mtp_layers > 0)
    r.first_mtp_layer = static_cast<int>(
        std::clamp<int64_t>(*r.model.n_layer - *r.model.n_mtp_layers, 0, INT32_MAX));

  struct LayerExperts {
    uint64_t routed_bytes = 0;
    int n_experts = 0;
  };
  std::map<int, LayerBytes> by_layer;  // key -1: global tensors, sorted first
  std::map<int, LayerExperts> experts;
  for (const auto& t : file.tensors()) {
    const TensorClass c = classify_tensor(t.name, r.first_mtp_layer, r.model.arch);
    const std::optional<int> layer = layer_of(t.name);
    LayerBytes& lb = by_layer[layer.value_or(-1)];
    lb.layer = layer;
    lb.bytes[static_cast<size_t>(c)] += t.nbytes;
    r.class_totals[static_cast<size_t>(c)] += t.nbytes;
    r.total_bytes += t.nbytes;
    if (c != TensorClass::RoutedExpert || !layer) continue;
    LayerExperts& le = experts[*layer];
    le.routed_bytes += t.nbytes;
    if (auto s = expert_slice(t)) le.n_experts = std::max(le.n_experts, s->first_expert + s->n_experts);
  }
  for (auto& [key, lb] : by_layer) r.layers.push_back(lb);
  for (const auto& entry : experts) {
    const int layer = entry.first, n_experts = entry.second.n_experts;
    if (n_experts == 0) continue;
    const uint64_t per_expert = entry.second.routed_bytes / static_cast<uint64_t>(n_experts);
    auto same = std::find_if(r.expert_shapes.begin(), r.expert_shapes.end(), [&](const ExpertShape& s) {
      return s.n_experts == n_experts && s.bytes_per_expert == per_expert;
    });
    if (same == r.expert_shapes.end()) r.expert_shapes.push_back({{layer}, n_experts, per_expert});
    else same->layers.push_back(layer);
  }

  const int64_t trained = r.model.context_length.value_or(0);
  const int64_t ctx = opts.ctx.value_or(trained > 0 ? std::min<int64_t>(trained, 4096) : 4096);
  if (ctx <= 0) fail("context size {} must be positive", ctx);
  r.kv = estimate_kv(r.model, ctx, opts.kv);

  MemoryBudget budget;
  if (opts.ram) {
    budget = memory_budget(MemInfo{}, *opts.ram, "--ram");
  } else {
    const MemInfo mi = read_meminfo();
    if (!mi.available_bytes())
      fail("cannot determine the available memory (no /proc/meminfo or cgroup limit); pass --ram SIZE");
    budget = memory_budget(mi, 0, "");
  }
  r.facts = memory_facts(file, opts.kv, ctx);
  r.plan = plan_memory(r.facts, {.budget = budget, .n_ctx = ctx, .n_slots = opts.slots});
  r.decode = estimate_decode(r.facts, r.plan, opts.disk_bytes_per_second, opts.ram_tokens_per_second);
  r.verdict = make_verdict(r.facts, r.plan, budget.bytes);
  r.verdict.flags = suggested_flags(r.facts, r.plan);
  return r;
}

}  // namespace sluice
