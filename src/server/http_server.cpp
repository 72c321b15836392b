// See http_server.h. The connection loop mirrors cpp-httplib's own (keep-alive wait, then
// process_request) over a Stream of ours whose reads carry the per-request deadline and whose
// buffer holds the request head read ahead (and any pipelined request after it).
#include "http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice::server {

namespace {

using Clock = std::chrono::steady_clock;

// httplib refuses a header line longer than this (CPPHTTPLIB_HEADER_MAX_LENGTH) with a bare 400;
// the head reader answers it 431 first.
constexpr size_t kHeaderLineMax = CPPHTTPLIB_HEADER_MAX_LENGTH;

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

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

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// After a refusal the client may still be sending (a body the server never read): closing with
// unread bytes makes the kernel reset the connection, which can discard the response before the
// client reads it. So the write side is shut first and what still arrives is read away, for a
// bounded time and amount.
void lingering_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto until = Clock::now() + std::chrono::seconds(2);
  char buf[16384];
  size_t drained = 0;
  while (drained < (8u << 20)) {
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, ms_until(until)) <= 0) break;
    const ssize_t n = recv(sock, buf, sizeof buf, 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  close(sock);
}

}  // namespace

// Per-connection state the handler thread can reach (one connection per worker thread at a time).
struct HttpServer::Connection {
  HttpServer* server = nullptr;
  int sock = -1;
  std::string address;  // the client's, numeric
  int port = 0;
  bool counted = false;                // counted as reading (admit() / stop_reading())
  Clock::time_point started;           // of the current request
  bool deadline_passed = false;        // a read of the current request waited past its deadline
  std::optional<ReadProblem> problem;  // the current request was refused by this layer
  bool routed = false;                 // the current request reached a route handler (body read)
};

namespace {
thread_local HttpServer::Connection* t_connection = nullptr;
}  // namespace

// A buffered socket stream whose reads fail once the current request's deadline has passed.
class HttpServer::Stream : public httplib::Stream {
 public:
  enum class Head { kComplete, kNothing, kClosed, kTimeout, kTooLarge };

  Stream(Connection& c, std::chrono::milliseconds write_timeout)
      : c_(c), write_timeout_(write_timeout) {}
  void set_deadline(Clock::time_point t) { deadline_ = t; }
  size_t buffered() const { return buf_.size() - off_; }
  uint64_t consumed() const { return consumed_; }  // bytes read() has handed out
  // read() hands out no byte past `limit` (of consumed()): the request is over the body limit.
  void set_read_limit(uint64_t limit) { read_limit_ = limit; }

  // Reads until the buffer holds a whole request head (up to and including the empty line), at
  // most `max_bytes` of it. kNothing: the connection closed or stayed silent before a byte of a
  // request; kClosed: it closed within one.
  Head read_head(size_t max_bytes, std::string& head) {
    size_t searched = 0;  // bytes after off_ known to hold no end of the head (but its last 3)
    for (;;) {
      const size_t end = buf_.find("\r\n\r\n", off_ + searched);
      if (end != std::string::npos) {
        head = buf_.substr(off_, end + 4 - off_);
        return head.size() > max_bytes || !lines_fit(head) ? Head::kTooLarge : Head::kComplete;
      }
      if (buffered() > max_bytes || !lines_fit(std::string_view(buf_).substr(off_)))
        return Head::kTooLarge;
      searched = buffered() >= 3 ? buffered() - 3 : 0;
      const ssize_t n = fill();
      if (n > 0) continue;
      if (buffered() == 0) return Head::kNothing;
      return n == 0 ? Head::kClosed : Head::kTimeout;
    }
  }
  // The request line of what is buffered, when it is complete.
  std::string_view request_line() const {
    const std::string_view rest = std::string_view(buf_).substr(off_);
    const size_t eol = rest.find("\r\n");
    return eol == std::string_view::npos ? std::string_view() : rest.substr(0, eol);
  }

  bool is_readable() const override { return buffered() > 0 || wait_readable(); }
  bool is_writable() const override {
    pollfd p{c_.sock, POLLOUT, 0};
    return poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0 &&
           HttpServer::client_connected();
  }
  ssize_t read(char* ptr, size_t size) override {
    if (consumed_ >= read_limit_) {
      c_.problem = ReadProblem{413, ""};
      return -1;
    }
    size = static_cast<size_t>(std::min<uint64_t>(size, read_limit_ - consumed_));
    if (buffered() == 0) {
      const ssize_t n = fill();
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buffered());
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    // Answering ends the reading, except for a refusal: that connection lingers as reading.
    if (!c_.problem) c_.server->stop_reading(c_);
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
  // Waits for bytes until the deadline; a wait that runs out marks the request as late.
  bool wait_readable() const {
    pollfd p{c_.sock, POLLIN, 0};
    const int r = poll(&p, 1, ms_until(deadline_));
    if (r == 0) c_.deadline_passed = true;
    return r > 0;
  }
  // Appends what the socket has (waiting until the deadline): bytes read, 0 at EOF, -1 when the
  // deadline passed or the read failed.
  ssize_t fill() {
    if (off_ == buf_.size()) {
      buf_.clear();
      off_ = 0;
    }
    if (!wait_readable()) return -1;
    char chunk[16384];
    const ssize_t n = recv(c_.sock, chunk, sizeof chunk, 0);
    if (n > 0) buf_.append(chunk, static_cast<size_t>(n));
    return n;
  }
  // Every header line (the request line aside: httplib answers a long one 414) within httplib's
  // limit, counting a line still being received.
  static bool lines_fit(std::string_view s) {
    size_t at = s.find("\r\n");
    if (at == std::string_view::npos) return true;
    for (at += 2; at < s.size();) {
      const size_t eol = s.find("\r\n", at);
      const size_t len = (eol == std::string_view::npos ? s.size() : eol + 2) - at;
      if (len > kHeaderLineMax) return false;
      if (eol == std::string_view::npos) break;
      at = eol + 2;
    }
    return true;
  }

  Connection& c_;
  std::chrono::milliseconds write_timeout_;
  Clock::time_point deadline_;
  std::string buf_;
  size_t off_ = 0;
  uint64_t consumed_ = 0;
  uint64_t read_limit_ = UINT64_MAX;
};

HttpServer::HttpServer(const ConnectionLimits& limits) : limits_(limits) {
  // Only SO_REUSEADDR (a restarted server can bind while old connections are in TIME_WAIT), never
  // SO_REUSEPORT.
  set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

void HttpServer::set_error_reply(HandlerWithResponse reply) {
  error_reply_ = reply;
  set_error_handler(std::move(reply));
}

void HttpServer::set_access_log(httplib::Logger log) {
  access_log_ = log;
  set_logger(std::move(log));
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

bool HttpServer::route_entered(const httplib::Request& req) {
  if (!t_connection) return true;
  t_connection->routed = true;
  HttpServer& server = *t_connection->server;
  server.stop_reading(*t_connection);
  if (req.body.size() <= server.payload_max_length_) return true;
  t_connection->problem = ReadProblem{413, ""};
  return false;
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

std::optional<ReadProblem> HttpServer::read_problem() {
  if (!t_connection) return std::nullopt;
  if (t_connection->problem) return t_connection->problem;
  if (t_connection->deadline_passed) return ReadProblem{408, ""};
  return std::nullopt;
}

HttpServer::Admission HttpServer::admit(Connection& c) {
  std::lock_guard<std::mutex> lock(address_mutex_);
  if (reading_.load() >= limits_.max_reading) return Admission::kBusy;
  int& mine = reading_by_address_[c.address];
  if (mine >= limits_.max_reading_per_address) return Admission::kAddressBusy;
  ++mine;
  ++reading_;
  c.counted = true;
  return Admission::kOk;
}

void HttpServer::stop_reading(Connection& c) {
  if (!c.counted) return;
  std::lock_guard<std::mutex> lock(address_mutex_);
  --reading_;
  const auto it = reading_by_address_.find(c.address);
  if (it != reading_by_address_.end() && --it->second <= 0) reading_by_address_.erase(it);
  c.counted = false;
}

HttpServer::Framing HttpServer::check_framing(const std::string& head) const {
  Framing f;
  int lengths = 0;
  std::string_view length;
  std::string_view rest(head);
  const std::string_view method = rest.substr(0, rest.find(' '));
  rest.remove_prefix(rest.find("\r\n") + 2);  // the request line
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    if (iequals(name, "Content-Length")) {
      ++lengths;
      length = trim(line.substr(colon + 1));
    } else if (iequals(name, "Transfer-Encoding")) {
      f.chunked = true;
    }
  }
  if (lengths > 1) {
    f.problem =
        ReadProblem{400, fmt::format("{} Content-Length header fields (one is allowed)", lengths)};
  } else if (lengths == 1 && f.chunked) {
    f.problem =
        ReadProblem{400, "both Transfer-Encoding and Content-Length are given (one is allowed)"};
  } else if (lengths == 1) {
    bool digits = !length.empty() && length.size() <= 19;
    for (char ch : length) digits = digits && std::isdigit(static_cast<unsigned char>(ch));
    if (!digits)
      f.problem = ReadProblem{400, fmt::format("Content-Length '{}' is not a byte count",
                                               std::string(length.substr(0, 40)))};
    else if ((f.length = std::stoull(std::string(length))) > payload_max_length_)
      f.problem = ReadProblem{413, ""};
  } else if (!f.chunked && (method == "POST" || method == "PUT" || method == "PATCH")) {
    // httplib would read such a body until the client closes the connection.
    f.problem = ReadProblem{411, ""};
  }
  return f;
}

void HttpServer::refuse(Stream& strm, Connection& c, const ReadProblem& problem) {
  c.problem = problem;
  httplib::Request req;
  const std::string_view line = strm.request_line();
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 != std::string_view::npos && sp2 > sp1) {
    req.method = std::string(line.substr(0, sp1));
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    req.path = std::string(target.substr(0, target.find('?')));
  }
  req.remote_addr = c.address;
  req.remote_port = c.port;
  httplib::Response res;
  res.status = problem.status;
  if (error_reply_) error_reply_(req, res);
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
  for (const auto& [k, v] : res.headers)
    if (!iequals(k, "Connection") && !iequals(k, "Content-Length")) out += k + ": " + v + "\r\n";
  out += fmt::format("Content-Length: {}\r\nConnection: close\r\n\r\n", res.body.size());
  out += res.body;
  strm.write(out.data(), out.size());
  if (access_log_) access_log_(req, res);
}

bool HttpServer::process_and_close_socket(int sock) {
  Connection c;
  c.server = this;
  c.sock = sock;
  peer_address(sock, false, c.address, c.port);
  t_connection = &c;
  Stream strm(c, limits_.write_timeout);
  bool ret = false, linger = false;
  for (size_t left = keep_alive_max_count_; left > 0 && is_running() && !draining_; --left) {
    const bool first = left == keep_alive_max_count_;
    // Between requests: wait for the next one (it may be buffered already: pipelined).
    if (!first && strm.buffered() == 0) {
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(limits_.keep_alive_timeout.count())) <= 0) break;
    }
    c.started = Clock::now();
    c.deadline_passed = false;
    c.problem.reset();
    strm.set_deadline(c.started + limits_.request_read_deadline);
    // A connection counts as reading from the start, since it holds a worker thread: too many
    // (from everyone, or from its address) are refused at once rather than let slow clients take
    // every worker.
    // Such a refusal closes at once: lingering would hold the worker the limit protects.
    if (const Admission a = admit(c); a != Admission::kOk) {
      refuse(strm, c, ReadProblem{a == Admission::kBusy ? 503 : 429, ""});
      break;
    }
    std::string head;
    const Stream::Head h = strm.read_head(limits_.max_header_bytes, head);
    if (h == Stream::Head::kNothing || h == Stream::Head::kClosed) break;
    Framing framing;
    if (h == Stream::Head::kTimeout)
      framing.problem = ReadProblem{408, ""};
    else if (h == Stream::Head::kTooLarge)
      framing.problem = ReadProblem{431, ""};
    else
      framing = check_framing(head);
    if (framing.problem) {
      refuse(strm, c, *framing.problem);
      linger = true;
      break;
    }
    const uint64_t body_start = strm.consumed() + head.size();
    // httplib 0.11 reads a chunked body whatever its size: its bytes on the wire (data and chunk
    // framing) are capped here, the data itself by route_entered().
    const uint64_t wire_max =
        payload_max_length_ > (UINT64_MAX >> 2) ? UINT64_MAX : 2 * payload_max_length_ + (64 << 10);
    strm.set_read_limit(framing.chunked ? body_start + wire_max : UINT64_MAX);
    c.routed = false;
    bool closed = false;
    ret = process_request(strm, left == 1, closed, nullptr);
    stop_reading(c);  // answered (a refusal's write leaves the count to this)
    if (!ret) break;
    // The next request starts where this one's body ends: when the body was not read to its end
    // (a refusal before the handler, a failed or late read), the connection is not reused, and
    // what is still on its way is read away before it closes.
    const bool in_step =
        !c.deadline_passed &&
        (framing.chunked ? c.routed : strm.consumed() - body_start == framing.length);
    if (!in_step) {
      linger = true;
      break;
    }
    if (closed) break;
  }
  t_connection = nullptr;
  // A lingering connection still counts as reading (it is, and it holds a worker), so one client
  // cannot hold more workers this way than its reading limit.
  if (linger && (c.counted || admit(c) == Admission::kOk)) {
    lingering_close(sock);
    stop_reading(c);
  } else {
    stop_reading(c);
    ::shutdown(sock, SHUT_RDWR);
    close(sock);
  }
  return ret;
}

}  // namespace sluice::server
