// See http_server.h. The connection loop mirrors cpp-httplib's own (keep-alive wait, then
// process_request) over a Stream of ours whose reads carry the per-request deadline.
#include "http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::server {

namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Per-connection state the handler thread can reach (one connection per worker thread at a time).
struct Connection {
  int sock = -1;
  std::atomic<int>* reading = nullptr;
  bool counted = false;       // counted in *reading
  Clock::time_point started;  // of the current request
  void stop_reading() {
    if (counted) reading->fetch_sub(1);
    counted = false;
  }
};
thread_local Connection* t_connection = nullptr;

void peer_address(int sock, bool local, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((local ? getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len)
             : getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(serv);
}

// A buffered socket stream whose reads fail once the current request's deadline has passed.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(Connection& c, std::chrono::milliseconds write_timeout)
      : c_(c), write_timeout_(write_timeout) {}
  void set_deadline(Clock::time_point t) { deadline_ = t; }

  bool is_readable() const override {
    if (off_ < len_) return true;
    pollfd p{c_.sock, POLLIN, 0};
    return poll(&p, 1, ms_until(deadline_)) > 0;
  }
  bool is_writable() const override {
    pollfd p{c_.sock, POLLOUT, 0};
    return poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0 &&
           HttpServer::client_connected();
  }
  ssize_t read(char* ptr, size_t size) override {
    if (off_ == len_) {
      if (!is_readable()) return -1;
      const ssize_t n = recv(c_.sock, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    c_.stop_reading();
    size_t sent = 0;
    while (sent < size) {
      pollfd p{c_.sock, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(write_timeout_.count())) <= 0) return -1;
      const ssize_t n = send(c_.sock, ptr + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) return -1;
      sent += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    peer_address(c_.sock, false, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    peer_address(c_.sock, true, ip, port);
  }
  int socket() const override { return c_.sock; }

 private:
  Connection& c_;
  std::chrono::milliseconds write_timeout_;
  Clock::time_point deadline_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

}  // namespace

HttpServer::HttpServer(const ConnectionLimits& limits) : limits_(limits) {
  // Only SO_REUSEADDR (a restarted server can bind while old connections are in TIME_WAIT), never
  // SO_REUSEPORT.
  set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

int HttpServer::bind(const std::string& host, int port, std::string& error) {
  const int got = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (got > 0) {
    ::listen(svr_sock_,
             limits_.backlog);  // re-listening on a bound socket only changes the backlog
    return got;
  }
  // httplib does not say why; one plain bind attempt does.
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    error = fmt::format("cannot resolve host '{}'", host);
    return -1;
  }
  const int sock = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  const int rc = ::bind(sock, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  close(sock);
  freeaddrinfo(res);
  if (rc != 0 && err == EADDRINUSE)
    error =
        fmt::format("port {} is in use (another server is listening on {}:{})", port, host, port);
  else if (rc != 0)
    error = fmt::format("cannot listen on {}:{}: {}", host, port, std::strerror(err));
  else
    error = fmt::format("cannot listen on {}:{}", host, port);
  return -1;
}

void HttpServer::stop_accepting() {
  // httplib's stop() marks the socket invalid, which also ends every chunked response at once;
  // shutting the socket down only makes accept() fail, and listen then waits for the workers.
  if (draining_.exchange(true)) return;
  const int sock = svr_sock_;
  if (sock >= 0) ::shutdown(sock, SHUT_RDWR);
}

void HttpServer::request_read() {
  if (t_connection) t_connection->stop_reading();
}

std::chrono::steady_clock::time_point HttpServer::request_started() {
  return t_connection ? t_connection->started : Clock::now();
}

bool HttpServer::client_connected() {
  if (!t_connection) return true;
  pollfd p{t_connection->sock, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return false;
  char c;
  return recv(t_connection->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

bool HttpServer::process_and_close_socket(int sock) {
  Connection c;
  c.sock = sock;
  c.reading = &reading_;
  if (reading_.fetch_add(1) >= limits_.max_reading) {
    // Too many connections are still sending their request: refuse this one rather than let slow
    // clients take every worker thread.
    reading_.fetch_sub(1);
    static const char kBusy[] =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: "
        "close\r\nRetry-After: 1\r\n\r\n";
    send(sock, kBusy, sizeof kBusy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(sock, SHUT_RDWR);
    close(sock);
    return false;
  }
  c.counted = true;
  t_connection = &c;
  DeadlineStream strm(c, limits_.write_timeout);
  bool ret = false;
  for (size_t left = keep_alive_max_count_; left > 0 && is_running() && !draining_; --left) {
    if (left != keep_alive_max_count_) {
      // Between requests: wait for the next one, then count the connection as reading again.
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(limits_.keep_alive_timeout.count())) <= 0) break;
      if (!c.counted) {
        reading_.fetch_add(1);
        c.counted = true;
      }
    }
    c.started = Clock::now();
    strm.set_deadline(c.started + limits_.request_read_deadline);
    bool closed = false;
    ret = process_request(strm, left == 1, closed, nullptr);
    if (!ret || closed) break;
  }
  c.stop_reading();
  t_connection = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  close(sock);
  return ret;
}

}  // namespace sluice::server
