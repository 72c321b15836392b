// Helpers of the `sluice serve` end-to-end tests: raw-socket HTTP requests (so the bytes on the
// wire are what is checked) and the server as a child process on a free loopback port.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../unit/test_util.h"

namespace sluice::test::serve {

using json = nlohmann::json;
using namespace std::chrono_literals;
inline const std::string kSource = SLUICE_SOURCE_DIR;
inline const std::string kModel = kSource + "/models/sluice-tiny-moe.gguf";
inline const std::string kKey = "test-key";

struct Http {
  int status = 0;
  std::string headers, body;
  bool complete = false;  // a chunked body ended with its zero-length chunk (others: always true)
  json j() const { return json::parse(body, nullptr, false); }
};

inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A connection from `source`, another loopback address: another client to the server.
inline int connect_from(const char* source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, source, &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline std::string request_text(const std::string& method, const std::string& path,
                                const std::string& body, const std::string& auth) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!auth.empty()) r += "Authorization: Bearer " + auth + "\r\n";
  if (method == "POST")
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

inline std::string dechunk(const std::string& s, bool* complete = nullptr) {
  std::string out;
  if (complete) *complete = false;
  size_t at = 0;
  while (at < s.size()) {
    const size_t eol = s.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(s.substr(at, eol - at), nullptr, 16);
    if (n == 0) {
      if (complete) *complete = true;
      break;
    }
    out += s.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return out;
}

// Sends `req` on a fresh connection and reads the answer to EOF.
inline Http raw_http(int port, const std::string& req) {
  Http h;
  const int fd = connect_to(port);
  if (fd < 0) return h;
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) and close before reading everything
    sent += n;
  }
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, n);
  close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (raw.size() < 12 || split == std::string::npos) return h;
  h.status = std::stoi(raw.substr(9, 3));
  h.headers = raw.substr(0, split);
  h.body = raw.substr(split + 4);
  h.complete = true;
  if (h.headers.find("Transfer-Encoding: chunked") != std::string::npos) h.body = dechunk(h.body, &h.complete);
  return h;
}

// One request on a fresh connection, read to EOF.
inline Http http(int port, const std::string& method, const std::string& path,
                 const std::string& body = "", const std::string& auth = kKey) {
  return raw_http(port, request_text(method, path, body, auth));
}

// `sluice serve --port 0 ...` as a child process (on the shipped model unless `model` names
// another); stderr goes to a file in the scratch dir. `launcher` (mpirun and its options) goes
// before the binary; stop_with() names the process the destructor signals instead of the child.
class Server {
 public:
  explicit Server(std::vector<std::string> args, const std::string& model = kModel,
                  const std::vector<std::string>& launcher = {}) {
    args.insert(args.begin(), {SLUICE_BIN, "serve", "-m", model, "--port", "0", "-t", "1"});
    args.insert(args.begin(), launcher.begin(), launcher.end());
    log_ = (sluice::test::scratch_dir() /
            ("serve-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + ".log"))
               .string();
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      const int err = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(out[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    std::string text;
    const std::string marker = "listening on http://";
    auto listening = [&] {
      return text.find(marker) != std::string::npos &&
             text.find('\n', text.find(marker)) != std::string::npos;
    };
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!listening() && std::chrono::steady_clock::now() < until) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, n);
    }
    close(out[0]);
    if (listening())
      port_ = std::atoi(text.c_str() + text.rfind(':', text.find('\n', text.find(marker))) + 1);
    while (port_ > 0 && std::chrono::steady_clock::now() < until &&
           http(port_, "GET", "/health").status != 200)
      std::this_thread::sleep_for(50ms);
  }
  ~Server() {
    if (pid_ <= 0) return;
    kill(stop_pid_ > 0 ? stop_pid_ : pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "server did not stop cleanly; log: " << log_;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }
  void stop_with(pid_t pid) { stop_pid_ = pid; }
  // Waits for the child to end (at most `limit`); its exit status as sh reports it (128+signal
  // for a signal), -1 if it is still running. The destructor then has nothing to stop.
  int wait_exit(std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  pid_t stop_pid_ = -1;
  int port_ = 0;
  std::string log_;
};

inline json metrics(int port) {
  json m = json::object();
  const std::string text = http(port, "GET", "/metrics").body;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    if (line.rfind("sluice_", 0) == 0 && sp != std::string::npos &&
        line.find('{') == std::string::npos)
      m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return m;
}

inline void expect_error(const Http& h, int status, const std::string& param,
                         const std::string& code = "") {
  EXPECT_EQ(h.status, status) << h.body;
  const json j = h.j();
  ASSERT_TRUE(j.contains("error")) << h.body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << h.body;
  EXPECT_TRUE(j["error"]["type"].is_string()) << h.body;
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << h.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << h.body;
  }
}

}  // namespace sluice::test::serve
