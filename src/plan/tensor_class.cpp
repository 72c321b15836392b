// Tensor-name classification. Names are "blk.N.BASE[.E].SUFFIX" inside blocks and "BASE.SUFFIX"
// outside; only BASE (and the legacy expert index E) decides the class, so .weight, .bias and
// .scale variants of one tensor always land together.
#include "plan/tensor_class.h"

#include <charconv>
#include <cstdint>

#include "model/archs/registry.h"

namespace sluice {

namespace {

std::optional<int> parse_index(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::string_view first_component(std::string_view s) { return s.substr(0, s.find('.')); }

// The block-relative part of "blk.N.rest"; empty when `name` is not a block tensor.
std::string_view block_rest(std::string_view name) {
  if (!name.starts_with("blk.")) return {};
  std::string_view after = name.substr(4);
  size_t dot = after.find('.');
  if (dot == std::string_view::npos || !parse_index(after.substr(0, dot))) return {};
  return after.substr(dot + 1);
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool is_dense_ffn_base(std::string_view base) {
  return base == "ffn_gate" || base == "ffn_up" || base == "ffn_down" || base == "ffn_gate_up";
}

// Legacy Mixtral layout: blk.N.ffn_{gate,up,down}.E.weight, one tensor per expert.
std::optional<int> legacy_expert_index(std::string_view rest) {
  std::string_view base = first_component(rest);
  if (base != "ffn_gate" && base != "ffn_up" && base != "ffn_down") return std::nullopt;
  if (rest.size() == base.size()) return std::nullopt;
  return parse_index(first_component(rest.substr(base.size() + 1)));
}

bool is_merged_expert_base(std::string_view base) {
  return base == "ffn_gate_exps" || base == "ffn_up_exps" || base == "ffn_down_exps" ||
         base == "ffn_gate_up_exps";
}

TensorClass classify_global(std::string_view name) {
  std::string_view base = first_component(name);
  if (contains(base, "_norm")) return TensorClass::Norm;
  if (base == "token_embd" || base == "token_types" || base == "position_embd" ||
      base.starts_with("per_layer_"))
    return TensorClass::Embedding;
  if (base == "output") return TensorClass::Output;
  return TensorClass::Other;
}

}  // namespace

std::string_view tensor_class_name(TensorClass c) {
  switch (c) {
    case TensorClass::RoutedExpert: return "routed_expert";
    case TensorClass::SharedExpert: return "shared_expert";
    case TensorClass::Attention: return "attention";
    case TensorClass::Norm: return "norm";
    case TensorClass::Router: return "router";
    case TensorClass::DenseFfn: return "dense_ffn";
    case TensorClass::Embedding: return "embedding";
    case TensorClass::Output: return "output";
    case TensorClass::Other: return "other";
  }
  return "other";
}

std::optional<int> layer_of(std::string_view name) {
  if (block_rest(name).empty()) return std::nullopt;
  std::string_view after = name.substr(4);
  return parse_index(after.substr(0, after.find('.')));
}

TensorClass classify_tensor(std::string_view name, int first_mtp_layer, std::string_view arch) {
  std::string_view rest = block_rest(name);
  if (rest.empty()) return classify_global(name);
  if (first_mtp_layer >= 0 && *layer_of(name) >= first_mtp_layer) return TensorClass::Other;

  std::string_view base = first_component(rest);
  if (base == "nextn") return TensorClass::Other;
  // A family sluice runs says what it streams (ArchEntry::routed_tensor); the name patterns of
  // every layout are the fallback for the rest.
  const ArchEntry* entry = arch.empty() ? nullptr : find_arch(arch);
  if (entry && entry->routed_tensor ? entry->routed_tensor(rest) : is_merged_expert_base(base) || legacy_expert_index(rest))
    return TensorClass::RoutedExpert;
  if (contains(base, "_shexp")) return TensorClass::SharedExpert;
  // Before Attention: attn_q_norm, attn_kv_a_norm and friends are norms, not projections.
  if (contains(base, "_norm")) return TensorClass::Norm;
  if (base.starts_with("ffn_gate_inp") || base == "exp_probs_b") return TensorClass::Router;
  // Every attn_* base is some attention projection (q/k/v/output/qkv, MLA q_a/q_b/kv_a_mqa/kv_b/
  // k_b/v_b) or attention state (sinks); all stay resident with the layer.
  if (base.starts_with("attn_")) return TensorClass::Attention;
  if (is_dense_ffn_base(base)) return TensorClass::DenseFfn;
  return TensorClass::Other;
}

std::optional<ExpertSlice> expert_slice(const gguf::TensorInfo& t) {
  std::string_view rest = block_rest(t.name);
  if (rest.empty()) return std::nullopt;
  if (auto e = legacy_expert_index(rest)) return ExpertSlice{*e, 1, t.nbytes};
  if (!is_merged_expert_base(first_component(rest)) || t.n_dims < 2) return std::nullopt;
  const int64_t n = t.ne[t.n_dims - 1];
  if (n <= 0 || n > INT32_MAX || t.nbytes % static_cast<uint64_t>(n) != 0) return std::nullopt;
  return ExpertSlice{0, static_cast<int>(n), t.nbytes / static_cast<uint64_t>(n)};
}

}  // namespace sluice
