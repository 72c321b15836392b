// The socket layer under `sluice serve`: an httplib::Server whose per-connection loop is ours, so
// that hostile or broken clients cannot take the server down, and so that what cpp-httplib 0.11
// (Debian 12) does not check is checked before it parses a request.
//  - The port is bound without SO_REUSEPORT (cpp-httplib sets it, which lets a second server share
//    the port and split the traffic); a port in use is reported as such.
//  - The listen backlog is raised (cpp-httplib's is 5).
//  - Reading one request (header and body) has a total deadline, not just a per-read timeout, so a
//    client trickling bytes cannot hold a worker thread. A request that misses it is answered 408.
//  - The request head (request line and header fields) is read here before httplib sees it: a
//    head over `max_header_bytes` (or one header line over httplib's 8192) is answered 431; a
//    repeated, negative or non-numeric Content-Length, or one beside Transfer-Encoding, 400; a
//    Content-Length over the body limit 413; a POST without a length 411 — all at once, without
//    reading the body (httplib read an over-long body to its end, and a body without a length
//    until the client closed). A chunked body, which httplib reads whatever its size, is held to
//    the body limit too.
//  - Requests pipelined on one connection are served in order: bytes already read past one request
//    stay in this layer's buffer for the next. A connection whose request body was not read to its
//    end (refused, late) is not reused; what the client still sends is read away before closing,
//    so that the refusal reaches it rather than a connection reset.
//  - At most `max_reading` connections may be reading a request at once, and at most
//    `max_reading_per_address` of them from one client address; beyond that a connection is
//    answered 503 (everyone's limit) or 429 (its address's) and closed, so slow clients leave the
//    rest of the pool (/health, /metrics and the completion slots) free. A connection counts as
//    reading from accept (or the first byte of its next request) until its body has been read
//    (route_entered()) or it is answered.
//  - The handler thread can ask whether its client is still connected (client_connected()).
// Responses this layer makes itself go through the same error reply and access log as httplib's
// (set_error_reply, set_access_log).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace sluice::server {

struct ConnectionLimits {
  std::chrono::milliseconds request_read_deadline{10000};  // header and body of one request
  std::chrono::milliseconds write_timeout{60000};
  std::chrono::milliseconds keep_alive_timeout{
      5000};                           // idle time between requests on one connection
  int max_reading = 256;               // connections reading a request at once
  int max_reading_per_address = 64;    // of them from one client address
  size_t max_header_bytes = 32 << 10;  // request line and header fields
  int backlog = 1024;
};

// Why this layer refused a request before (or while) httplib read it; the error reply words it.
struct ReadProblem {
  int status = 0;      // 400, 408, 411, 413, 429, 431, 503
  std::string detail;  // 400: what is wrong ("two Content-Length headers"); else empty
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const ConnectionLimits& limits);

  const ConnectionLimits& limits() const { return limits_; }

  // Binds host:port (0: any free port) without SO_REUSEPORT and listens with the configured
  // backlog. Returns the port, or -1 with `error` set ("port N is in use", ...).
  int bind(const std::string& host, int port, std::string& error);

  // The error reply (fills the body of a response whose status ≥ 400 is set) and the access log,
  // for httplib's responses and for the ones this layer makes itself.
  void set_error_reply(HandlerWithResponse reply);
  void set_access_log(httplib::Logger log);

  // Graceful stop: closes the listening socket (listen_after_bind() returns once every open
  // connection is done) but, unlike stop(), lets running responses (streams) go on.
  void stop_accepting();
  bool draining() const { return draining_; }

  // Called first by every route handler: the request on this thread has been read (header and
  // body), so the connection no longer counts as reading. False: its (chunked) body is over the
  // body limit, and the handler answers with the error reply (read_problem() says 413).
  static bool route_entered(const httplib::Request& req);
  // When the request being handled on this thread began to arrive (for the access log).
  static std::chrono::steady_clock::time_point request_started();
  // False when the client of the request being handled on this thread has closed its side.
  static bool client_connected();
  // Set when reading the request on this thread failed in a way httplib words as a plain 400
  // (the read deadline passed) or this layer refused it; for the error reply.
  static std::optional<ReadProblem> read_problem();

  // Connections currently reading a request (for tests and metrics).
  int reading() const { return reading_.load(); }

  struct Connection;  // one client connection's state (http_server.cpp)

 private:
  class Stream;
  enum class Admission { kOk, kBusy, kAddressBusy };

  bool process_and_close_socket(int sock) override;
  // Counts a connection as reading when both limits allow it.
  Admission admit(Connection& c);
  void stop_reading(Connection& c);
  // A response made here (no httplib request): the error reply, Connection: close, the log.
  void refuse(Stream& strm, Connection& c, const ReadProblem& problem);
  // The body a complete head announces, or the problem to refuse it with.
  struct Framing {
    std::optional<ReadProblem> problem;
    bool chunked = false;
    uint64_t length = 0;  // Content-Length (0 without one)
  };
  Framing check_framing(const std::string& head) const;

  ConnectionLimits limits_;
  HandlerWithResponse error_reply_;
  httplib::Logger access_log_;
  std::atomic<int> reading_{0};
  std::mutex address_mutex_;
  std::unordered_map<std::string, int> reading_by_address_;
  std::atomic<bool> draining_{false};
};

}  // namespace sluice::server
