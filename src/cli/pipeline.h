// Pipeline-parallel runs for the commands: under `mpirun -np N` (with an MPI build) each process
// becomes one stage of N, with the layers the placement plan (plan/stage_plan.h) or --stages
// gives it. Without MPI, or with one process, every function here leaves things as they are.
#pragma once

#include <vector>

#include "cli/options.h"
#include "plan/stage_plan.h"

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
// Under a pipeline: sets this stage's layers and link in `o` (rank 0 prints the plan).
void apply_pipeline(const ModelFlags& f, EngineOptions& o);

}  // namespace sluice::cli
