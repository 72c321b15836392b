// Pipeline-parallel runs for the commands: under `mpirun -np N` (with an MPI build) each process
// becomes one stage of N, with the layers the placement plan (plan/stage_plan.h) or --stages
// gives it. Without MPI, or with one process, every function here leaves things as they are.
#pragma once

#include <functional>
#include <vector>

#include "cli/options.h"
#include "experts/expert_placement.h"
#include "kv/kv_cache.h"
#include "plan/stage_plan.h"

namespace sluice::gguf { class File; }

namespace sluice::cli {

// Starts MPI when launched by mpirun with several processes; main calls it before anything else
// and pipeline_stop() after the command returns. Throws for a command that cannot run as a
// pipeline (run, logits, bench and inspect can).
void pipeline_start(int* argc, char*** argv, const char* command);
// One line per stage for --stats: what this stage sent and received, and its waits.
void print_pipeline_traffic(const EngineOptions& o, int n_tokens);
void pipeline_stop();
// After an error: ends every process of the job with `code`; without a pipeline, returns.
void pipeline_abort(int code);
// This process's stage and the number of stages (0 and 1 without a pipeline).
int pipeline_rank();
int pipeline_size();
// Only `rank` writes the command's standard output (the others' goes to /dev/null).
void pipeline_output_from(int rank);
// Each host's budget and disk rate as the planner sees them: every rank's under MPI (a
// collective), else this host's, `n` times.
std::vector<HostFacts> pipeline_hosts(const ModelFlags& f, int n);
// The placement of `f.model` on `hosts` (--stages when given).
PipelinePlan pipeline_plan(const ModelFlags& f, const std::vector<HostFacts>& hosts);
// Under a pipeline: sets this stage's layers and link in `o` (rank 0 prints the plan); with
// --split-mode experts, every rank's link and expert shard instead.
void apply_pipeline(const ModelFlags& f, EngineOptions& o);
// Whether host `rank`, holding the share `held` (0 to 1) of the routed experts, keeps them all in
// RAM under its budget with a margin to spare beyond the planner's own.
using HeldFits = std::function<bool(int rank, double held)>;
// The planner's answer for `hosts` (each with its budget; `req` the run's context and --experts;
// a forced stream or mmap holds no replicas). `file` must outlive the function.
HeldFits experts_in_ram(const gguf::File& file, const KvCacheConfig& kv, const PlanRequest& req,
                        const std::vector<HostFacts>& hosts);
// --expert-replicas auto: at most this share of a layer's experts as replicas on each process.
inline constexpr double kAutoReplicaShare = 1.0 / 8;
// --split-mode experts over `n_ranks` processes: each layer's experts placed from the model's heat
// profile on this host (round-robin without one), with `replicas` per layer on each process
// (kAutoReplicas: the most up to kAutoReplicaShare that `fits` every host, halving from there);
// `how` (optional) says which, per rank.
ExpertPlacement plan_expert_split(const gguf::File& file, const std::string& model_path,
                                  int n_ranks, int replicas, const HeldFits& fits,
                                  std::string* how);

}  // namespace sluice::cli
