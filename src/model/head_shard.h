// Expert parallel splits the output head by vocabulary: every process runs every layer, but the
// head (n_vocab rows, the largest matrix a decode token reads) would otherwise be read in full by
// each of them. With a HeadShard, each process multiplies only its own contiguous range of the
// head's rows (head_rows_of) and the processes trade their logit columns, so each has the whole
// rows and samples them itself. Each logit is one row's dot product with the same input whichever
// process computes it, so the gathered logits are bit-identical to one process's.
// The model sees this interface, never MPI (src/mpi implements it).
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// Rows [begin, end) of the head, of n_vocab.
struct HeadRows {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The rows process `rank` of `n_ranks` computes: contiguous and as equal as whole rows allow, in
// rank order, together every row once.
inline HeadRows head_rows_of(int rank, int n_ranks, int64_t n_vocab) {
  return {n_vocab * rank / n_ranks, n_vocab * (rank + 1) / n_ranks};
}

class HeadShard {
 public:
  virtual ~HeadShard() = default;
  // This process's index among those sharing the head, and their number.
  virtual int head_rank() const = 0;
  virtual int head_ranks() const = 0;
  // `part` (n_rows, head_rows_of(head_rank()).size()): this process's logit columns of n_rows
  // rows, sent to every other process; `logits` becomes (n_rows, n_vocab) with every process's
  // columns. Throws sluice::Error naming a process that does not answer within the deadline, or
  // that sent a part of another size.
  virtual void gather_logits(const std::vector<float>& part, int64_t n_rows, int64_t n_vocab,
                             std::vector<float>& logits) = 0;
};

}  // namespace sluice
