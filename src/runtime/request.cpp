// One request's generation state (see request.h).
#include "runtime/request.h"

#include <algorithm>

namespace sluice {

SamplingParams sampling_params(const SamplingOptions& o) {
  return {o.temperature,      o.top_k,          o.top_p, o.min_p, o.repeat_penalty, o.presence_penalty,
          o.frequency_penalty, o.penalty_last_n, o.seed};
}

int reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt) {
  const size_t limit = std::min(cached.size(), prompt.empty() ? 0 : prompt.size() - 1);
  size_t n = 0;
  while (n < limit && cached[n] == prompt[n]) ++n;
  return static_cast<int>(n);
}

Generation::Generation(const Tokenizer& tokenizer, const GenerateOptions& options, std::span<const int32_t> prompt,
                       int n_reused)
    : tokenizer_(tokenizer),
      options_(options),
      sampler_(sampling_params(options.sampling)),
      decoder_(tokenizer),
      stops_(options.stop) {
  for (int32_t t : prompt) sampler_.accept(t);
  result_.n_reused = n_reused;
  result_.n_prompt = static_cast<int>(prompt.size()) - n_reused;
}

void Generation::end(FinishReason reason) {
  result_.finish = reason;
  finished_ = true;
}

bool Generation::limit_reached(int n_used, int n_ctx) {
  if (!finished_ && (static_cast<int>(result_.tokens.size()) >= options_.max_tokens || n_used >= n_ctx))
    end(FinishReason::kLength);
  return finished_;
}

Generation::Sampled Generation::sample(std::span<const float> logits) { return accept(sampler_.sample(logits)); }

Generation::Sampled Generation::accept(int32_t token) {
  Sampled s;
  s.token = token;
  sampler_.accept(s.token);
  result_.tokens.push_back(s.token);
  if (options_.stop_at_eog && tokenizer_.is_eog(s.token)) {
    end(FinishReason::kEog);
    return s;
  }
  s.emitted = true;
  s.text = stops_.push(decoder_.push(s.token));
  result_.text += s.text;
  if (stops_.matched()) end(FinishReason::kStop);
  else if (static_cast<int>(result_.tokens.size()) >= options_.max_tokens) end(FinishReason::kLength);
  return s;
}

void Generation::cancel() { end(FinishReason::kCancelled); }

GenerateResult Generation::finish(std::string* tail) {
  tail->clear();
  if (result_.finish == FinishReason::kLength || result_.finish == FinishReason::kEog) {
    *tail = stops_.flush(decoder_.flush());
    result_.text += *tail;
  }
  return std::move(result_);
}

}  // namespace sluice
