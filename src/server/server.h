// `sluice serve`: an OpenAI- and Anthropic-compatible HTTP server (cpp-httplib) over one Engine and
// its continuous-batching Scheduler. Includes only the public API.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/sluice.h"

namespace sluice::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (printed on stdout)
  std::string api_key;              // empty: no authentication
  std::string model_name;           // the id /v1/models reports
  SchedulerOptions scheduler;
  double timeout_seconds = 600;     // per request, from arrival to the last token; ≤ 0: none
  uint64_t max_body_bytes = 4 << 20;  // larger bodies get 413
  std::string cors_origin;          // non-empty: CORS headers allowing this origin ("*": any)
  double shutdown_grace_seconds = 30;  // after SIGTERM, running requests may finish this long
  double request_read_seconds = 10;    // the whole header and body of a request must arrive this fast
  int max_reading = 256;               // connections still sending a request; more are refused
  int max_reading_per_client = 0;      // of them from one client address; 0: a quarter of max_reading
  Pooling pooling = Pooling::kMean;    // how /v1/embeddings pools the final hidden states (--pooling)
};

// The HTTP worker threads serve() runs: every waiting or streaming request holds one, and so does
// every connection still sending its request; a reserve on top keeps /health and /metrics served.
size_t worker_threads(const ServerOptions& options);
// The memory serve() needs beside the engine's, for the memory plan (EngineOptions::overhead_bytes):
// its worker threads, each counted at 64 KiB: the stack pages a worker touches serving requests
// (24 KiB measured over chat, completion, streaming and malformed requests) and the kernel memory
// of a thread that a cgroup charges (28 KiB: 9.1 MiB for 337 threads in scripts/soak). Request
// bodies are transient and left to the plan's margin.
uint64_t memory_overhead(const ServerOptions& options);

// Serves until SIGINT or SIGTERM (which the caller must have blocked in every thread, so that this
// function's signal thread receives them); then stops accepting, lets running requests finish for
// up to shutdown_grace_seconds, and ends the rest with an error (streams: an error event and
// [DONE]). Returns the process exit code (1 when the port cannot be bound, e.g. in use).
int serve(Engine& engine, const ServerOptions& options);

}  // namespace sluice::server
