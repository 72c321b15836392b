// The HTTP edges of `sluice serve` that cpp-httplib 0.11 left open (issue 34), checked on the wire:
// Content-Length problems answered at once (413, 400, 411) instead of after the read deadline, a
// chunked body held to --max-body, 408 and 431 with a message and in the access log, the model
// list at /v1/models/, a NUL in a path kept in the message, pipelined requests all answered in
// order, and one client address unable to take every reading slot.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <regex>
#include <sstream>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string log_of(const Server& s) {
  std::ifstream in(s.log());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sends `head` (and nothing after it) and reads the answer for up to `secs`; the connection stays
// open on the client's side, as a client still meaning to send the body would keep it.
Http answer_to_head(int port, const std::string& head, double secs = 5) {
  Http h;
  const int fd = connect_to(port);
  if (fd < 0) return h;
  send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  std::string raw;
  const auto until = Clock::now() + std::chrono::duration<double>(secs);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, n);
    const size_t split = raw.find("\r\n\r\n");
    if (split == std::string::npos) continue;
    const size_t cl = raw.find("Content-Length: ");
    if (cl != std::string::npos && raw.size() >= split + 4 + std::stoul(raw.substr(cl + 16))) break;
  }
  close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (raw.size() < 12 || split == std::string::npos) return h;
  h.status = std::stoi(raw.substr(9, 3));
  h.headers = raw.substr(0, split);
  h.body = raw.substr(split + 4);
  return h;
}

std::string message(const Http& h) {
  const json j = h.j();
  return j.contains("error") ? j["error"].value("message", "") : "";
}

class ServeHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new Server({"--max-body", "16KiB", "--read-timeout", "1"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_GT(server_->port(), 0) << "server did not start; log: " << server_->log();
  }
  int port() const { return server_->port(); }
  static Server* server_;
};
Server* ServeHttp::server_ = nullptr;

}  // namespace

TEST_F(ServeHttp, ContentLengthProblemsAreAnsweredAtOnce) {
  const std::string post =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  auto t0 = Clock::now();
  Http h = answer_to_head(port(), post + "Content-Length: 100000\r\n\r\n");
  EXPECT_LT(since(t0), 0.9);  // not after the 1 s read deadline
  expect_error(h, 413, "", "payload_too_large");
  EXPECT_NE(message(h).find("16384 bytes (--max-body)"), std::string::npos) << h.body;
  EXPECT_NE(h.headers.find("Connection: close"), std::string::npos) << h.headers;

  t0 = Clock::now();
  h = answer_to_head(port(), post + "Content-Length: -5\r\n\r\n");
  EXPECT_LT(since(t0), 0.9);
  expect_error(h, 400, "", "bad_request");
  EXPECT_NE(message(h).find("Content-Length '-5' is not a byte count"), std::string::npos)
      << h.body;

  h = raw_http(
      port(),
      post + "Content-Length: 13\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"prompt\":1}");
  expect_error(h, 400, "", "bad_request");
  EXPECT_NE(message(h).find("2 Content-Length header fields"), std::string::npos) << h.body;

  t0 = Clock::now();
  h = answer_to_head(port(), post + "\r\n");
  EXPECT_LT(since(t0), 0.9);
  expect_error(h, 411, "", "length_required");

  // A chunked body is held to the same limit as one with a length.
  const std::string body = R"({"prompt":")" + std::string(20000, 'a') + R"("})";
  std::string chunked;
  for (size_t at = 0; at < body.size(); at += 4000) {
    const std::string part = body.substr(at, 4000);
    std::ostringstream size;
    size << std::hex << part.size();
    chunked += size.str() + "\r\n" + part + "\r\n";
  }
  h = raw_http(port(), post + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked +
                           "0\r\n\r\n");
  expect_error(h, 413, "", "payload_too_large");
}

TEST_F(ServeHttp, LateAndOversizedHeadersGet408And431InWordsAndInTheLog) {
  const auto t0 = Clock::now();
  Http h = answer_to_head(port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ");
  EXPECT_GT(since(t0), 0.9);
  expect_error(h, 408, "", "request_timeout");
  EXPECT_NE(message(h).find("did not arrive within the server's 1 s (--read-timeout)"),
            std::string::npos)
      << h.body;

  h = raw_http(port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(200000, 'b') +
                           "\r\n\r\n");
  expect_error(h, 431, "", "header_too_large");
  EXPECT_NE(message(h).find("larger than"), std::string::npos) << h.body;
  // Many header lines, each short, count together.
  std::string many = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 2000; ++i)
    many += "X-Line-" + std::to_string(i) + ": " + std::string(20, 'c') + "\r\n";
  expect_error(raw_http(port(), many + "\r\n"), 431, "", "header_too_large");

  std::this_thread::sleep_for(100ms);
  const std::string log = log_of(*server_);
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(127\.0\.0\.1 GET /v1/models 408 [0-9.]+ ms)")))
      << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(127\.0\.0\.1 GET /v1/models 431 [0-9.]+ ms)")))
      << log;
}

TEST_F(ServeHttp, ModelListWithATrailingSlashAndANulInAPath) {
  const Http list = http(port(), "GET", "/v1/models/", "", "");
  EXPECT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(list.j()["object"], "list") << list.body;
  const Http nul = http(port(), "GET", "/v1/fo%00bar", "", "");
  expect_error(nul, 404, "");
  EXPECT_NE(message(nul).find("no route for GET /v1/fo%00bar"), std::string::npos) << nul.body;
  // Another method on a model path is still a 405 naming GET.
  expect_error(http(port(), "POST", "/v1/models/x", "{}", ""), 405, "", "method_not_allowed");
}

TEST_F(ServeHttp, PipelinedRequestsAreAllAnsweredInOrder) {
  const std::string body = R"({"prompt":"And God said","max_tokens":3,"temperature":0})";
  const std::string reqs =
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body +
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const auto t0 = Clock::now();
  const Http h = raw_http(port(), reqs);  // one write, read to EOF
  EXPECT_LT(since(t0), 4.0);              // not after a keep-alive timeout
  const std::string all = h.headers + "\r\n\r\n" + h.body;
  std::vector<int> statuses;
  for (size_t at = all.find("HTTP/1.1 "); at != std::string::npos;
       at = all.find("HTTP/1.1 ", at + 1))
    statuses.push_back(std::stoi(all.substr(at + 9, 3)));
  EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200})) << all;
  const size_t health = all.find("{\"status\":\"ok\"}"), choices = all.find("\"choices\""),
               list = all.find("\"object\":\"list\"");
  EXPECT_LT(health, choices) << all;
  EXPECT_LT(choices, list) << all;
  EXPECT_NE(list, std::string::npos) << all;
}

TEST(ServeHttpLimits, OneClientAddressCannotTakeEveryReadingSlot) {
  // --max-reading 8: one address may hold 2 connections that are still sending a request.
  Server server({"--max-reading", "8", "--read-timeout", "5"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  std::vector<int> slow;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    const int fd = connect_from("127.0.0.2", server.port());
    ASSERT_GE(fd, 0);
    const std::string half = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  for (int fd : slow) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;  // still reading: one of the two admitted
    char buf[1024];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 12 && std::string(buf, 12) == "HTTP/1.1 429") ++refused;
  }
  EXPECT_EQ(refused, 6);
  // Everyone else is still served.
  const Http health = http(server.port(), "GET", "/health", "", "");
  EXPECT_EQ(health.status, 200) << health.body;
  for (int fd : slow) close(fd);
  // Refused before a byte of the request was read: no method or path to log.
  const std::string log = log_of(server);
  EXPECT_NE(log.find("127.0.0.2 - - 429"), std::string::npos) << log;
}

// The memory plan of `serve` sets the server's own threads aside before it sizes the expert cache
// (issue 34: the soak peaked at its cgroup limit).
TEST(ServeHttpLimits, TheMemoryPlanCountsTheServersThreads) {
  Server server({"--experts", "stream", "--mem-limit", "200MiB"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const std::string log = log_of(server);
  EXPECT_NE(log.find("minus resident weights, KV, front-end overhead and margin"),
            std::string::npos)
      << log;
}
