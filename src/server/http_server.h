// The socket layer under `sluice serve`: an httplib::Server whose per-connection loop is ours, so
// that hostile or broken clients cannot take the server down.
//  - The port is bound without SO_REUSEPORT (cpp-httplib sets it, which lets a second server share
//    the port and split the traffic); a port in use is reported as such.
//  - The listen backlog is raised (cpp-httplib's is 5).
//  - Reading one request (header and body) has a total deadline, not just a per-read timeout, so a
//    client trickling bytes cannot hold a worker thread.
//  - At most `max_reading` connections may be reading a request at once; beyond that new
//    connections are closed at once, so slow clients leave the rest of the pool (/health, /metrics
//    and the completion slots) free.
//  - The handler thread can ask whether its client is still connected (client_connected()).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>

namespace sluice::server {

struct ConnectionLimits {
  std::chrono::milliseconds request_read_deadline{10000};  // header and body of one request
  std::chrono::milliseconds write_timeout{60000};
  std::chrono::milliseconds keep_alive_timeout{
      5000};              // idle time between requests on one connection
  int max_reading = 256;  // connections reading a request at once
  int backlog = 1024;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const ConnectionLimits& limits);

  // Binds host:port (0: any free port) without SO_REUSEPORT and listens with the configured
  // backlog. Returns the port, or -1 with `error` set ("port N is in use", ...).
  int bind(const std::string& host, int port, std::string& error);

  // Graceful stop: closes the listening socket (listen_after_bind() returns once every open
  // connection is done) but, unlike stop(), lets running responses (streams) go on.
  void stop_accepting();
  bool draining() const { return draining_; }

  // Called by the route handlers' first hook: the request on this thread has been read, so the
  // connection no longer counts against max_reading.
  static void request_read();
  // When the request being handled on this thread began to arrive (for the access log).
  static std::chrono::steady_clock::time_point request_started();
  // False when the client of the request being handled on this thread has closed its side.
  static bool client_connected();

  // Connections currently reading a request (for tests and metrics).
  int reading() const { return reading_.load(); }

 private:
  bool process_and_close_socket(int sock) override;

  ConnectionLimits limits_;
  std::atomic<int> reading_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace sluice::server
