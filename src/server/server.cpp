// HTTP routes of `sluice serve` (see server.h). Each request is parsed and validated on an httplib
// worker thread, submitted to the Scheduler, and answered from its handle: non-streaming requests
// wait for the final event; streaming requests write SSE events from a chunked content provider.
// A failed write (the client went away) ends the provider, and its releaser cancels the request so
// the scheduler frees its KV at the next token boundary. While a streaming request waits with
// nothing to send (queued, long prefill), an SSE comment is written every second so a vanished
// client is noticed there too.
#include "server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "api.h"

namespace sluice::server {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct Counters {
  std::mutex mutex;
  std::map<int, uint64_t> by_status;  // HTTP responses by status code
};

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
  bool begun = false, finished = false;
  double timeout_seconds = 0;
};

ApiError timeout_error(double secs) {
  return ApiError(504, fmt::format("the request did not finish within the server's {} s timeout", secs),
                  "timeout_error", "", "timeout");
}

std::string metrics_text(const SchedulerStats& s, Counters& counters) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP sluice_{0} {1}\n# TYPE sluice_{0} {2}\nsluice_{0} {3}\n", name, help, type, value);
  };
  metric("requests_total", "counter", "requests accepted by the scheduler", s.requests);
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
  metric("decode_tokens_total", "counter", "one-token decode rows over all forward passes", s.decode_rows);
  metric("forward_seconds_total", "counter", "time spent in forward passes", s.busy_seconds);
  metric("kv_cache_bytes", "gauge", "KV cache blocks allocated", s.kv_bytes);
  metric("expert_requests_total", "counter", "routed expert fetches", s.experts.requests);
  metric("expert_cache_hits_total", "counter", "expert fetches served from the RAM cache", s.experts.hits);
  metric("expert_cache_misses_total", "counter", "expert fetches read from storage", s.experts.misses);
  metric("expert_bytes_read_total", "counter", "bytes of experts read from storage", s.experts.bytes_read);
  metric("expert_read_seconds_total", "counter", "time spent reading experts", s.experts.read_seconds);
  metric("expert_stall_seconds_total", "counter", "time compute waited for expert reads", s.experts.stall_seconds);
  metric("expert_prefetch_issued_total", "counter", "experts prefetched by router lookahead", s.experts.prefetch_issued);
  metric("expert_prefetch_used_total", "counter", "prefetched experts that were used", s.experts.prefetch_used);
  out += "# HELP sluice_http_responses_total HTTP responses by status code\n# TYPE sluice_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(counters.mutex);
  for (const auto& [code, n] : counters.by_status) out += fmt::format("sluice_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  return out;
}

class Routes {
 public:
  Routes(Engine& engine, Scheduler& scheduler, const ServerOptions& options)
      : engine_(engine), scheduler_(scheduler), options_(options), id_prefix_(fmt::format("{:08x}", std::random_device{}())) {}

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

    Submission sub = scheduler_.submit(std::move(pr.request));
    if (sub.status == SubmitStatus::kQueueFull) {
      res.set_header("Retry-After", "1");
      return send_error(res, api, ApiError(503, "the server is busy: " + sub.message, api == Api::kMessages ? "overloaded_error" : "server_error", "", "queue_full"));
    }
    if (sub.status == SubmitStatus::kContextOverflow)
      return send_error(res, api, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field, "context_length_exceeded"));
    if (sub.status != SubmitStatus::kOk)
      return send_error(res, api, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field));

    if (!pr.stream) return wait_full(api, format, sub.handle, res);
    auto st = std::make_shared<Stream>();
    st->handle = sub.handle;
    st->format = std::move(format);
    st->include_usage = pr.include_usage;
    st->timeout_seconds = options_.timeout_seconds;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [st](size_t, httplib::DataSink& sink) { return write_events(*st, sink); },
        [st](bool) { st->handle->cancel(); });
  }

  void models(httplib::Response& res) {
    json data = json::array({{{"id", options_.model_name},
                              {"object", "model"},
                              {"created", static_cast<int64_t>(std::time(nullptr))},
                              {"owned_by", "sluice"},
                              {"meta", {{"architecture", engine_.info().architecture}, {"n_ctx", scheduler_.n_ctx()}}}}});
    res.set_content(to_text(json{{"object", "list"}, {"data", data}}), "application/json");
  }

 private:
  // Non-streaming: waits for the final event. A client that disconnects meanwhile is only noticed
  // when the answer is written; the per-request timeout bounds the work.
  void wait_full(Api api, const ResponseFormat& format, const std::shared_ptr<CompletionHandle>& h,
                 httplib::Response& res) {
    CompletionEvent ev;
    for (;;) {
      if (!h->next(ev, 1000ms)) continue;
      if (ev.kind == CompletionEvent::Kind::kText) continue;
      break;
    }
    if (ev.kind == CompletionEvent::Kind::kError)
      return send_error(res, api, ApiError(500, ev.text, api == Api::kMessages ? "api_error" : "server_error"));
    if (ev.timed_out) return send_error(res, api, timeout_error(options_.timeout_seconds));
    res.set_content(to_text(format.full(ev.result)), "application/json");
  }

  // Writes every event that is ready (waiting up to a second for the first); false ends the
  // response, which happens when a write fails because the client is gone.
  static bool write_events(Stream& st, httplib::DataSink& sink) {
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
        out += st.format.stream_text(ev.text);
      } else {
        st.finished = true;
        if (ev.kind == CompletionEvent::Kind::kError)
          out += st.format.stream_error(ApiError(500, ev.text, "server_error"));
        else if (ev.timed_out)
          out += st.format.stream_error(timeout_error(st.timeout_seconds));
        else
          out += st.format.stream_end(ev.result, st.include_usage);
        break;
      }
      got = st.handle->next(ev, 0ms);
    }
    if (!sink.write(out.data(), out.size())) return false;
    if (st.finished) sink.done();
    return true;
  }

  Engine& engine_;
  Scheduler& scheduler_;
  const ServerOptions& options_;
  std::string id_prefix_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace

int serve(Engine& engine, const ServerOptions& o) {
  Scheduler scheduler(engine, o.scheduler);
  Routes routes(engine, scheduler, o);
  Counters counters;
  httplib::Server svr;
  // Every waiting or streaming request holds a worker thread; a few more serve /health and /metrics.
  const size_t workers = std::min(512, o.scheduler.n_parallel + o.scheduler.max_queue + 4);
  svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_read_timeout(60);
  svr.set_write_timeout(60);

  svr.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string bearer = req.get_header_value("Authorization");
    if (bearer == "Bearer " + o.api_key || req.get_header_value("x-api-key") == o.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, api_of_path(req.path), ApiError(401, "invalid or missing API key", "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses set by httplib itself (404, 413, 400 for unreadable requests) get a JSON error body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 413 ? "the request body is larger than the server accepts"
                      : res.status == 404 ? fmt::format("no route for {} {}", req.method, req.path)
                                          : fmt::format("HTTP error {}", res.status);
    send_error(res, api_of_path(req.path), ApiError(res.status, msg, "invalid_request_error", "", res.status == 413 ? "payload_too_large" : ""));
    return httplib::Server::HandlerResponse::Handled;
  }));
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
  svr.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(counters.mutex);
      ++counters.by_status[res.status];
    }
    if (req.path != "/health" && req.path != "/metrics")
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });

  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(scheduler.stats(), counters), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) { routes.models(res); });
  svr.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kChat, req, res); });
  svr.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kCompletion, req, res); });
  svr.Post("/v1/messages", [&](const httplib::Request& req, httplib::Response& res) { routes.completion(Api::kMessages, req, res); });

  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) port = 0;
  } else if (!svr.bind_to_port(o.host, port)) {
    port = 0;
  }
  if (port == 0) {
    std::fprintf(stderr, "sluice serve: error: cannot listen on %s:%d\n", o.host.c_str(), o.port);
    return 1;
  }
  std::printf("sluice serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);

  // SIGINT/SIGTERM are blocked in every thread; this one takes them and stops the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    svr.stop();
  });
  const bool ok = svr.listen_after_bind();
  svr.stop();
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes sigwait when listen ended on its own
  signals.join();
  std::fprintf(stderr, "sluice serve: stopped\n");
  return ok ? 0 : 1;
}

}  // namespace sluice::server
