// `sluice serve`: loads a model and serves the OpenAI / Anthropic HTTP API with continuous
// batching (src/server). Signals are blocked (block_serve_signals, called by main before any
// thread starts, MPI's included) so that only the server's signal thread receives SIGINT/SIGTERM;
// SIGPIPE is ignored (a vanished client is a failed write). Under mpirun, stage 0 serves and the
// other stages follow its scheduler.
#include <fmt/format.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/options.h"
#include "runtime/prefill_chunk.h"
#include "cli/pipeline.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "server/server.h"

namespace sluice::cli {

void block_serve_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int cmd_serve(int argc, char** argv) {
#ifdef __GLIBC__
  // A server runs hundreds of HTTP worker threads; glibc would give up to 8 malloc arenas per core
  // to them, each keeping its own free pages (~0.75 MiB each in the soak, 12 MiB on 2 cores) that
  // no memory plan counts. Under a cgroup limit that slack got the server OOM-killed once the KV
  // blocks filled up (scripts/soak, 21 minutes in). Two arenas keep it small; request handling is
  // not allocation-bound.
  mallopt(M_ARENA_MAX, 2);
#endif
  CLI::App app{"Serve the OpenAI-compatible HTTP API (chat/completions, completions, messages)", "sluice serve"};
  ModelFlags mf;
  add_model_flags(app, mf);
  add_chat_template_flags(app, mf);
  // A server step's pass holds rows of several requests; the trace records them as one pass and
  // appears whole when the server shuts down.
  add_routing_trace_flag(app, mf);
  server::ServerOptions so;
  std::string max_body = "4MiB";
  app.add_option("--host", so.host, "address to bind (default loopback only)")->capture_default_str();
  app.add_option("--port", so.port, "TCP port (0: any free port, printed at startup)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--parallel", so.scheduler.n_parallel, "requests decoded together in one batch (also -np)")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--max-queue", so.scheduler.max_queue, "requests that may wait for a slot; more get 503")->check(CLI::Range(0, 4096))->capture_default_str();
  std::string kv_disk_max;
  app.add_option("--kv-disk", so.scheduler.kv_disk_dir, "keep evicted KV prefixes (and idle ones at exit) in DIR and restore them for prompts sharing them");
  app.add_option("--kv-disk-max", kv_disk_max, "most bytes --kv-disk may hold, e.g. 20GB (default: unlimited)")->check(byte_size());
  app.add_option("--prefill-chunk", so.scheduler.prefill_chunk, "prompt tokens evaluated per step (keeps running requests streaming)")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' (or x-api-key)");
  app.add_option("--timeout", so.timeout_seconds, "seconds a request may take (0: none)")->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--max-body", max_body, "largest request body, e.g. 4MiB (larger: 413)")->check(byte_size())->capture_default_str();
  app.add_option("--cors", so.cors_origin, "allow browser requests from ORIGIN (\"*\": any origin)");
  app.add_option("--shutdown-grace", so.shutdown_grace_seconds, "seconds running requests may finish after SIGTERM")->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  app.add_option("--read-timeout", so.request_read_seconds, "seconds a client may take to send a whole request")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  app.add_option("--max-reading", so.max_reading, "connections that may be sending a request at once; more are refused (503)")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--max-reading-per-client", so.max_reading_per_client,
                 "of them from one client address; more are refused (429) (0: a quarter of --max-reading)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option(
         "--micro-batches", so.scheduler.micro_batches,
         "pipeline: groups of requests in flight through the stages at once (0: one per stage)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  std::string pooling = pooling_name(so.pooling);
  app.add_option("--pooling", pooling, "how /v1/embeddings pools the final hidden states: mean, last or cls (the first token)")
      ->check(CLI::IsMember({"mean", "last", "cls"}))
      ->capture_default_str();
  DraftFlags df;
  add_draft_flags(app, df);
  app.add_option("--alias", so.model_name, "model id reported by /v1/models (default: the file name)");
  SLUICE_PARSE(app, argc, argv);
  so.max_body_bytes = parse_byte_size(max_body, "--max-body");
  so.pooling = *parse_pooling(pooling);
  if (!kv_disk_max.empty()) {
    if (so.scheduler.kv_disk_dir.empty()) throw CLI::ValidationError("--kv-disk-max", "needs --kv-disk DIR");
    so.scheduler.kv_disk_max = parse_byte_size(kv_disk_max, "--kv-disk-max");
  }
  so.scheduler.draft = draft_options(df);
  if (!df.mtp.empty() && pipeline_size() > 1)
    throw CLI::ValidationError("--mtp", "a pipeline verifies no drafts, so it loads no MTP block");
  if (so.model_name.empty()) so.model_name = std::filesystem::path(mf.model).stem().string();

  block_serve_signals();

  EngineOptions eo = engine_options(mf);
  // llama-server's -ub/-b size the scheduler's prompt steps, unless --prefill-chunk says otherwise.
  if ((mf.ubatch > 0 || mf.batch > 0) && app.count("--prefill-chunk") == 0)
    so.scheduler.prefill_chunk = session_prefill_chunk();
  eo.kv_slots = so.scheduler.n_parallel;  // the memory plan counts every slot's KV cache
  // and the server's own threads, on the stage that serves HTTP
  eo.overhead_bytes = pipeline_rank() == 0 ? server::memory_overhead(so) : 0;
  // A pipeline verifies no drafts.
  set_engine_draft(eo, df, so.scheduler.draft, pipeline_size() == 1);
  apply_pipeline(mf, eo);
  pipeline_output_from(0);
  auto engine = Engine::load(eo);
  if (pipeline_rank() != 0) {
    // A later pipeline stage: no HTTP, it runs the steps stage 0's scheduler orders until it stops.
    Scheduler follower(*engine, so.scheduler);
    follower.join();
    return 0;
  }
  const ModelInfo& mi = engine->info();
  SLUICE_LOG_INFO("model: {} ({}, {} layers, {} experts top-{}), loaded in {:.2f} s; {}", mf.model, mi.architecture,
                  mi.n_layer, mi.n_expert, mi.n_expert_used, engine->load_seconds(), mi.experts_detail);
  SLUICE_LOG_INFO("chat template: {}",
                  mi.chat_template.empty() ? "none (plain \"User: ...\\nAssistant:\" fallback)"
                  : eo.chat_template.empty()   ? "from the model"
                                               : "from --chat-template");
  return server::serve(*engine, so);
}

}  // namespace sluice::cli
