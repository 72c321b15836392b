// Matrix multiplication of float activations with a weight matrix in any GGML block type: the
// operation that dominates every forward pass. Activations are converted once per call into the
// format the weight type's dot kernel reads (see quant/dispatch.h), then output rows are split
// across the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "quant/dispatch.h"
#include "quant/types.h"
#include "tensor/tensor.h"

namespace sluice {

// y (n_tokens × n_out, row-major) = x (n_tokens × n_in, row-major) · Wᵀ, parallel over the pool.
// Throws sluice::Error when n_in is not a whole number of blocks, the stride is shorter than a
// row, or the type holds no real numbers. Not reentrant per calling thread: the activation scratch
// belongs to the calling thread.
void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y);

// While an ExactRows scope is alive on the calling thread, matmul computes every token row the
// way a one-token call does (no GEMM; one row per dot kernel call, or a multi-row kernel that
// gives each row the single-row kernel's result), so the rows of a batch equal one-token
// evaluations bit for bit. Speculative decoding verifies drafts
// in such batches, which keeps its output identical to decoding one token at a time; the weights
// are still read once per tile of tokens. Types that only have a GEMM keep it.
class ExactRows {
 public:
  explicit ExactRows(bool on);
  ~ExactRows();
  ExactRows(const ExactRows&) = delete;
  ExactRows& operator=(const ExactRows&) = delete;

 private:
  bool previous_;
};

// The same with an explicit kernel set instead of the process-wide choice (tests, benchmarks).
void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y,
            Isa isa);

// y0 = x · W0ᵀ and y1 = x · W1ᵀ (a feed-forward's gate and up projections): when both matrices
// have one type and row length, x is converted once and both run in one pool round trip, which
// halves the synchronisations of a decode step's expert projections.
void matmul_pair(ThreadPool& pool, const MatView& w0, const MatView& w1, const float* x,
                 int64_t n_tokens, float* y0, float* y1);

// Independent products y = x · Wᵀ with their own weights and inputs (a MoE layer's experts), all
// in one pool round trip: their parts are claimed from one counter, so threads move on to the
// next matrix instead of meeting at a barrier after each, and a small matrix's imbalance is
// absorbed by the others. Each output equals what matmul(pool, w, x, n_tokens, y) gives alone.
// Consecutive tasks with the same x, length and activation format share one conversion.
struct MatmulTask {
  MatView w;
  const float* x;
  int64_t n_tokens;
  float* y;
};
void matmul_tasks(ThreadPool& pool, std::span<const MatmulTask> tasks);

}  // namespace sluice
