// The step primitives (see step.h).
#include "runtime/step.h"

#include "core/error.h"
#include "model/model.h"

namespace sluice {

void engine_forward(Engine::Impl& e, const Batch& batch, KvCache& kv, std::vector<float>& logits,
                    std::vector<float>* final_hidden) {
  Model& m = *e.model;
  if (!e.link) {
    // forward_stage leaves the final residual rows in its buffer; the caller's when it wants them.
    std::vector<float> rows;
    return m.forward_stage(*e.pool, batch, kv, *e.experts, final_hidden ? *final_hidden : rows,
                           logits);
  }
  std::vector<float> hidden;
  if (!m.first_stage()) {
    hidden.resize(batch.size() * m.hidden_width());
    e.link->recv_hidden(hidden);
  }
  m.forward_stage(*e.pool, batch, kv, *e.experts, hidden, logits);
  if (!m.last_stage()) e.link->send_hidden(hidden);
}

Generation::Step decode_step(Engine::Impl& e, Generation& gen, std::span<const float> rows,
                             std::span<const int32_t> drafts, int n_used, int n_ctx,
                             const std::function<bool(const Generation::Sampled&)>& emit) {
  const DecodeJob job{&gen, rows, drafts, n_used, emit};
  return std::move(decode_steps(e, std::span<const DecodeJob>(&job, 1), n_ctx)[0]);
}

std::vector<Generation::Step> decode_steps(Engine::Impl& e, std::span<const DecodeJob> jobs,
                                           int n_ctx) {
  std::vector<Generation::Step> out(jobs.size());
  // Every stage knows when a step sampled nothing (prefill chunks that end no prompt): no message,
  // so the next chunk can start on this stage while later stages still compute this one.
  if (jobs.empty()) return out;
  if (e.link)
    for (const DecodeJob& j : jobs)
      if (!j.drafts.empty()) fail("a pipeline does not verify drafts");
  // One process, or expert parallel: every process has every logit row (HeadShard::gather_logits)
  // and the same generation state (prompt, options, seed, tokens so far), so each samples the same
  // tokens itself and none waits for a message carrying them.
  if (!e.link || !e.link->splits_layers()) {
    for (size_t i = 0; i < jobs.size(); ++i)
      out[i] = jobs[i].gen->take(jobs[i].rows, jobs[i].drafts, jobs[i].n_used, n_ctx, jobs[i].emit);
    return out;
  }
  // Every stage counts the same tokens against the same limits, so all stop together; -1 marks a
  // sequence that reached its limit and sampled nothing.
  std::vector<int32_t> tokens(jobs.size(), -1);
  if (e.link->last()) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      out[i] = jobs[i].gen->take(jobs[i].rows, {}, jobs[i].n_used, n_ctx, jobs[i].emit);
      if (!out[i].tokens.empty()) tokens[i] = out[i].tokens.back();
    }
    e.link->share_tokens(tokens);
    return out;
  }
  e.link->share_tokens(tokens);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Generation& gen = *jobs[i].gen;
    if (gen.limit_reached(jobs[i].n_used, n_ctx)) continue;
    // The last stage samples nothing where a grammar allows no token; so does this one.
    if (tokens[i] < 0 && gen.grammar_blocked()) continue;
    if (tokens[i] < 0)
      fail("{} sampled no token where {} expected one: the stages disagree on the step",
           e.link->describe(e.link->n_stages() - 1), e.link->describe(e.link->stage()));
    out[i] = gen.take_sampled(tokens[i], jobs[i].emit);
  }
  return out;
}

}  // namespace sluice
