// The step primitives every runtime loop is built from (Session::generate, the Scheduler): one
// forward pass of the engine's model, whole or as one pipeline stage, and the sampling of a step's
// logit rows, which in a pipeline the last stage does and shares with the others (expert-parallel
// processes each hold every logit and sample alike).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "runtime/engine_impl.h"
#include "runtime/request.h"

namespace sluice {

// One forward step of the engine's model: the whole model, or this pipeline stage's layers with
// the hidden state received from the previous stage and sent to the next. `logits` is left empty
// on every stage but the last. `hidden` (the whole model only): every row's final residual before
// the output norm, which MTP drafts start from.
void engine_forward(Engine::Impl& engine, const Batch& batch, KvCache& kv,
                    std::vector<float>& logits, std::vector<float>* hidden = nullptr);

// One decode step of a generation (Generation::take on the step's logit rows). In a pipeline,
// which does not draft, the last stage samples and shares the token, and the other stages
// (without logits) account the token they receive the same way. Expert-parallel processes, which
// all have the logits, each sample them.
Generation::Step decode_step(Engine::Impl& engine, Generation& gen, std::span<const float> rows,
                             std::span<const int32_t> drafts, int n_used, int n_ctx,
                             const std::function<bool(const Generation::Sampled&)>& emit);

// decode_step for every sequence of one batched step, in the batch's order. In a pipeline the
// last stage's tokens for all of them cross in one message.
struct DecodeJob {
  Generation* gen = nullptr;
  std::span<const float> rows;  // empty on a pipeline stage without logits
  std::span<const int32_t> drafts;
  int n_used = 0;
  std::function<bool(const Generation::Sampled&)> emit;
};
std::vector<Generation::Step> decode_steps(Engine::Impl& engine, std::span<const DecodeJob> jobs,
                                           int n_ctx);

}  // namespace sluice
