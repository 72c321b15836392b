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
};

// Serves until SIGINT or SIGTERM (which the caller must have blocked in every thread, so that this
// function's signal thread receives them). Returns the process exit code.
int serve(Engine& engine, const ServerOptions& options);

}  // namespace sluice::server
