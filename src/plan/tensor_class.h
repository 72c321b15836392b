// What a GGUF tensor is for, from its name: whether it is a routed expert is its family's rule
// (ArchEntry::routed_tensor) when sluice runs the architecture, name patterns otherwise. The expert
// store places tensors by this (routed experts stream from SSD, everything else stays resident)
// and `inspect` sizes a model with the same function, so its verdict describes what the engine
// will actually do.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "gguf/gguf.h"

namespace sluice {

enum class TensorClass {
  RoutedExpert,  // blk.N.ffn_{gate,up,down,gate_up}_exps.*, legacy blk.N.ffn_{gate,up,down}.E.weight
  SharedExpert,  // *_shexp*
  Attention,     // attn_* projections (incl. MLA q_a/q_b/kv_a_mqa/kv_b/k_b/v_b), sinks, their biases
  Norm,          // any *_norm*
  Router,        // ffn_gate_inp*, exp_probs_b
  DenseFfn,      // ffn_{gate,up,down,gate_up} of dense layers
  Embedding,     // token_embd, per_layer_* embeddings, position / token-type embeddings
  Output,        // output.weight (and its bias)
  Other,         // nextn/MTP layers, rope_freqs, anything not recognised
};
constexpr int kTensorClassCount = 9;
constexpr std::array<TensorClass, kTensorClassCount> kAllTensorClasses = {
    TensorClass::RoutedExpert, TensorClass::SharedExpert, TensorClass::Attention,
    TensorClass::Norm,         TensorClass::Router,       TensorClass::DenseFfn,
    TensorClass::Embedding,    TensorClass::Output,       TensorClass::Other};

// "routed_expert", "shared_expert", ... (snake_case; used as JSON keys).
std::string_view tensor_class_name(TensorClass c);

// `first_mtp_layer`: index of the first nextn/MTP block when the model carries some (GLM-4.5's
// `nextn_predict_layers` trailing blocks); every tensor of those blocks is Other because the
// forward pass never runs them. -1 when there are none. `arch`: general.architecture; empty (or
// one sluice cannot run): routed experts by the name patterns of every known layout.
TensorClass classify_tensor(std::string_view name, int first_mtp_layer = -1, std::string_view arch = {});

// N of a "blk.N." name; nullopt for global tensors and malformed indices.
std::optional<int> layer_of(std::string_view name);

// How the experts of a routed-expert tensor are laid out. Merged tensors hold all experts along
// their last dimension (weights [n_in, n_out, n_expert], biases [n_out, n_expert]), so expert e
// is the contiguous byte range [e·bytes_per_expert, (e+1)·bytes_per_expert); legacy Mixtral
// files hold one expert per tensor.
struct ExpertSlice {
  int first_expert = 0;
  int n_experts = 0;
  uint64_t bytes_per_expert = 0;
};
// nullopt when `t` is not a routed-expert tensor or its bytes do not divide evenly by experts.
std::optional<ExpertSlice> expert_slice(const gguf::TensorInfo& t);

}  // namespace sluice
