// Running completions for every route family (OpenAI, Anthropic, llama-server, Ollama): a parsed
// request is submitted to the Scheduler, as one request per choice, and answered from the handles
// through the family's Reply: non-streaming requests wait for every final event; streaming ones
// write each event as it comes from a chunked content provider. A failed write (the client went
// away) ends the provider, and its releaser cancels the requests so the scheduler frees their KV
// at the next token boundary. While a stream has nothing to send (queued, long prefill), a
// keep-alive is written every second so a vanished client is noticed there too; a non-streaming
// request polls its connection while it waits and is cancelled when the client is gone.
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api.h"
#include "server.h"

namespace sluice::server {

// A Prometheus histogram of seconds.
class Histogram {
 public:
  void observe(double seconds);
  std::string text(const char* name, const char* help);

 private:
  static constexpr std::array<double, 12> kBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,    2.5,   5,    10,  30,   60};
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

// Every route handler first tells the connection layer that its request has been read.
httplib::Server::Handler routed(httplib::Server::Handler fn);

// Writes an error in a route family's shape.
using ErrorWriter = std::function<void(httplib::Response&, const ApiError&)>;
// The OpenAI / Anthropic error bodies.
void send_error(httplib::Response& res, Api api, const ApiError& e);
ErrorWriter error_writer(Api api);

class Routes {
 public:
  Routes(Engine& engine, Scheduler& scheduler, const ServerOptions& options, Counters& counters);

  Engine& engine() { return engine_; }
  Scheduler& scheduler() { return scheduler_; }
  const ServerOptions& options() const { return options_; }
  // A fresh response id: `prefix`, this server's random prefix and a counter.
  std::string new_id(const char* prefix);

  // The OpenAI and Anthropic completion routes: parse, then run().
  void completion(Api api, const httplib::Request& req, httplib::Response& res);
  // Submits `pr` (pr.n choices; `replies` holds one Reply per choice) and answers.
  // `include_usage`: OpenAI's stream_options.include_usage.
  void run(ParsedRequest pr, std::vector<std::unique_ptr<Reply>> replies, const ErrorWriter& error,
           httplib::Response& res);

  // Anthropic's /v1/messages/count_tokens: the prompt's tokens as /v1/messages would build it.
  void count_tokens(const httplib::Request& req, httplib::Response& res);

  nlohmann::json model_object() const;
  void models(httplib::Response& res);
  void model(const std::string& id, httplib::Response& res);

  // The shutdown's last step: requests still running after the grace period are cancelled and
  // answered with shutdown_error(). `now`: answered with `now` at once instead, without waiting
  // for the scheduler (a pipeline's may be stuck on a dead stage).
  void end_all(const std::string& now = "");
  size_t running();

 private:
  struct Stream;
  void track(const std::shared_ptr<CompletionHandle>& h);
  std::optional<ApiError> final_error(const CompletionEvent& ev, bool anthropic) const;
  // The prompt evaluated once, so that the choices of n > 1 copy its KV from the prefix cache.
  void prefill_once(const CompletionRequest& request);
  void wait_full(std::vector<std::shared_ptr<CompletionHandle>> handles,
                 std::vector<std::unique_ptr<Reply>>& replies, bool anthropic,
                 std::chrono::steady_clock::time_point submitted, const ErrorWriter& error,
                 httplib::Response& res);
  bool write_events(Stream& st, httplib::DataSink& sink);

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

// Route families beside OpenAI's chat/completions and Anthropic's messages: they
// register their paths on `svr` and add them with their methods to `methods` (for 405 answers).
void add_llama_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods);
void add_ollama_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods);
// OpenAI's /v1/embeddings, and /embeddings (embeddings_routes.cpp).
void add_embeddings_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods);
// The web page at / and its files under /web/, and GET /engine (web_routes.cpp).
void add_web_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods);
// The page's own files, served without the API key.
bool is_web_asset_path(const std::string& path);
// OpenAI's /v1/responses (responses_routes.cpp).
void add_responses_routes(httplib::Server& svr, Routes& routes, std::map<std::string, std::string>& methods);

}  // namespace sluice::server
