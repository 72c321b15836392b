// HTTP routes of `sluice serve` (see server.h). Each request is parsed and validated on an httplib
// worker thread, submitted to the Scheduler, and answered from its handle: non-streaming requests
// wait for the final event; streaming requests write SSE events from a chunked content provider.
// A failed write (the client went away) ends the provider, and its releaser cancels the request so
// the scheduler frees its KV at the next token boundary. While a streaming request waits with
// nothing to send (queued, long prefill), an SSE comment is written every second so a vanished
// client is noticed there too; a non-streaming request polls its connection while it waits and
// is cancelled when the client is gone. Connection handling (deadlines, limits, binding) lives in
// http_server.h.
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

namespace sluice::server {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// A Prometheus histogram of seconds.
class Histogram {
 public:
  void observe(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < kBounds.size(); ++i)
      if (seconds <= kBounds[i]) ++counts_[i];
    ++count_;
    sum_ += seconds;
  }
  std::string text(const char* name, const char* help) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out = fmt::format("# HELP sluice_{0} {1}\n# TYPE sluice_{0} histogram\n", name, help);
    for (size_t i = 0; i < kBounds.size(); ++i) out += fmt::format("sluice_{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts_[i]);
    return out + fmt::format("sluice_{0}_bucket{{le=\"+Inf\"}} {1}\nsluice_{0}_sum {2}\nsluice_{0}_count {1}\n", name, count_, sum_);
  }

 private:
  static constexpr std::array<double, 12> kBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  std::mutex mutex_;
  std::array<uint64_t, 12> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct Counters {
  std::mutex mutex;
  std::map<int, uint64_t> by_status;  // HTTP responses by status code
  Histogram ttft;                     // submission to first generated text
  Histogram latency;                  // submission to the final event
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void send_error(httplib::Response& res, Api api, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_text(error_body(api, e)), "application/json");
}

Api api_of_path(const std::string& path) { return path == "/v1/messages" ? Api::kMessages : Api::kChat; }

// Streaming state shared by the content provider and its releaser.
struct Stream {
  std::shared_ptr<CompletionHandle> handle;
  ResponseFormat format;
  bool include_usage = false;
  bool begun = false, finished = false, first_text = true;
  double timeout_seconds = 0;
  Clock::time_point submitted;
};

ApiError shutdown_error() {
  return ApiError(503, "the server is shutting down and the request did not finish within its grace period",
                  "server_error", "", "server_shutdown");
}

ApiError timeout_error(double secs) {
  return ApiError(504, fmt::format("the request did not finish within the server's {} s timeout", secs),
                  "timeout_error", "", "timeout");
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
  out += counters.ttft.text("time_to_first_token_seconds", "seconds from submission to the first generated text");
  out += counters.latency.text("request_duration_seconds", "seconds from submission to the last event of a completion");
  out += "# HELP sluice_http_responses_total HTTP responses by status code\n# TYPE sluice_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(counters.mutex);
  for (const auto& [code, n] : counters.by_status) out += fmt::format("sluice_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  return out;
}

class Routes {
 public:
  Routes(Engine& engine, Scheduler& scheduler, const ServerOptions& options, Counters& counters)
      : engine_(engine), scheduler_(scheduler), options_(options), counters_(counters),
        id_prefix_(fmt::format("{:08x}", std::random_device{}())) {}

  void completion(Api api, const httplib::Request& req, httplib::Response& res) {
    ParsedRequest pr;
    try {
      pr = parse_request(api, req.body, engine_);
    } catch (const ApiError& e) {
      return send_error(res, api, e);
    } catch (const sluice::Error& e) {  // the engine refused the input (chat template, tokens)
      return send_error(res, api, ApiError(400, e.what(), "invalid_request_error"));
    } catch (const std::exception& e) {
      return send_error(res, api, ApiError(400, e.what(), "invalid_request_error"));
    }
    pr.request.timeout_seconds = options_.timeout_seconds;
    ResponseFormat format;
    format.api = api;
    const char* prefix = api == Api::kMessages ? "msg_" : api == Api::kChat ? "chatcmpl-" : "cmpl-";
    format.id = fmt::format("{}{}{:06}", prefix, id_prefix_, ++next_id_);
    format.model = options_.model_name;
    format.created = static_cast<int64_t>(std::time(nullptr));
    format.n_prompt_tokens = static_cast<int>(pr.request.prompt.size());
    format.syntax = pr.syntax;
    format.output = pr.output;
    format.max_tool_calls = pr.max_tool_calls;
    if (pr.request.options.logprobs >= 0) format.engine = &engine_;

    const Clock::time_point submitted = Clock::now();
    Submission sub = scheduler_.submit(std::move(pr.request));
    if (sub.status == SubmitStatus::kQueueFull) {
      res.set_header("Retry-After", "1");
      return send_error(res, api, ApiError(503, "the server is busy: " + sub.message, api == Api::kMessages ? "overloaded_error" : "server_error", "", "queue_full"));
    }
    if (sub.status == SubmitStatus::kContextOverflow)
      return send_error(res, api, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field, "context_length_exceeded"));
    if (sub.status != SubmitStatus::kOk)
      return send_error(res, api, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field));
    track(sub.handle);

    if (!pr.stream) return wait_full(api, format, sub.handle, submitted, res);
    auto st = std::make_shared<Stream>();
    st->handle = sub.handle;
    st->format = std::move(format);
    st->include_usage = pr.include_usage;
    st->timeout_seconds = options_.timeout_seconds;
    st->submitted = submitted;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return write_events(*st, sink); },
        [st](bool) { st->handle->cancel(); });
  }

  json model_object() const {
    return {{"id", options_.model_name},
            {"object", "model"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"owned_by", "sluice"},
            {"meta", {{"architecture", engine_.info().architecture}, {"n_ctx", scheduler_.n_ctx()}}}};
  }

  void models(httplib::Response& res) {
    res.set_content(to_text(json{{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  }

  void model(const std::string& id, httplib::Response& res) {
    if (id != options_.model_name)
      return send_error(res, Api::kChat, ApiError(404, fmt::format("no model '{}' (this server serves '{}')", id, options_.model_name),
                                                  "invalid_request_error", "model", "model_not_found"));
    res.set_content(to_text(model_object()), "application/json");
  }

  // The shutdown's last step: requests still running after the grace period are cancelled and
  // answered with shutdown_error(). `now`: answered with `now` at once instead, without waiting for
  // the scheduler (a pipeline's may be stuck on a dead stage).
  void end_all(const std::string& now = "") {
    shutting_down_ = true;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& w : running_)
      if (auto h = w.lock()) now.empty() ? h->cancel() : h->abandon(now);
  }
  size_t running() {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t n = 0;
    for (auto& w : running_)
      if (auto h = w.lock()) n += !h->finished();
    return n;
  }

 private:
  void track(const std::shared_ptr<CompletionHandle>& h) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(running_, [](const std::weak_ptr<CompletionHandle>& w) { return w.expired(); });
    running_.push_back(h);
  }

  // The final event's error, if it is one: engine error, shutdown or timeout.
  std::optional<ApiError> final_error(Api api, const CompletionEvent& ev) const {
    if (ev.kind == CompletionEvent::Kind::kError) return ApiError(500, ev.text, api == Api::kMessages ? "api_error" : "server_error");
    if (ev.timed_out) return timeout_error(options_.timeout_seconds);
    if (shutting_down_ && ev.result.finish == FinishReason::kCancelled) return shutdown_error();
    return std::nullopt;
  }

  // Non-streaming: waits for the final event, checking the connection every 100 ms; a client that
  // has gone away cancels the request, which frees its slot at the next token boundary.
  void wait_full(Api api, ResponseFormat& format, const std::shared_ptr<CompletionHandle>& h,
                 Clock::time_point submitted, httplib::Response& res) {
    CompletionEvent ev;
    bool first = true, cancelled = false;
    Clock::time_point checked = Clock::now();
    for (;;) {
      const bool got = h->next(ev, 100ms);
      if (!cancelled && Clock::now() - checked >= 100ms) {
        checked = Clock::now();
        if (!HttpServer::client_connected()) {
          h->cancel();
          cancelled = true;
        }
      }
      if (!got || ev.kind == CompletionEvent::Kind::kText) {
        if (got && first) counters_.ttft.observe(seconds_since(submitted));
        first = first && !got;
        continue;
      }
      break;
    }
    counters_.latency.observe(seconds_since(submitted));
    if (auto e = final_error(api, ev)) return send_error(res, api, *e);
    if (cancelled) return send_error(res, api, ApiError(499, "the client closed the connection", "invalid_request_error", "", "client_closed"));
    res.set_content(to_text(format.full(ev.result)), "application/json");
  }

  // Writes every event that is ready (waiting up to a second for the first); false ends the
  // response, which happens when a write fails because the client is gone.
  bool write_events(Stream& st, httplib::DataSink& sink) {
    if (st.finished) {
      sink.done();
      return true;
    }
    std::string out;
    if (!st.begun) {
      st.begun = true;
      out = st.format.stream_begin();
    }
    CompletionEvent ev;
    bool got = st.handle->next(ev, 1000ms);
    if (!got && out.empty()) out = ": keep-alive\n\n";
    while (got) {
      if (ev.kind == CompletionEvent::Kind::kText) {
        if (st.first_text) counters_.ttft.observe(seconds_since(st.submitted));
        st.first_text = false;
        out += st.format.stream_text(ev.text, ev.logprobs);
      } else {
        st.finished = true;
        counters_.latency.observe(seconds_since(st.submitted));
        if (auto e = final_error(st.format.api, ev))
          out += st.format.stream_error(*e);
        else
          out += st.format.stream_end(ev.result, st.include_usage);
        break;
      }
      got = st.handle->next(ev, 0ms);
    }
    // Events whose text is all held back (a partial stop string or turn marker, an incomplete UTF-8
    // sequence) give no bytes. httplib takes a zero-length write as the end of the data and ends
    // the response without its final chunk, so nothing is written until there is something.
    if (out.empty()) return true;
    if (!sink.write(out.data(), out.size())) return false;
    if (st.finished) sink.done();
    return true;
  }

  Engine& engine_;
  Scheduler& scheduler_;
  const ServerOptions& options_;
  Counters& counters_;
  std::string id_prefix_;
  std::atomic<uint64_t> next_id_{0};
  std::atomic<bool> shutting_down_{false};
  std::mutex mutex_;
  std::vector<std::weak_ptr<CompletionHandle>> running_;
};

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

// Every route handler first tells the connection layer that its request has been read.
httplib::Server::Handler routed(httplib::Server::Handler fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    if (HttpServer::route_entered(req)) return fn(req, res);
    res.status = 413;  // the error reply words it
  };
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

// Routes and the methods they accept, for 405 answers.
const std::map<std::string, std::string>& route_methods() {
  static const std::map<std::string, std::string> m = {{"/health", "GET"},
                                                       {"/metrics", "GET"},
                                                       {"/v1/models", "GET"},
                                                       {"/v1/models/", "GET"},
                                                       {"/v1/chat/completions", "POST"},
                                                       {"/v1/completions", "POST"},
                                                       {"/v1/messages", "POST"}};
  return m;
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
  ConnectionLimits limits;
  limits.request_read_deadline = std::chrono::milliseconds(static_cast<int64_t>(o.request_read_seconds * 1000));
  limits.max_reading = o.max_reading;
  limits.max_reading_per_address = o.max_reading_per_client > 0 ? o.max_reading_per_client : std::max(1, o.max_reading / 4);
  HttpServer svr(limits);
  const size_t workers = worker_threads(o);
  svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  svr.set_payload_max_length(o.max_body_bytes);

  svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty() || req.path == "/health" || req.method == "OPTIONS" || authorized(req, o.api_key))
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
    const auto route = route_methods().find(req.path);
    const bool model_path = req.path.rfind("/v1/models/", 0) == 0;  // GET matches every one
    if (res.status == 404 && (route != route_methods().end() || model_path)) {
      const std::string allow = route != route_methods().end() ? route->second : "GET";
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
  svr.Post("/v1/chat/completions", routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kChat, req, res); }));
  svr.Post("/v1/completions", routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kCompletion, req, res); }));
  svr.Post("/v1/messages", routed([&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kMessages, req, res); }));

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
