// Pipeline glue (see pipeline.h). The MPI parts compile only in an MPI build (SLUICE_HAVE_MPI).
#include "cli/pipeline.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "core/disk_probe.h"
#include "core/error.h"
#include "core/log.h"
#include "core/meminfo.h"
#include "core/units.h"
#include "experts/heat_profile.h"
#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "plan/sizing.h"
#include "runtime/expert_setup.h"
#include "runtime/stage_link.h"
#ifdef SLUICE_HAVE_MPI
#include "mpi/mpi_world.h"
#endif

namespace sluice::cli {

namespace {

#ifdef SLUICE_HAVE_MPI
std::unique_ptr<MpiWorld>& world() {
  static std::unique_ptr<MpiWorld> w;
  return w;
}
#endif

// This host's name and memory budget (no disk rate).
HostFacts host_budget(const EngineOptions& o) {
  HostFacts h;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  h.host = name;
  h.budget =
      memory_budget(o.mem_limit > 0 ? MemInfo{} : read_meminfo(), o.mem_limit, "--mem-limit");
  return h;
}

HostFacts this_host(const ModelFlags& f, const EngineOptions& o) {
  HostFacts h = host_budget(o);
  // The rate at which this host's disk serves expert-sized random reads (a short probe).
  const MemoryFacts facts = memory_facts(*gguf::File::open(f.model));
  if (facts.routed_bytes > 0 && o.experts != ExpertMode::kRam) {
    try {
      h.disk_bytes_per_second =
          probe_disk(f.model, 0.2, std::max<uint64_t>(facts.expert_bytes, 4096), 2)
              .bytes_per_second;
    } catch (const Error&) {
      h.disk_bytes_per_second = 0;
    }
  }
  return h;
}

#ifdef SLUICE_HAVE_MPI
std::string encode(const HostFacts& h) {
  return fmt::format("{}\n{}\n{}\n{}\n{}", h.host, h.budget.bytes, h.budget.hard ? 1 : 0,
                     h.disk_bytes_per_second, h.budget.source);
}

HostFacts decode(const std::string& s) {
  std::istringstream in(s);
  HostFacts h;
  int hard = 0;
  std::getline(in, h.host);
  in >> h.budget.bytes >> hard >> h.disk_bytes_per_second;
  in.ignore();
  std::getline(in, h.budget.source);
  h.budget.hard = hard != 0;
  return h;
}
#endif

}  // namespace

void pipeline_start(int* argc, char*** argv, const char* command) {
#ifdef SLUICE_HAVE_MPI
  world() = MpiWorld::start(argc, argv);
  const std::string c = command;
  if (world() && c != "run" && c != "logits" && c != "bench" && c != "serve" && c != "inspect")
    fail(
        "'{}' does not run as a pipeline of {} processes (run, logits, bench, serve and inspect "
        "do); start it without mpirun",
        c, world()->size());
#else
  (void)argc;
  (void)argv;
  (void)command;
#endif
}

void print_pipeline_traffic(const EngineOptions& o, int n_tokens) {
  if (!o.link) return;
  const StageLink::Traffic t = o.link->traffic();
  const double per_token =
      static_cast<double>(t.bytes_sent + t.bytes_received) / std::max(n_tokens, 1);
  fmt::print(stderr,
             "{} {}: sent {} received {} in {} messages ({:.1f} KiB/token), {:.3f} ms/token "
             "receiving, {:.3f} "
             "ms/token waiting for {}\n",
             o.link->splits_layers() ? "pipeline" : "expert parallel",
             o.link->describe(o.link->stage()), format_bytes(t.bytes_sent),
             format_bytes(t.bytes_received), t.messages, per_token / 1024.0,
             t.transfer_seconds * 1e3 / std::max(n_tokens, 1),
             t.wait_seconds * 1e3 / std::max(n_tokens, 1),
             o.link->splits_layers() ? "neighbours" : "the other ranks");
}

void pipeline_stop() {
#ifdef SLUICE_HAVE_MPI
  world().reset();
#endif
}

void pipeline_abort(int code) {
#ifdef SLUICE_HAVE_MPI
  if (world()) world()->abort(code);
#else
  (void)code;
#endif
}

int pipeline_rank() {
#ifdef SLUICE_HAVE_MPI
  if (world()) return world()->rank();
#endif
  return 0;
}

int pipeline_size() {
#ifdef SLUICE_HAVE_MPI
  if (world()) return world()->size();
#endif
  return 1;
}

void pipeline_output_from(int rank) {
  if (pipeline_size() == 1 || pipeline_rank() == rank) return;
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    std::fflush(stdout);
    dup2(null, STDOUT_FILENO);
    close(null);
  }
}

std::vector<HostFacts> pipeline_hosts(const ModelFlags& f, int n) {
  const HostFacts mine = this_host(f, engine_options(f));
#ifdef SLUICE_HAVE_MPI
  if (world()) {
    if (n != world()->size())
      fail("--plan {}: this job has {} MPI processes; plan for that many", n, world()->size());
    std::vector<HostFacts> out;
    for (const std::string& s : world()->all_gather(encode(mine))) out.push_back(decode(s));
    return out;
  }
#endif
  return std::vector<HostFacts>(n, mine);
}

namespace {

// What the planner is asked for `f` (context, slots, cache size, --experts) on a model of `hp`.
PlanRequest plan_request(const ModelFlags& f, const EngineOptions& o, const HParams& hp) {
  PlanRequest req;
  req.n_ctx = f.ctx > 0 ? f.ctx : hp.n_ctx_train > 0 ? std::min(4096, hp.n_ctx_train) : 4096;
  req.n_slots = o.kv_slots;
  req.cache_bytes = o.cache_bytes;
  switch (o.experts) {
    case ExpertMode::kAuto:
      break;
    case ExpertMode::kRam:
      req.forced = Placement::kRam;
      break;
    case ExpertMode::kMmap:
      req.forced = Placement::kMmap;
      break;
    case ExpertMode::kStream:
      req.forced = Placement::kStream;
      break;
  }
  return req;
}

}  // namespace

PipelinePlan pipeline_plan(const ModelFlags& f, const std::vector<HostFacts>& hosts) {
  const EngineOptions o = engine_options(f);
  auto file = gguf::File::open(f.model);
  const HParams hp = load_model(*file)->hparams();
  const PlanRequest req = plan_request(f, o, hp);
  const KvCacheConfig kv = engine_kv_config(o.kv_type_k, o.kv_type_v);
  auto facts_for = [&](LayerSpan s) { return memory_facts(*file, kv, req.n_ctx, s); };
  const int n = static_cast<int>(hosts.size());
  if (!f.stages.empty())
    return evaluate_pipeline(facts_for, parse_stages(f.stages, hp.n_layer, n), hosts, req);
  return plan_pipeline(facts_for, hp.n_layer, hosts, req);
}

HeldFits experts_in_ram(const gguf::File& file, const KvCacheConfig& kv, const PlanRequest& req,
                        const std::vector<HostFacts>& hosts) {
  const MemoryFacts all = memory_facts(file, kv, req.n_ctx);
  const int n = static_cast<int>(hosts.size());
  return [&file, all, req, hosts, n](int rank, double held) {
    // Replicas are copies in RAM; a forced stream or mmap keeps none.
    if (req.forced && *req.forced != Placement::kRam) return false;
    MemoryFacts facts = all;
    facts.routed_bytes = static_cast<uint64_t>(static_cast<double>(all.routed_bytes) * held);
    facts.resident_bytes -= unread_head_bytes(file, rank, n);
    PlanRequest q = req;
    q.forced.reset();
    q.budget = hosts[rank].budget;
    const MemoryPlan m = plan_memory(facts, q);
    // Replicas only speed things up, so they must also leave a second margin unplanned: under a
    // 4 GiB cgroup limit on the 16-layer preset, 4 per layer that the plan still fitted took each
    // rank to its limit (peak 4.00 GiB against 3.75 without), the kernel reclaimed mapped weights,
    // and decode fell from 28.4 to 24.0 t/s.
    return m.ok && m.placement == Placement::kRam && m.headroom >= m.margin;
  };
}

ExpertPlacement plan_expert_split(const gguf::File& file, const std::string& model_path,
                                  int n_ranks, int replicas, const HeldFits& fits,
                                  std::string* how) {
  const std::unique_ptr<Model> m = load_model(file);
  const ExpertLayout& layout = m->expert_layout();
  std::vector<bool> moe(layout.layers.size());
  for (size_t il = 0; il < moe.size(); ++il) moe[il] = layout.has_layer(static_cast<int>(il));
  if (std::none_of(moe.begin(), moe.end(), [](bool b) { return b; }))
    fail("--split-mode experts: {} has no routed experts to split", model_path);
  const HeatProfile heat(heat_profile_path(model_path, file.total_size()),
                         static_cast<int>(moe.size()), layout.n_expert);
  const std::span<const double> counts =
      heat.loaded() ? std::span<const double>(heat.counts()) : std::span<const double>();
  std::string replica_how;
  if (replicas == kAutoReplicas) {
    // The most replicas up to the auto share, halving until every host keeps all it holds in RAM.
    const int cap = std::min(max_expert_replicas(layout.n_expert, n_ranks),
                             static_cast<int>(layout.n_expert * kAutoReplicaShare));
    replicas = 0;
    for (int r = cap; r > 0; r /= 2) {
      const ExpertPlacement p = place_experts(moe, layout.n_expert, n_ranks, counts, r);
      bool all_fit = true;
      for (int rank = 0; rank < n_ranks && all_fit; ++rank) all_fit = fits(rank, p.held_fraction(rank));
      if (all_fit) {
        replicas = r;
        break;
      }
    }
    replica_how = replicas ? fmt::format("; --expert-replicas auto: {} per layer", replicas)
                           : "; --expert-replicas auto: none (a host's budget does not hold "
                             "them in RAM)";
  }
  const ExpertPlacement p = place_experts(moe, layout.n_expert, n_ranks, counts, replicas);
  if (how)
    *how = fmt::format("{}{}: {}",
                       heat.loaded() ? "placed by the heat profile's load"
                                     : "dealt round-robin (no heat profile)",
                       replica_how, p.summary(heat.counts()));
  return p;
}

#ifdef SLUICE_HAVE_MPI
namespace {

// --split-mode experts: rank 0 places each layer's experts from its host's heat profile (the
// counts a single-process streaming run saved) and every rank takes that placement, so all agree
// even when their hosts hold different profiles. --expert-replicas auto weighs every rank's
// budget, which each reports.
void apply_expert_split(const ModelFlags& f, EngineOptions& o) {
  MpiWorld& w = *world();
  const int replicas = parse_expert_replicas(f.expert_replicas);
  std::vector<HostFacts> hosts;
  if (replicas == kAutoReplicas)
    for (const std::string& s : w.all_gather(encode(host_budget(engine_options(f)))))
      hosts.push_back(decode(s));
  std::string text;
  if (w.rank() == 0) {
    std::string how;
    const auto file = gguf::File::open(f.model);
    const EngineOptions eo = engine_options(f);
    const PlanRequest req = plan_request(f, eo, load_model(*file)->hparams());
    const ExpertPlacement p = plan_expert_split(
        *file, f.model, w.size(), replicas,
        experts_in_ram(*file, engine_kv_config(eo.kv_type_k, eo.kv_type_v), req, hosts), &how);
    SLUICE_LOG_INFO("experts split over {} processes ({})", w.size(), how);
    text = p.encode();
  }
  const ExpertPlacement placement = ExpertPlacement::decode(w.broadcast_from_root(text));
  const MpiWorld::ExpertLink el = w.expert_link(placement, f.stage_timeout);
  o.link = el.link;
  o.expert_shard = el.shard;
  o.head_shard = el.head;
}

}  // namespace
#endif

void apply_pipeline(const ModelFlags& f, EngineOptions& o) {
  if (f.expert_replicas != "auto" && f.split_mode != "experts")
    fail("--expert-replicas {}: replicas are for --split-mode experts", f.expert_replicas);
#ifdef SLUICE_HAVE_MPI
  if (!world()) {
    if (!f.stages.empty())
      fail("--stages needs an MPI job of several processes (mpirun -np N sluice …)");
    if (f.split_mode == "experts")
      fail("--split-mode experts needs an MPI job of several processes (mpirun -np N sluice …)");
    return;
  }
  if (f.split_mode == "experts") {
    if (!f.stages.empty())
      fail("--stages splits layers; with --split-mode experts every process runs every layer");
    return apply_expert_split(f, o);
  }
  const std::vector<HostFacts> hosts = pipeline_hosts(f, world()->size());
  const PipelinePlan plan = pipeline_plan(f, hosts);
  if (!plan.ok) fail("pipeline placement: {}", plan.reason);
  std::vector<LayerSpan> spans;
  for (const StagePlan& s : plan.stages) spans.push_back(s.span);
  const int r = world()->rank();
  if (r == 0) {
    SLUICE_LOG_INFO("pipeline: {} stages; {}", spans.size(), plan.reason);
    for (size_t i = 0; i < spans.size(); ++i)
      SLUICE_LOG_INFO("  stage {}: rank {} on {}, layers {}:{}, budget {} ({}), experts {}, est. {:.2f} ms/token",
                 i, i, hosts[i].host, spans[i].begin, spans[i].end,
                 format_bytes(hosts[i].budget.bytes), hosts[i].budget.source,
                 placement_name(plan.stages[i].memory.placement),
                 plan.stages[i].seconds_per_token * 1e3);
  }
  o.layer_begin = spans[r].begin;
  o.layer_end = spans[r].end;
  o.link = world()->link(spans, f.stage_timeout);
#else
  (void)o;
  if (!f.stages.empty() || f.split_mode == "experts")
    fail(
        "{} needs a build with MPI (cmake -DSLUICE_MPI=ON with Open MPI or MPICH installed)",
        f.stages.empty() ? "--split-mode experts" : "--stages");
#endif
}

}  // namespace sluice::cli
