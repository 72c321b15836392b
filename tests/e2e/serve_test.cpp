// End-to-end tests of `sluice serve` on the shipped tiny model: the binary is started on a free
// loopback port (--port 0, the port read from its stdout, then /health polled) and spoken to over
// raw sockets, so the bytes on the wire are what is checked. Covers authentication, malformed
// and mistyped requests, oversized bodies, context overflow, a full queue, a client vanishing
// mid-stream, prefix reuse, the Anthropic shape, metrics and the per-request timeout; then runs the `openai` npm client
// tests (tests/node/serve_openai.mjs) against a second server.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "serve_client.h"

using namespace sluice::test::serve;

namespace {

// One slot and one queue place, so a third concurrent request is refused; small body limit.
class ServeRobustness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new Server({"--parallel", "1", "--max-queue", "1", "--api-key", kKey, "--max-body", "16KiB", "--timeout", "60"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << "server did not start; log: " << server_->log(); }
  int port() const { return server_->port(); }
  static Server* server_;
};
Server* ServeRobustness::server_ = nullptr;

const std::string kLong = R"({"prompt":"And God said","max_tokens":100,"temperature":0,"ignore_eos":true,"stream":true})";

}  // namespace

TEST_F(ServeRobustness, HealthNeedsNoKeyButTheApiDoes) {
  EXPECT_EQ(http(port(), "GET", "/health", "", "").status, 200);
  expect_error(http(port(), "GET", "/v1/models", "", ""), 401, "", "invalid_api_key");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a"})", "wrong"), 401, "", "invalid_api_key");
  const Http ok = http(port(), "GET", "/v1/models");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.j()["data"][0]["id"], "sluice-tiny-moe");
}

TEST_F(ServeRobustness, MalformedJsonAndWrongTypesAre400NamingTheField) {
  expect_error(http(port(), "POST", "/v1/completions", "{\"prompt\": \"a\""), 400, "", "invalid_json");
  expect_error(http(port(), "POST", "/v1/completions", "[1,2]"), 400, "", "invalid_type");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","max_tokens":"ten"})"), 400, "max_tokens", "invalid_type");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","max_tokens":-1})"), 400, "max_tokens");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","temperature":9})"), 400, "temperature");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","stop":[1]})"), 400, "stop", "invalid_type");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":[99999999]})"), 400, "prompt");
  expect_error(http(port(), "POST", "/v1/completions", R"({"max_tokens":3})"), 400, "prompt");
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":"a","stream":"yes"})"), 400, "stream", "invalid_type");
  expect_error(http(port(), "POST", "/v1/chat/completions", R"({"messages":"hi"})"), 400, "messages", "invalid_type");
  expect_error(http(port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":5}]})"), 400,
               "messages[0].content", "invalid_type");
  expect_error(http(port(), "POST", "/v1/chat/completions", R"({"messages":[{"content":"x"}]})"), 400, "messages[0].role");
  expect_error(http(port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"seed":1.5})"),
               400, "seed", "invalid_type");
  const Http anth = http(port(), "POST", "/v1/messages", R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(anth.status, 400);
  EXPECT_EQ(anth.j()["type"], "error");
  EXPECT_EQ(anth.j()["error"]["type"], "invalid_request_error");
  expect_error(http(port(), "GET", "/v1/nothing"), 404, "");
  EXPECT_EQ(http(port(), "GET", "/health").status, 200);
}

TEST_F(ServeRobustness, OversizedBodyIs413AndLongPromptIsContextOverflow) {
  const std::string big = R"({"prompt":")" + std::string(20000, 'a') + R"("})";
  expect_error(http(port(), "POST", "/v1/completions", big), 413, "", "payload_too_large");
  std::string words;
  for (int i = 0; i < 200; ++i) words += " and the LORD";
  expect_error(http(port(), "POST", "/v1/completions", R"({"prompt":")" + words + R"("})"), 400, "prompt",
               "context_length_exceeded");
  expect_error(http(port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":")" + words + R"("}]})"),
               400, "messages", "context_length_exceeded");
}

TEST_F(ServeRobustness, FullQueueIs503WithRetryAfter) {
  // One slot, one queue place: of six simultaneous long requests at least one must be refused.
  std::vector<std::future<Http>> all;
  for (int i = 0; i < 6; ++i) all.push_back(std::async(std::launch::async, [&] { return http(port(), "POST", "/v1/completions", kLong); }));
  int ok = 0, busy = 0;
  for (auto& f : all) {
    const Http h = f.get();
    if (h.status == 200) {
      ++ok;
      EXPECT_NE(h.body.find("data: [DONE]"), std::string::npos);
    } else {
      ++busy;
      expect_error(h, 503, "", "queue_full");
      EXPECT_NE(h.headers.find("Retry-After: 1"), std::string::npos) << h.headers;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1);
}

TEST_F(ServeRobustness, DisconnectMidStreamCancelsAndFreesTheSlot) {
  const double cancelled_before = metrics(port()).value("sluice_requests_cancelled_total", 0.0);
  const int fd = connect_to(port());
  ASSERT_GE(fd, 0);
  const std::string req = request_text("POST", "/v1/completions", kLong, kKey);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  close(fd);  // mid-stream: the server's next writes fail
  json m;
  for (int i = 0; i < 100; ++i) {
    m = metrics(port());
    if (m.value("sluice_requests_cancelled_total", 0.0) > cancelled_before && m.value("sluice_active_requests", 1.0) == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GT(m.value("sluice_requests_cancelled_total", 0.0), cancelled_before);
  EXPECT_EQ(m.value("sluice_active_requests", -1.0), 0);
  // Still serving.
  const Http h = http(port(), "POST", "/v1/completions", R"({"prompt":"And God said","max_tokens":4,"temperature":0})");
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["usage"]["completion_tokens"], 4);
}

// A stop string that the whole reply is a prefix of holds every token's text back until the end:
// the stream still carries all of it, then [DONE] and the final chunk.
TEST_F(ServeRobustness, StreamWhoseTextIsHeldBackEndsWithItsFinalChunk) {
  const std::string body = R"({"prompt":"And God said","max_tokens":24,"temperature":0,"ignore_eos":true)";
  const Http full = http(port(), "POST", "/v1/completions", body + "}");
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string text = full.j()["choices"][0]["text"];
  ASSERT_FALSE(text.empty());
  json stop = json::array({text + "\x01"});
  const Http h = http(port(), "POST", "/v1/completions", body + R"(,"stream":true,"stop":)" + stop.dump() + "}");
  ASSERT_EQ(h.status, 200);
  EXPECT_TRUE(h.complete) << "the stream ended without its final chunk: " << h.body;
  EXPECT_NE(h.body.find("data: [DONE]"), std::string::npos) << h.body;
  std::string streamed;
  for (size_t at = h.body.find("data: {"); at != std::string::npos; at = h.body.find("data: {", at + 1)) {
    const json ev = json::parse(h.body.substr(at + 6, h.body.find("\n", at) - at - 6), nullptr, false);
    if (ev.is_object()) streamed += ev["choices"][0].value("text", "");
  }
  EXPECT_EQ(streamed, text);
}

TEST_F(ServeRobustness, RepeatedPromptReusesTheCachedPrefix) {
  const std::string body = R"({"prompt":"And the earth was without form, and void","max_tokens":6,"temperature":0})";
  const Http a = http(port(), "POST", "/v1/completions", body);
  const double reused = metrics(port()).value("sluice_prompt_tokens_reused_total", 0.0);
  const Http b = http(port(), "POST", "/v1/completions", body);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(a.j()["choices"][0]["text"], b.j()["choices"][0]["text"]);
  const int n_prompt = b.j()["usage"]["prompt_tokens"];
  EXPECT_EQ(metrics(port()).value("sluice_prompt_tokens_reused_total", 0.0) - reused, n_prompt - 1);
}

TEST_F(ServeRobustness, AnthropicMessagesShapeAndStreamEvents) {
  const std::string body = R"({"model":"x","max_tokens":5,"temperature":0,"system":"Be brief.",
                               "messages":[{"role":"user","content":[{"type":"text","text":"Who is the LORD?"}]}]})";
  const Http h = http(port(), "POST", "/v1/messages", body);
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["content"][0]["type"], "text");
  EXPECT_EQ(j["stop_reason"], "max_tokens");
  EXPECT_EQ(j["usage"]["output_tokens"], 5);
  json sj = json::parse(body);
  sj["stream"] = true;
  const Http s = http(port(), "POST", "/v1/messages", sj.dump());
  ASSERT_EQ(s.status, 200);
  std::string text;
  const std::string delta = "event: content_block_delta\ndata: ";
  for (size_t at = s.body.find(delta); at != std::string::npos; at = s.body.find(delta, at + 1)) {
    const size_t from = at + delta.size();
    text += json::parse(s.body.substr(from, s.body.find('\n', from) - from))["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(text, j["content"][0]["text"]);
  size_t at = 0;
  for (const char* ev : {"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}) {
    const size_t next = s.body.find(std::string("event: ") + ev, at);
    EXPECT_NE(next, std::string::npos) << ev << " missing or out of order";
    if (next != std::string::npos) at = next;
  }
}

TEST_F(ServeRobustness, MetricsAreExposed) {
  ASSERT_EQ(http(port(), "POST", "/v1/completions", R"({"prompt":"And God said","max_tokens":2})").status, 200);
  const std::string text = http(port(), "GET", "/metrics").body;
  for (const char* name : {"sluice_requests_total", "sluice_generated_tokens_total", "sluice_queue_depth", "sluice_batch_size",
                           "sluice_expert_cache_hits_total", "sluice_expert_cache_misses_total", "sluice_expert_bytes_read_total",
                           "sluice_expert_stall_seconds_total", "sluice_http_responses_total{code=\"200\"}"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_GT(metrics(port()).value("sluice_expert_requests_total", 0.0), 0);
}

TEST(ServeTimeout, SlowRequestsEndWith504OrAStreamedErrorAndFreeTheSlot) {
  Server server({"--timeout", "0.02"});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const std::string slow = R"({"prompt":"And God said","max_tokens":100,"temperature":0,"ignore_eos":true})";
  expect_error(http(server.port(), "POST", "/v1/completions", slow), 504, "", "timeout");
  const Http s = http(server.port(), "POST", "/v1/completions", kLong);
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.body.find(R"("code":"timeout")"), std::string::npos) << s.body;
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos) << s.body;
  const json m = metrics(server.port());
  EXPECT_EQ(m.value("sluice_requests_timed_out_total", 0.0), 2);
  EXPECT_EQ(m.value("sluice_active_requests", -1.0), 0);
}

TEST(ServeOpenAiClient, NodeClientTestsPass) {
  const std::filesystem::path node_dir = kSource + "/tests/node";
  if (!std::filesystem::exists(node_dir / "node_modules/openai") || std::system("node --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "node or tests/node/node_modules/openai missing (run npm ci in tests/node)";
  Server server({"--parallel", "8", "--api-key", kKey});
  ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
  const std::string cmd = "cd '" + node_dir.string() + "' && node serve_openai.mjs http://127.0.0.1:" +
                          std::to_string(server.port()) + "/v1 " + kKey;
  const auto [status, out] = sluice::test::sh(cmd);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("ok   concurrency"), std::string::npos) << out;
}

// `serve --routing-trace`: a step's pass holds rows of several requests, and the trace (written at
// shutdown) records them as one pass; /metrics says how many rows it holds. The records are read
// here as routing_trace.h documents them (version 2: a 16-byte head with the pass at byte 12).
TEST(ServeRoutingTrace, AStepOverSeveralRequestsIsOnePass) {
  const std::string trace = (sluice::test::scratch_dir() / "serve.trace").string();
  std::filesystem::remove(trace);
  double rows = 0;
  {
    Server server({"--parallel", "4", "--routing-trace", trace});
    ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
    const std::string body = R"({"prompt":"And God said","max_tokens":64,"temperature":0,"ignore_eos":true})";
    std::vector<std::future<Http>> all;
    for (int i = 0; i < 4; ++i)
      all.push_back(std::async(std::launch::async, [&] { return http(server.port(), "POST", "/v1/completions", body, ""); }));
    for (auto& f : all) EXPECT_EQ(f.get().status, 200);
    rows = metrics(server.port()).value("sluice_routing_trace_rows", 0.0);
    EXPECT_GE(rows, 4 * 64);
  }  // SIGTERM: the trace appears whole
  const std::string data = sluice::test::read_file(trace);
  ASSERT_GE(data.size(), 32u);
  ASSERT_EQ(data.substr(0, 8), "SLUICERT");
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, data.data() + at, 4);
    return v;
  };
  EXPECT_EQ(u32(8), 2u);
  const size_t record = 16 + 2 * u32(12) * u32(20) * ((u32(24) & 1) ? 2 : 1);
  ASSERT_EQ((data.size() - 32) % record, 0u);
  const size_t n = (data.size() - 32) / record;
  EXPECT_EQ(static_cast<double>(n), rows);
  // Passes whose rows belong to more than one sequence: the batched decode steps.
  size_t shared = 0;
  for (size_t r = 1; r < n; ++r) {
    const size_t at = 32 + r * record, before = at - record;
    shared += u32(at + 12) == u32(before + 12) && u32(at + 8) != u32(before + 8);
  }
  EXPECT_GT(shared, 10u);
  const auto [status, out] = sluice::test::sh(std::string(SLUICE_BIN) + " route-stats --trace " + trace);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" rows in "), std::string::npos) << out;
}
