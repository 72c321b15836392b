// Draft tokens for speculative decoding and the adaptive draft length. A drafter proposes tokens
// that may follow the context; the generation loop verifies them with the pending token in one
// batched forward pass (MoE experts are then read once for the union of the rows) and keeps the
// prefix the sampler agrees with. Drafting never changes what is generated, only how many forward
// passes it takes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/sluice.h"

namespace sluice {

// Fails (sluice::Error naming the flag) unless 0 ≤ min ≤ max ≤ kMaxDraft.
inline constexpr int kMaxDraft = 64;
void check_draft_options(const DraftOptions& o);

// Prompt lookup: finds the latest earlier occurrence of the context's last n tokens (n from
// kNgramMax down to kNgramMin) and proposes the tokens that followed it, at most `n_max`.
// Returns nothing when no suffix recurs.
std::vector<int32_t> ngram_draft(std::span<const int32_t> ctx, int n_max);

// How many tokens to draft next, from how the previous drafts fared. Starts at max; after a
// step whose drafts were all accepted it grows by one; after a partial acceptance it becomes the
// accepted count plus one; after a step with none accepted drafting pauses for a number of steps
// that doubles with each consecutive such step (up to kMaxPause) — a rejected draft costs a wider
// forward pass and, with streamed experts, the reads of the experts only its rows chose.
class DraftLength {
 public:
  static constexpr int kMaxPause = 32;
  explicit DraftLength(const DraftOptions& o);

  // Tokens to draft this step (0: decode one token), before the drafter's own limit.
  int next();
  void record(int drafted, int accepted);

 private:
  int min_, max_;
  int current_;
  int pause_ = 0;       // steps left without drafting
  int next_pause_ = 1;  // length of the next pause
};

}  // namespace sluice
