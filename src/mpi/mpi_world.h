// MPI for multi-process runs (pipeline stages, or expert parallel) (only the standard C API: Open MPI and MPICH both work). MPI is
// started only when a launcher says the job has more than one process, so a plain `sluice run`
// (or mpirun -np 1) behaves exactly as without MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experts/expert_placement.h"
#include "experts/expert_shard.h"
#include "model/head_shard.h"
#include "plan/memory_plan.h"
#include "runtime/stage_link.h"

namespace sluice {

class MpiWorld {
 public:
  // Starts MPI when mpirun (or another PMI launcher) runs this process as one of several; null
  // otherwise.
  static std::unique_ptr<MpiWorld> start(int* argc, char*** argv);
  ~MpiWorld();  // finalises MPI
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return host_; }
  // Every rank's string, in rank order (a collective: every rank calls it).
  std::vector<std::string> all_gather(const std::string& mine) const;
  // The link of this rank's stage; stage i is rank i, running spans[i]. A receive (or a send
  // waiting for its receiver) that takes longer than `timeout_seconds` fails naming the stage.
  std::shared_ptr<StageLink> link(const std::vector<LayerSpan>& spans, double timeout_seconds);
  // --split-mode experts: one object that is the run's link (orders, sampled tokens), this
  // rank's expert shard (ownership, slot exchange) and its share of the output head (its rows,
  // its logit columns traded with the others), with the same deadlines.
  struct ExpertLink {
    std::shared_ptr<StageLink> link;
    std::shared_ptr<ExpertShard> shard;
    std::shared_ptr<HeadShard> head;
  };
  ExpertLink expert_link(const ExpertPlacement& placement, double timeout_seconds);
  // Rank 0's `text` on every rank (a collective: every rank calls it; the others' text is unused).
  std::string broadcast_from_root(const std::string& text) const;
  // Ends every rank of the job with `code` (after an error on this one).
  [[noreturn]] void abort(int code) const;

 private:
  MpiWorld(int rank, int size, std::string host);
  int rank_, size_;
  std::string host_;
  std::vector<std::string> hosts_;
};

}  // namespace sluice
