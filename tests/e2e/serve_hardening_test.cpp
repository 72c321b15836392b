// End-to-end tests of `sluice serve` against misuse and hostile clients (issue 15): a port already
// in use, clients that vanish while a non-streaming answer is computed, slow clients holding
// connections with half a header, SIGTERM with requests in flight, and the small HTTP surface
// items (Bearer in any case, CORS, 405, /v1/models/{id}, the 413 limit, access log, histograms).
// Long generations use -c 8192 (past the tiny model's trained 128, allowed with a warning).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

const std::string kEndless =
    R"({"prompt":"And God said","max_tokens":8000,"temperature":0,"ignore_eos":true)";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits until `pred(metrics)` holds or `secs` pass; returns the last metrics read.
template <typename Pred>
json wait_metrics(int port, double secs, Pred pred) {
  json m;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  do {
    m = metrics(port);
    if (pred(m)) break;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < until);
  return m;
}

class ServeHardening : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new Server({"--api-key", kKey, "--cors", "https://app.example", "--max-body", "16KiB",
                          "-c", "8192", "--read-timeout", "2", "--parallel", "2"});
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
Server* ServeHardening::server_ = nullptr;

}  // namespace

TEST(ServePort, SecondServerOnABusyPortFailsSayingSo) {
  Server first({});
  ASSERT_GT(first.port(), 0) << "server did not start; log: " << first.log();
  const std::string cmd = std::string("timeout 60 ") + SLUICE_BIN + " serve -m " + kModel +
                          " -t 1 --port " + std::to_string(first.port());
  const auto [status, out] = sluice::test::sh(cmd);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("port " + std::to_string(first.port()) + " is in use"), std::string::npos)
      << out;
  EXPECT_EQ(http(first.port(), "GET", "/health").status, 200);
}

TEST_F(ServeHardening, NonStreamingRequestIsCancelledWhenItsClientLeaves) {
  const double before = metrics(port()).value("sluice_requests_cancelled_total", 0.0);
  const int fd = connect_to(port());
  ASSERT_GE(fd, 0);
  const std::string req = request_text("POST", "/v1/completions", kEndless + "}", kKey);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  wait_metrics(port(), 10,
               [](const json& m) { return m.value("sluice_active_requests", 0.0) >= 1; });
  close(fd);
  // 8000 tokens take far longer than this at the tiny model's speed on one thread.
  const json m = wait_metrics(port(), 5, [&](const json& m) {
    return m.value("sluice_requests_cancelled_total", 0.0) > before &&
           m.value("sluice_active_requests", 1.0) == 0;
  });
  EXPECT_GT(m.value("sluice_requests_cancelled_total", 0.0), before);
  EXPECT_EQ(m.value("sluice_active_requests", -1.0), 0);
}

// The slow clients come from another address than /health's: one address may hold only a quarter
// of the reading slots (--max-reading-per-client), and the rest of its connections are refused.
TEST_F(ServeHardening, SlowClientsWithHalfAHeaderDoNotStarveHealth) {
  std::vector<int> slow;
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_from("127.0.0.2", port());
    ASSERT_GE(fd, 0);
    const std::string half = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::future<Http> health =
      std::async(std::launch::async, [&] { return http(port(), "GET", "/health"); });
  ASSERT_EQ(health.wait_for(3s), std::future_status::ready) << "/health did not answer within 3 s";
  EXPECT_EQ(health.get().status, 200);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // Every slow connection is closed: refused at once (429) or at the 2 s read deadline (408).
  int closed = 0;
  for (int fd : slow) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) > 0) {
      char buf[512];
      while (recv(fd, buf, sizeof buf, 0) > 0) {
      }
      ++closed;
    }
    close(fd);
  }
  EXPECT_EQ(closed, 100);
}

TEST_F(ServeHardening, SmallHttpItems) {
  // Bearer in any case.
  std::string req =
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: bearer " + kKey +
      "\r\n\r\n";
  EXPECT_EQ(raw_http(port(), req).status, 200);
  // CORS: the origin on answers, and a preflight without a key.
  const Http cors = http(port(), "GET", "/v1/models");
  EXPECT_NE(cors.headers.find("Access-Control-Allow-Origin: https://app.example"),
            std::string::npos)
      << cors.headers;
  req =
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: "
      "https://app.example\r\n"
      "Access-Control-Request-Method: POST\r\n\r\n";
  const Http pre = raw_http(port(), req);
  EXPECT_EQ(pre.status, 204);
  EXPECT_NE(pre.headers.find("Access-Control-Allow-Methods: GET, POST, OPTIONS"), std::string::npos)
      << pre.headers;
  EXPECT_NE(pre.headers.find("Access-Control-Allow-Headers:"), std::string::npos) << pre.headers;
  // 405 with Allow on a known path asked with the wrong method.
  const Http wrong = http(port(), "GET", "/v1/chat/completions");
  expect_error(wrong, 405, "", "method_not_allowed");
  EXPECT_NE(wrong.headers.find("Allow: POST"), std::string::npos) << wrong.headers;
  expect_error(http(port(), "POST", "/v1/models", "{}"), 405, "", "method_not_allowed");
  // One model by id.
  const Http one = http(port(), "GET", "/v1/models/sluice-tiny-moe");
  EXPECT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.j()["id"], "sluice-tiny-moe");
  expect_error(http(port(), "GET", "/v1/models/gpt-4"), 404, "model", "model_not_found");
  // 413 names the limit.
  const Http big =
      http(port(), "POST", "/v1/completions", R"({"prompt":")" + std::string(20000, 'a') + R"("})");
  expect_error(big, 413, "", "payload_too_large");
  EXPECT_NE(big.j()["error"]["message"].get<std::string>().find("16384 bytes"), std::string::npos)
      << big.body;
  // A form-encoded body (curl -d's default type) is capped at 8 KiB by cpp-httplib, below the
  // limit: the message says so instead of naming --max-body.
  const std::string form_body = R"({"prompt":")" + std::string(9000, 'a') + R"("})";
  const Http form =
      raw_http(port(),
               "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               "Authorization: Bearer " +
                   kKey +
                   "\r\n"
                   "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                   std::to_string(form_body.size()) + "\r\n\r\n" + form_body);
  expect_error(form, 413, "", "payload_too_large");
  EXPECT_NE(form.body.find("application/json"), std::string::npos) << form.body;
  // Histograms and the access log.
  ASSERT_EQ(
      http(port(), "POST", "/v1/completions", R"({"prompt":"And God said","max_tokens":3})").status,
      200);
  const std::string text = http(port(), "GET", "/metrics").body;
  for (const char* name : {"sluice_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
                           "sluice_time_to_first_token_seconds_count",
                           "sluice_request_duration_seconds_bucket{le=\"0.5\"}",
                           "sluice_request_duration_seconds_sum"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_GE(metrics(port()).value("sluice_request_duration_seconds_count", 0.0), 1);
  const std::string log = read_file(server_->log());
  EXPECT_TRUE(std::regex_search(
      log,
      std::regex(
          R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z 127\.0\.0\.1 POST /v1/completions 200 [0-9.]+ ms)")))
      << log;
}

TEST(ServeWarnings, NonLoopbackHostWithoutKeyWarns) {
  Server server({"--host", "0.0.0.0"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  EXPECT_NE(read_file(server.log()).find("warning: listening on 0.0.0.0 without --api-key"),
            std::string::npos);
}

TEST(ServeShutdown, SigtermLetsShortRequestsFinishAndEndsLongStreamsWithAnError) {
  Server server({"--shutdown-grace", "5", "-c", "8192", "--parallel", "2"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  // A stream that cannot finish within the grace period, and a short request sent just before.
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  const std::string req =
      request_text("POST", "/v1/completions", kEndless + R"(,"stream":true})", "");
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  std::future<Http> short_req = std::async(std::launch::async, [&] {
    return http(server.port(), "POST", "/v1/completions",
                R"({"prompt":"And God said","max_tokens":300,"temperature":0,"ignore_eos":true})",
                "");
  });
  // Wait for the short request to be admitted (under a loaded test run it can take a while).
  double active = 0;
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       active < 2 && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
    active = metrics(server.port()).value("sluice_active_requests", 0.0);
  ASSERT_EQ(active, 2) << "both requests should be running";
  const auto t0 = std::chrono::steady_clock::now();
  kill(server.pid(), SIGTERM);
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, n);
  close(fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string body = dechunk(got.substr(got.find("\r\n\r\n") + 4));
  EXPECT_NE(body.find(R"("code":"server_shutdown")"), std::string::npos)
      << body.substr(body.size() > 600 ? body.size() - 600 : 0);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  EXPECT_GT(secs, 4.9);  // the stream ran on through the grace period
  EXPECT_LT(secs, 15.0);
  const Http s = short_req.get();
  EXPECT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.j()["usage"]["completion_tokens"], 300);
  EXPECT_EQ(connect_to(server.port()), -1) << "still accepting after SIGTERM";
}

TEST(ServeShutdown, ASecondSigtermEndsStreamsWithoutWaitingForTheGracePeriod) {
  Server server({"--shutdown-grace", "60", "-c", "8192"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  const std::string req =
      request_text("POST", "/v1/completions", kEndless + R"(,"stream":true})", "");
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  const auto t0 = std::chrono::steady_clock::now();
  kill(server.pid(), SIGTERM);
  std::this_thread::sleep_for(300ms);
  kill(server.pid(), SIGTERM);
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, n);
  close(fd);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  const std::string body = dechunk(got.substr(got.find("\r\n\r\n") + 4));
  EXPECT_NE(body.find(R"("code":"server_shutdown")"), std::string::npos);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
}
