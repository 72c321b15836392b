// The channel between the stages of a pipeline-parallel run (mpirun -np N): every stage runs the
// same driver over the same tokens (SPMD), each on its own layers. What crosses between stages is
// the fp32 hidden state, forward from stage s to s+1, and each sampled token id, from the last
// stage (the only one with logits) to all others. Every receive has a deadline and fails with a
// sluice::Error naming the stage (rank, host, layers) it waited for; no call blocks forever.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sluice {

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int stage() const = 0;
  virtual int n_stages() const = 0;
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == n_stages() - 1; }
  // true: stages run consecutive layers (--split-mode layer) and hidden states cross; false:
  // every process runs every layer and splits the experts (--split-mode experts), so a step has
  // no pipeline to fill and is not cut into micro-batches.
  virtual bool splits_layers() const { return true; }
  // Hidden state of one forward step to the next stage.
  virtual void send_hidden(std::span<const float> hidden) = 0;
  // Hidden state of one forward step from the previous stage; its size must be hidden.size().
  virtual void recv_hidden(std::span<float> hidden) = 0;
  // The last stage passes the tokens it sampled (one per sequence of a step, -1 where none) and
  // sends them to every other stage; the others pass a span of the same size and get them back.
  virtual void share_tokens(std::span<int32_t> tokens) = 0;
  int32_t share_token(int32_t token) {
    share_tokens(std::span<int32_t>(&token, 1));
    return token;
  }
  // Stage 0 sends `bytes` to every other stage; the others get them in `bytes` (any size). What a
  // batch scheduler decided before a step (admissions, cancellations, shutdown) travels this way,
  // so every stage runs the same steps.
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  // Seconds a receive waits before it fails (the stages' --stage-timeout).
  virtual double timeout() const = 0;
  // "stage 1 (rank 1 on host-b, layers 8:16)", for messages.
  virtual std::string describe(int stage) const = 0;
  // What crossed the wire so far: bytes and messages sent and received, and the seconds spent
  // in receives from probing the message to having it (the transfer, not the wait for it).
  struct Traffic {
    uint64_t bytes_sent = 0, bytes_received = 0, messages = 0;
    double transfer_seconds = 0, wait_seconds = 0;  // wait: until a message was there to receive
  };
  virtual Traffic traffic() const = 0;
};

}  // namespace sluice
