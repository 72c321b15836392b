// Completion running shared by every route family (see routes.h).
#include "routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <random>
#include <thread>

#include "http_server.h"

namespace sluice::server {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

ApiError shutdown_error() {
  return ApiError(503, "the server is shutting down and the request did not finish within its grace period",
                  "server_error", "", "server_shutdown");
}

ApiError timeout_error(double secs) {
  return ApiError(504, fmt::format("the request did not finish within the server's {} s timeout", secs),
                  "timeout_error", "", "timeout");
}

}  // namespace

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::text(const char* name, const char* help) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = fmt::format("# HELP sluice_{0} {1}\n# TYPE sluice_{0} histogram\n", name, help);
  for (size_t i = 0; i < kBounds.size(); ++i)
    out += fmt::format("sluice_{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts_[i]);
  return out + fmt::format("sluice_{0}_bucket{{le=\"+Inf\"}} {1}\nsluice_{0}_sum {2}\nsluice_{0}_count {1}\n",
                           name, count_, sum_);
}

httplib::Server::Handler routed(httplib::Server::Handler fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    if (HttpServer::route_entered(req)) return fn(req, res);
    res.status = 413;  // the error reply words it
  };
}

void send_error(httplib::Response& res, Api api, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_text(error_body(api, e)), "application/json");
}

ErrorWriter error_writer(Api api) {
  return [api](httplib::Response& res, const ApiError& e) { send_error(res, api, e); };
}

// Streaming state shared by the content provider and its releaser: one handle and reply per
// choice.
struct Routes::Stream {
  std::vector<std::shared_ptr<CompletionHandle>> handles;
  std::vector<std::unique_ptr<Reply>> replies;
  std::vector<bool> done;
  bool anthropic = false;
  bool include_usage = false;
  bool begun = false, finished = false, first_text = true;
  int n_generated = 0;  // over the finished choices
  Clock::time_point submitted, last_write;
};

Routes::Routes(Engine& engine, Scheduler& scheduler, const ServerOptions& options, Counters& counters)
    : engine_(engine),
      scheduler_(scheduler),
      options_(options),
      counters_(counters),
      id_prefix_(fmt::format("{:08x}", std::random_device{}())) {}

std::string Routes::new_id(const char* prefix) {
  return fmt::format("{}{}{:06}", prefix, id_prefix_, ++next_id_);
}

void Routes::completion(Api api, const httplib::Request& req, httplib::Response& res) {
  ParsedRequest pr;
  try {
    pr = parse_request(api, req.body, engine_);
  } catch (const ApiError& e) {
    return send_error(res, api, e);
  } catch (const std::exception& e) {  // the engine refused the input (chat template, tokens)
    return send_error(res, api, ApiError(400, e.what(), "invalid_request_error"));
  }
  const char* prefix = api == Api::kMessages ? "msg_" : api == Api::kChat ? "chatcmpl-" : "cmpl-";
  const std::string id = new_id(prefix);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::unique_ptr<Reply>> replies;
  for (int i = 0; i < pr.n; ++i) {
    auto f = std::make_unique<ResponseFormat>();
    f->api = api;
    f->index = i;
    f->id = id;
    f->model = options_.model_name;
    f->created = created;
    f->n_prompt_tokens = static_cast<int>(pr.request.prompt.size());
    f->syntax = pr.syntax;
    f->output = pr.output;
    f->max_tool_calls = pr.max_tool_calls;
    if (pr.request.options.logprobs >= 0) f->engine = &engine_;
    replies.push_back(std::move(f));
  }
  run(std::move(pr), std::move(replies), error_writer(api), res);
}

void Routes::count_tokens(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  // count_tokens takes a messages request without max_tokens (nothing is generated).
  if (body.is_object() && !body.contains("max_tokens")) body["max_tokens"] = 1;
  try {
    const ParsedRequest pr = parse_request(Api::kMessages, body.is_discarded() ? req.body : to_text(body), engine_);
    res.set_content(to_text(json{{"input_tokens", pr.request.prompt.size()}}), "application/json");
  } catch (const ApiError& e) {
    send_error(res, Api::kMessages, e);
  } catch (const std::exception& e) {
    send_error(res, Api::kMessages, ApiError(400, e.what(), "invalid_request_error"));
  }
}

void Routes::prefill_once(const CompletionRequest& request) {
  CompletionRequest warm;
  warm.prompt = request.prompt;
  warm.options.max_tokens = 1;  // the prompt evaluated, one token sampled but not evaluated
  warm.options.sampling.temperature = 0;
  warm.timeout_seconds = request.timeout_seconds;
  Submission sub = scheduler_.submit(std::move(warm));
  if (sub.status != SubmitStatus::kOk) return;  // the real submissions will say why
  track(sub.handle);
  CompletionEvent ev;
  while (!sub.handle->finished()) {
    if (!sub.handle->next(ev, 100ms) && !HttpServer::client_connected()) {
      sub.handle->cancel();
      return;
    }
  }
}

void Routes::run(ParsedRequest pr, std::vector<std::unique_ptr<Reply>> replies, const ErrorWriter& error,
                 httplib::Response& res) {
  const bool anthropic = pr.api == Api::kMessages;
  pr.request.timeout_seconds = options_.timeout_seconds;
  if (pr.n > 1) prefill_once(pr.request);
  const Clock::time_point submitted = Clock::now();
  std::vector<std::shared_ptr<CompletionHandle>> handles;
  for (int i = 0; i < pr.n; ++i) {
    CompletionRequest request = pr.request;
    request.options.sampling.seed += static_cast<uint64_t>(i);  // choices differ when sampled
    Submission sub = scheduler_.submit(std::move(request));
    if (sub.status != SubmitStatus::kOk) {
      for (auto& h : handles) h->cancel();
      if (sub.status == SubmitStatus::kQueueFull) {
        res.set_header("Retry-After", "1");
        return error(res, ApiError(503, "the server is busy: " + sub.message,
                                   anthropic ? "overloaded_error" : "server_error", "", "queue_full"));
      }
      if (sub.status == SubmitStatus::kContextOverflow)
        return error(res, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field,
                                   "context_length_exceeded"));
      return error(res, ApiError(400, sub.message, "invalid_request_error", pr.prompt_field));
    }
    track(sub.handle);
    handles.push_back(std::move(sub.handle));
  }
  if (!pr.stream) return wait_full(std::move(handles), replies, anthropic, submitted, error, res);
  auto st = std::make_shared<Stream>();
  st->handles = std::move(handles);
  st->replies = std::move(replies);
  st->done.assign(st->handles.size(), false);
  st->anthropic = anthropic;
  st->include_usage = pr.include_usage;
  st->submitted = st->last_write = submitted;
  const char* type = st->replies[0]->stream_type();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      type, [this, st](size_t, httplib::DataSink& sink) { return write_events(*st, sink); },
      [st](bool) {
        for (auto& h : st->handles) h->cancel();
      });
}

json Routes::model_object() const {
  return {{"id", options_.model_name},
          {"object", "model"},
          {"created", static_cast<int64_t>(std::time(nullptr))},
          {"owned_by", "sluice"},
          {"meta", {{"architecture", engine_.info().architecture}, {"n_ctx", scheduler_.n_ctx()}}}};
}

void Routes::models(httplib::Response& res) {
  res.set_content(to_text(json{{"object", "list"}, {"data", json::array({model_object()})}}),
                  "application/json");
}

void Routes::model(const std::string& id, httplib::Response& res) {
  if (id != options_.model_name)
    return send_error(res, Api::kChat,
                      ApiError(404, fmt::format("no model '{}' (this server serves '{}')", id, options_.model_name),
                               "invalid_request_error", "model", "model_not_found"));
  res.set_content(to_text(model_object()), "application/json");
}

void Routes::end_all(const std::string& now) {
  shutting_down_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& w : running_)
    if (auto h = w.lock()) now.empty() ? h->cancel() : h->abandon(now);
}

size_t Routes::running() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (auto& w : running_)
    if (auto h = w.lock()) n += !h->finished();
  return n;
}

void Routes::track(const std::shared_ptr<CompletionHandle>& h) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(running_, [](const std::weak_ptr<CompletionHandle>& w) { return w.expired(); });
  running_.push_back(h);
}

// The final event's error, if it is one: engine error, shutdown or timeout.
std::optional<ApiError> Routes::final_error(const CompletionEvent& ev, bool anthropic) const {
  if (ev.kind == CompletionEvent::Kind::kError)
    return ApiError(500, ev.text, anthropic ? "api_error" : "server_error");
  if (ev.timed_out) return timeout_error(options_.timeout_seconds);
  if (shutting_down_ && ev.result.finish == FinishReason::kCancelled) return shutdown_error();
  return std::nullopt;
}

// Non-streaming: waits for every final event, checking the connection every 100 ms; a client that
// has gone away cancels the requests, which frees their slots at the next token boundary.
void Routes::wait_full(std::vector<std::shared_ptr<CompletionHandle>> handles,
                       std::vector<std::unique_ptr<Reply>>& replies, bool anthropic,
                       Clock::time_point submitted, const ErrorWriter& error, httplib::Response& res) {
  bool first = true, cancelled = false;
  Clock::time_point checked = Clock::now();
  std::vector<json> bodies;
  for (size_t i = 0; i < handles.size(); ++i) {
    const auto& h = handles[i];
    CompletionEvent ev;
    for (;;) {
      const bool got = h->next(ev, 100ms);
      if (!cancelled && Clock::now() - checked >= 100ms) {
        checked = Clock::now();
        if (!HttpServer::client_connected()) {
          for (auto& x : handles) x->cancel();
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
    if (auto e = final_error(ev, anthropic)) {
      for (auto& x : handles) x->cancel();
      counters_.latency.observe(seconds_since(submitted));
      return error(res, *e);
    }
    bodies.push_back(replies[i]->full(ev.result));
  }
  counters_.latency.observe(seconds_since(submitted));
  if (cancelled)
    return error(res, ApiError(499, "the client closed the connection", "invalid_request_error", "", "client_closed"));
  res.set_content(to_text(bodies.size() == 1 ? bodies[0] : ResponseFormat::merge(bodies)), "application/json");
}

// Writes every event that is ready (waiting up to a second for the first); false ends the
// response, which happens when a write fails because the client is gone.
bool Routes::write_events(Stream& st, httplib::DataSink& sink) {
  if (st.finished) {
    sink.done();
    return true;
  }
  std::string out;
  if (!st.begun) {
    st.begun = true;
    for (auto& r : st.replies) out += r->stream_begin();
  }
  const bool single = st.handles.size() == 1;
  const Clock::time_point until = Clock::now() + 1s;
  bool any = false;
  do {
    for (size_t i = 0; i < st.handles.size() && !st.finished; ++i) {
      if (st.done[i]) continue;
      CompletionEvent ev;
      // One choice waits on its handle; several poll each in turn.
      auto wait = single && !any ? std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())
                                 : 0ms;
      while (st.handles[i]->next(ev, std::max(wait, 0ms))) {
        any = true;
        wait = 0ms;
        Reply& reply = *st.replies[i];
        if (ev.kind == CompletionEvent::Kind::kText) {
          if (st.first_text) counters_.ttft.observe(seconds_since(st.submitted));
          st.first_text = false;
          out += reply.stream_text(ev.text, ev.logprobs);
          continue;
        }
        st.done[i] = true;
        if (auto e = final_error(ev, st.anthropic)) {
          out += reply.stream_error(*e);
          st.finished = true;
          for (auto& h : st.handles) h->cancel();
        } else if (single) {
          out += reply.stream_end(ev.result, st.include_usage);
        } else {
          out += reply.stream_choice_end(ev.result);
          st.n_generated += static_cast<int>(ev.result.tokens.size());
        }
        break;
      }
    }
    if (!st.finished && std::all_of(st.done.begin(), st.done.end(), [](bool d) { return d; })) {
      st.finished = true;
      if (!single) out += st.replies[0]->stream_close(st.include_usage, st.n_generated);
    }
    if (!any && !single && !st.finished) std::this_thread::sleep_for(5ms);
  } while (!any && !st.finished && Clock::now() < until);
  if (st.finished) counters_.latency.observe(seconds_since(st.submitted));
  // Events whose text is all held back (a partial stop string or turn marker, an incomplete UTF-8
  // sequence) give no bytes. httplib takes a zero-length write as the end of the data and ends
  // the response without its final chunk, so nothing is written until there is something; after
  // a second of nothing, a keep-alive (the family's: an SSE comment, or nothing for NDJSON).
  if (out.empty() && !any) out = st.replies[0]->stream_type() == std::string("text/event-stream") ? ": keep-alive\n\n" : "";
  if (out.empty()) return true;
  if (!sink.write(out.data(), out.size())) return false;
  if (st.finished) sink.done();
  return true;
}

}  // namespace sluice::server
