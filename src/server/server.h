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
};

// Serves until SIGINT or SIGTERM (which the caller must have blocked in every thread, so that this
// function's signal thread receives them); then stops accepting, lets running requests finish for
// up to shutdown_grace_seconds, and ends the rest with an error (streams: an error event and
// [DONE]). Returns the process exit code (1 when the port cannot be bound, e.g. in use).
int serve(Engine& engine, const ServerOptions& options);

}  // namespace sluice::server
