// `sluice serve` (see server.h): the HTTP server's setup — authentication, CORS, the error reply
// and access log, /health and /metrics, the route families (completions in routes.h, the
// llama-server and Ollama families in their own files, the web page in web_routes.cpp) and the
// signal-driven shutdown.
// Connection handling (deadlines, limits, binding) lives in http_server.h.
#include "server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "api.h"
#include "http_server.h"
#include "routes.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Api api_of_path(const std::string& path) {
  return path.starts_with("/v1/messages") ? Api::kMessages : Api::kChat;
}

// /health: "ok", and for a pipeline its stage count and state; a failed pipeline is an error (the
// server is shutting down) with the failed stage named in the message.
std::string health_json(const SchedulerStats& s) {
  nlohmann::json j;
  j["status"] = s.pipeline_error.empty() ? "ok" : "error";
  if (s.pipeline_stages > 1) {
    j["pipeline"] = {{"stages", s.pipeline_stages},
                     {"state", s.pipeline_error.empty() ? "ok" : "failed"}};
    if (!s.pipeline_error.empty()) j["pipeline"]["error"] = s.pipeline_error;
  }
  return j.dump();
}

std::string metrics_text(const SchedulerStats& s, Counters& counters) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP sluice_{0} {1}\n# TYPE sluice_{0} {2}\nsluice_{0} {3}\n", name, help, type, value);
  };
  metric("requests_total", "counter", "requests accepted by the scheduler", s.requests);
  metric("pipeline_stages", "gauge", "MPI pipeline stages running the model (1: one process)",
         s.pipeline_stages);
  metric("pipeline_micro_batches", "gauge",
         "groups of requests in flight through the pipeline at once", s.micro_batches);
  metric("requests_rejected_total", "counter", "requests refused (queue full, context overflow, invalid)", s.rejected);
  metric("requests_completed_total", "counter", "requests that finished normally", s.completed);
  metric("requests_cancelled_total", "counter", "requests cancelled (client disconnect)", s.cancelled);
  metric("requests_timed_out_total", "counter", "requests stopped by the per-request timeout", s.timed_out);
  metric("requests_failed_total", "counter", "requests ended by an engine error", s.failed);
  metric("prompt_tokens_total", "counter", "prompt tokens of accepted requests", s.prompt_tokens);
  metric("prompt_tokens_reused_total", "counter", "prompt tokens served from a cached prefix", s.reused_tokens);
  metric("generated_tokens_total", "counter", "tokens generated", s.generated_tokens);
  metric("queue_depth", "gauge", "requests waiting for a slot", s.queue_depth);
  metric("active_requests", "gauge", "requests holding a slot", s.active);
  metric("batch_size", "gauge", "tokens in the last forward pass", s.last_batch_rows);
  metric("batch_sequences", "gauge", "sequences in the last forward pass", s.last_batch_sequences);
  metric("forward_steps_total", "counter", "forward passes", s.steps);
  metric("batch_tokens_total", "counter", "tokens over all forward passes", s.batch_rows);
  metric("decode_tokens_total", "counter", "rows of decoding requests (pending tokens and drafts) over all forward passes", s.decode_rows);
  metric("draft_tokens_total", "counter", "draft tokens verified (speculative decoding)", s.drafted_tokens);
  metric("draft_accepted_tokens_total", "counter", "draft tokens accepted", s.accepted_tokens);
  metric("draft_acceptance_rate", "gauge", "accepted / drafted tokens since start",
         s.drafted_tokens ? static_cast<double>(s.accepted_tokens) / s.drafted_tokens : 0.0);
  metric("decode_tokens_per_step", "gauge", "generated tokens per forward pass since start",
         s.steps ? static_cast<double>(s.generated_tokens) / s.steps : 0.0);
  metric("forward_seconds_total", "counter", "time spent in forward passes", s.busy_seconds);
  metric("kv_cache_bytes", "gauge", "KV cache blocks allocated", s.kv_bytes);
  metric("kv_disk_hits_total", "counter", "prompts that restored a prefix from --kv-disk", s.kv_disk_hits);
  metric("kv_disk_misses_total", "counter", "--kv-disk lookups without a longer prefix on disk", s.kv_disk_misses);
  metric("kv_disk_read_bytes_total", "counter", "bytes of KV state read from --kv-disk", s.kv_disk_bytes_read);
  metric("kv_disk_written_bytes_total", "counter", "bytes of KV state written to --kv-disk", s.kv_disk_bytes_written);
  metric("kv_disk_bytes", "gauge", "bytes of this model's KV state in --kv-disk", s.kv_disk_bytes);
  metric("kv_disk_skipped_total", "counter", "unreadable --kv-disk files skipped", s.kv_disk_skipped);
  metric("expert_requests_total", "counter", "routed expert fetches", s.experts.requests);
  metric("expert_cache_hits_total", "counter", "expert fetches served from the RAM cache", s.experts.hits);
  metric("expert_cache_misses_total", "counter", "expert fetches read from storage", s.experts.misses);
  metric("expert_bytes_read_total", "counter", "bytes of experts read from storage", s.experts.bytes_read);
  metric("expert_read_seconds_total", "counter", "time spent reading experts", s.experts.read_seconds);
  metric("expert_stall_seconds_total", "counter", "time compute waited for expert reads", s.experts.stall_seconds);
  metric("expert_prefetch_issued_total", "counter", "experts prefetched by router lookahead", s.experts.prefetch_issued);
  metric("expert_prefetch_used_total", "counter", "prefetched experts that were used", s.experts.prefetch_used);
  metric("routing_trace_rows", "gauge", "rows written to --routing-trace (route-stats --rows A:B counts a span)",
         s.routing_trace_rows);
  out += counters.ttft.text("time_to_first_token_seconds", "seconds from submission to the first generated text");
  out += counters.latency.text("request_duration_seconds", "seconds from submission to the last event of a completion");
  out += "# HELP sluice_http_responses_total HTTP responses by status code\n# TYPE sluice_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(counters.mutex);
  for (const auto& [code, n] : counters.by_status) out += fmt::format("sluice_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  return out;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// "Bearer KEY" with the scheme in any case (RFC 7235), or the x-api-key header.
bool authorized(const httplib::Request& req, const std::string& key) {
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  bool scheme = auth.size() > kScheme.size();
  for (size_t i = 0; scheme && i < kScheme.size(); ++i) scheme = std::tolower(static_cast<unsigned char>(auth[i])) == kScheme[i];
  if (scheme && auth.substr(kScheme.size()) == key) return true;
  return req.get_header_value("x-api-key") == key;
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, ms);
}

// A client's text for messages and the log: control bytes and bytes outside ASCII as %XX, so a
// decoded %00 neither cuts a line nor hides what follows it.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch >= 0x7f || ch == '%') out += fmt::format("%{:02X}", ch);
    else out += static_cast<char>(ch);
  }
  return out;
}

// The error a status set by httplib or the connection layer stands for, in words naming the limit
// (and the flag that sets it) a request ran into.
ApiError connection_error(const httplib::Request& req, int status, const std::optional<ReadProblem>& problem,
                          const ServerOptions& o, const ConnectionLimits& limits) {
  const auto error = [&](std::string message, const char* code) {
    return ApiError(status, std::move(message), status >= 500 ? "server_error" : "invalid_request_error", "", code);
  };
  switch (status) {
    case 400:
      if (problem && !problem->detail.empty()) return error("invalid request framing: " + problem->detail, "bad_request");
      return error("the request could not be read as HTTP/1.1 (a malformed request line, header field or body)",
                   "bad_request");
    case 404: return error(fmt::format("no route for {} {}", printable(req.method), printable(req.path)), "not_found");
    case 408:
      return error(fmt::format("the request did not arrive within the server's {} s (--read-timeout)", o.request_read_seconds),
                   "request_timeout");
    case 411:
      return error(fmt::format("a {} request needs a Content-Length header (or Transfer-Encoding: chunked)",
                               printable(req.method)),
                   "length_required");
    case 413:
      // cpp-httplib caps form-encoded bodies at 8 KiB, below --max-body: curl -d sends that type.
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
        return error("a form-encoded request body (Content-Type: application/x-www-form-urlencoded, curl -d's default) "
                     "may not exceed 8192 bytes; send the JSON as Content-Type: application/json",
                     "payload_too_large");
      return error(fmt::format("the request body is larger than the server's limit of {} bytes (--max-body)", o.max_body_bytes),
                   "payload_too_large");
    case 414: return error("the request line is longer than 8192 bytes", "uri_too_long");
    case 429:
      return error(fmt::format("{} connections from {} are already sending a request (--max-reading-per-client); retry "
                               "when one is done",
                               limits.max_reading_per_address, req.remote_addr),
                   "too_many_connections");
    case 431:
      return error(fmt::format("the request header is larger than {} bytes, or one of its lines larger than {} bytes",
                               limits.max_header_bytes, CPPHTTPLIB_HEADER_MAX_LENGTH),
                   "header_too_large");
    case 503:
      return error(fmt::format("the server is already reading {} requests (--max-reading); retry shortly", limits.max_reading),
                   "server_busy");
    default: return error(fmt::format("HTTP error {}", status), "");
  }
}

}  // namespace

size_t worker_threads(const ServerOptions& o) {
  return static_cast<size_t>(o.scheduler.n_parallel + o.scheduler.max_queue + o.max_reading + 8);
}

uint64_t memory_overhead(const ServerOptions& o) { return worker_threads(o) * (uint64_t{64} << 10); }

int serve(Engine& engine, const ServerOptions& o) {
  // A failed pipeline stage ends the server: its requests have their error by then; SIGTERM (to
  // this process, taken by the signal thread below) stops accepting, and serve returns 1.
  std::atomic<bool> pipeline_failed{false};
  SchedulerOptions so = o.scheduler;
  so.on_pipeline_failure = [&](const std::string& why) {
    pipeline_failed = true;
    std::fprintf(stderr, "sluice serve: error: %s; shutting down\n", why.c_str());
    kill(getpid(), SIGTERM);
  };
  Scheduler scheduler(engine, so);
  Counters counters;
  Routes routes(engine, scheduler, o, counters);
  // Routes and the methods they accept, for 405 answers.
  std::map<std::string, std::string> methods = {{"/health", "GET"},
                                                {"/metrics", "GET"},
                                                {"/v1/models", "GET"},
                                                {"/v1/models/", "GET"},
                                                {"/v1/chat/completions", "POST"},
                                                {"/chat/completions", "POST"},
                                                {"/v1/completions", "POST"},
                                                {"/completions", "POST"},
                                                {"/v1/messages", "POST"},
                                                {"/v1/messages/count_tokens", "POST"}};
  ConnectionLimits limits;
  limits.request_read_deadline = std::chrono::milliseconds(static_cast<int64_t>(o.request_read_seconds * 1000));
  limits.max_reading = o.max_reading;
  limits.max_reading_per_address = o.max_reading_per_client > 0 ? o.max_reading_per_client : std::max(1, o.max_reading / 4);
  HttpServer svr(limits);
  const size_t workers = worker_threads(o);
  svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  svr.set_payload_max_length(o.max_body_bytes);

  svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty() || req.path == "/health" || req.method == "OPTIONS" ||
        (req.method == "GET" && is_web_asset_path(req.path)) || authorized(req, o.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, api_of_path(req.path), ApiError(401, "invalid or missing API key", "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses set by httplib itself (404, 413, 414, 400 for unreadable requests) and by the
  // connection layer (408, 411, 413, 429, 431, 503, 400 for bad framing) get a JSON error body
  // saying what happened; a known path asked with the wrong method is 405 with an Allow header.
  svr.set_error_reply([&](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::optional<ReadProblem> problem = HttpServer::read_problem();
    if (problem) res.status = problem->status;
    const auto route = methods.find(req.path);
    const bool model_path = req.path.rfind("/v1/models/", 0) == 0;  // GET matches every one
    if (res.status == 404 && (route != methods.end() || model_path)) {
      const std::string allow = route != methods.end() ? route->second : "GET";
      res.status = 405;
      res.set_header("Allow", allow);
      send_error(res, api_of_path(req.path),
                 ApiError(405, fmt::format("{} does not accept {}; use {}", printable(req.path), printable(req.method), allow),
                          "invalid_request_error", "", "method_not_allowed"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (res.status == 429 || res.status == 503) res.set_header("Retry-After", "1");
    send_error(res, api_of_path(req.path), connection_error(req, res.status, problem, o, svr.limits()));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    send_error(res, api_of_path(req.path), ApiError(500, msg, "server_error"));
  });
  if (!o.cors_origin.empty()) {
    svr.set_post_routing_handler([&](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Origin", o.cors_origin);
      if (o.cors_origin != "*") res.set_header("Vary", "Origin");
    });
    svr.Options(".*", routed([&](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
      res.set_header("Access-Control-Max-Age", "600");
    }));
  }
  // Access log: UTC time, client, method, path, status and milliseconds from the request's arrival
  // to the end of the response (for a stream, its last event).
  // A request refused before its request line arrived has no method or path: "-" stands for them.
  svr.set_access_log([&](const httplib::Request& req, const httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(counters.mutex);
      ++counters.by_status[res.status];
    }
    if (req.path != "/health" && req.path != "/metrics")
      std::fprintf(stderr, "%s %s %s %s %d %.1f ms\n", utc_now().c_str(), req.remote_addr.c_str(),
                   req.method.empty() ? "-" : printable(req.method).c_str(),
                   req.path.empty() ? "-" : printable(req.path).c_str(), res.status,
                   1000.0 * seconds_since(HttpServer::request_started()));
  });

  svr.Get("/health", routed([&](const httplib::Request&, httplib::Response& res) {
    const SchedulerStats st = scheduler.stats();
    res.set_content(health_json(st), "application/json");
    if (!st.pipeline_error.empty()) res.status = 503;
  }));
  svr.Get("/metrics", routed([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(scheduler.stats(), counters), "text/plain; version=0.0.4");
  }));
  // "/v1/models/" (a trailing slash, as some clients join paths) is the list too.
  svr.Get(R"(/v1/models/?)", routed([&](const httplib::Request&, httplib::Response& res) { routes.models(res); }));
  svr.Get(R"(/v1/models/(.+))", routed([&](const httplib::Request& req, httplib::Response& res) { routes.model(req.matches[1], res); }));
  // Without /v1 too, as llama-server answers them (clients whose base URL lacks it).
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    svr.Post(path, routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kChat, req, res); }));
  for (const char* path : {"/v1/completions", "/completions"})
    svr.Post(path, routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kCompletion, req, res); }));
  svr.Post("/v1/messages", routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kMessages, req, res); }));
  svr.Post("/v1/messages/count_tokens",
           routed([&](const httplib::Request& req, httplib::Response& res) { routes.count_tokens(req, res); }));
  add_llama_routes(svr, routes, methods);
  add_ollama_routes(svr, routes, methods);
  add_responses_routes(svr, routes, methods);
  add_embeddings_routes(svr, routes, methods);
  add_web_routes(svr, routes, methods);

  std::string error;
  const int port = svr.bind(o.host, o.port, error);
  if (port < 0) {
    std::fprintf(stderr, "sluice serve: error: %s\n", error.c_str());
    return 1;
  }
  if (!is_loopback(o.host) && o.api_key.empty())
    std::fprintf(stderr, "sluice serve: warning: listening on %s without --api-key: anyone who can reach this address can use the server\n",
                 o.host.c_str());
  std::printf("sluice serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);

  // SIGINT/SIGTERM are blocked in every thread; this one takes them, stops accepting (listen
  // returns once every connection is done), and when the grace period is over, or at a second
  // signal, ends what still runs.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const bool pipeline = engine.info().n_stages > 1;
  std::atomic<bool> listen_done{false};
  std::thread signals([&] {
    siginfo_t info{};
    const int sig = sigwaitinfo(&set, &info);
    if (listen_done) return;
    // In a pipeline, mpirun (this process's parent) signals every rank when one of them ends and
    // kills them a moment later: no grace period can be granted then, and the scheduler may be
    // stuck waiting for a dead stage, so running requests are answered at once; so too after a
    // stage failed (on_pipeline_failure signals this process). A signal from anyone else (a user
    // stopping rank 0) is a shutdown like any other: the grace period holds.
    const bool job_ending = pipeline && info.si_code == SI_USER && info.si_pid == getppid();
    const double grace = job_ending || pipeline_failed ? 0 : o.shutdown_grace_seconds;
    std::fprintf(stderr,
                 "sluice serve: %s%s: no new connections; %zu running request(s) may finish within "
                 "%g s (again: end them now)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", job_ending ? " from mpirun" : "", routes.running(), grace);
    svr.stop_accepting();
    const auto until = Clock::now() + std::chrono::duration<double>(std::max(0.0, grace));
    const timespec tick{0, 100'000'000};
    while (!listen_done) {
      if (sigtimedwait(&set, nullptr, &tick) > 0 || Clock::now() >= until || pipeline_failed) {
        if (!listen_done) std::fprintf(stderr, "sluice serve: ending %zu request(s)\n", routes.running());
        routes.end_all(job_ending ? "the server is shutting down: mpirun is ending its MPI job (a pipeline "
                                    "stage ended, or the job was stopped)"
                                  : "");
        return;
      }
    }
  });
  const bool ok = svr.listen_after_bind() || svr.draining();  // a drained listen reports an accept error
  svr.stop();
  listen_done = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes sigwait when listen ended on its own
  signals.join();
  std::fprintf(stderr, "sluice serve: stopped\n");
  return ok && !pipeline_failed ? 0 : 1;
}

}  // namespace sluice::server
