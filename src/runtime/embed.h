// Embeddings of token sequences (Scheduler::embed runs them on its thread between steps).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/engine_impl.h"

namespace sluice {

// The final hidden states of `tokens` after the output norm, pooled and L2-normalised: n_embd
// floats. Evaluates in a fresh KV cache; the caller holds the engine's expert store. Throws
// sluice::Error for an empty input, one longer than the engine's context, and in a pipeline.
std::vector<float> embed_tokens(Engine::Impl& engine, std::span<const int32_t> tokens, Pooling pooling);

}  // namespace sluice
