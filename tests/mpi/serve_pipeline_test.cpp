// `sluice serve` as a pipeline (mpirun --oversubscribe over TCP on one machine): stage 0 serves
// HTTP and schedules, the other stages follow its orders, the last samples.
// - concurrent requests (greedy, seeded temperature, a stop string) get the same answers from 2
//   and 3 stages as from one process, /health reports the stages, logprobs are refused by name;
// - a stage killed mid-request: the streaming client gets an error event and the job ends
//   non-zero within 10 s; a hung stage (SIGSTOP): the client's error names it, and the job ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../e2e/serve_client.h"

namespace fs = std::filesystem;
using namespace sluice::test::serve;

namespace {

const std::string kRefModel = std::string(SLUICE_TESTDATA) + "/reference/qwen3moe-f32.gguf";

// mpirun of `n` ranks over loopback TCP; each rank writes its pid to pids/<rank> before it
// becomes sluice (sh's $0 and $@ are the binary and its arguments).
std::vector<std::string> launcher(int n, const fs::path& pids) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return {SLUICE_MPIEXEC,
          "--oversubscribe",
          "-np",
          std::to_string(n),
          "--mca",
          "btl",
          "tcp,self",
          "--mca",
          "btl_tcp_if_include",
          "lo",
          "/bin/sh",
          "-c",
          "echo $$ > " + pids.string() + "/$OMPI_COMM_WORLD_RANK; exec \"$0\" \"$@\""};
}

pid_t rank_pid(const fs::path& pids, int rank) {
  const std::string s = sluice::test::read_file(pids / std::to_string(rank));
  return s.empty() ? -1 : std::stoi(s);
}

fs::path pid_dir(const std::string& tag) {
  const fs::path d = sluice::test::scratch_dir() / ("pids-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Four requests sent at once, answered in request order: text and finish reason of each.
std::vector<std::string> four_at_once(int port) {
  const std::vector<std::string> bodies = {
      R"({"prompt":"Hello world","max_tokens":24,"temperature":0})",
      R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0.9,"seed":7})",
      R"({"prompt":"The quick brown fox","max_tokens":30,"temperature":0,"stop":["perper"]})",
      R"({"prompt":"In the beginning","max_tokens":16,"temperature":1.2,"top_k":5,"seed":3})"};
  std::vector<std::string> out(bodies.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] {
      const Http h = http(port, "POST", "/v1/completions", bodies[i], "");
      const json j = h.j();
      out[i] = h.status == 200 && j.contains("choices")
                   ? j["choices"][0]["text"].get<std::string>() + " | " +
                         j["choices"][0]["finish_reason"].get<std::string>()
                   : "HTTP " + std::to_string(h.status) + " " + h.body;
    });
  for (auto& t : clients) t.join();
  return out;
}

TEST(ServePipeline, TwoAndThreeStagesAnswerConcurrentRequestsAsOneProcess) {
  std::vector<std::string> one;
  {
    Server s({"--parallel", "4"}, kRefModel);
    ASSERT_GT(s.port(), 0) << s.log();
    one = four_at_once(s.port());
  }
  for (const std::string& a : one) ASSERT_EQ(a.rfind("HTTP ", 0), std::string::npos) << a;
  for (int n : {2, 3}) {
    const fs::path pids = pid_dir("equal" + std::to_string(n));
    Server s({"--parallel", "4", "--stage-timeout", "20"}, kRefModel, launcher(n, pids));
    ASSERT_GT(s.port(), 0) << s.log();
    s.stop_with(rank_pid(pids, 0));  // stage 0 stops the job cleanly; mpirun would kill it
    const Http health = http(s.port(), "GET", "/health");
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(health.j()["pipeline"]["stages"], n) << health.body;
    EXPECT_EQ(health.j()["pipeline"]["state"], "ok") << health.body;
    EXPECT_EQ(four_at_once(s.port()), one) << n << " stages";
    const json m = metrics(s.port());
    EXPECT_EQ(m["sluice_pipeline_stages"], n);
    EXPECT_EQ(m["sluice_pipeline_micro_batches"], n);  // one group of requests per stage
    // A second round reuses the stages' cached prefixes the same way.
    EXPECT_EQ(four_at_once(s.port()), one) << n << " stages, again";
    const Http lp = http(s.port(), "POST", "/v1/completions",
                         R"({"prompt":"Hi","max_tokens":2,"logprobs":1})", "");
    EXPECT_EQ(lp.status, 400) << lp.body;
    EXPECT_NE(lp.body.find("pipeline"), std::string::npos) << lp.body;
  }
}

// serve with --split-mode experts: rank 0 serves and schedules, every rank computes its share of
// the experts; concurrent requests get one process's answers, in one micro-batch (every rank
// runs every layer, so there is no pipeline to fill).
TEST(ServePipeline, ExpertParallelRanksAnswerConcurrentRequestsAsOneProcess) {
  std::vector<std::string> one;
  {
    Server s({"--parallel", "4"}, kRefModel);
    ASSERT_GT(s.port(), 0) << s.log();
    one = four_at_once(s.port());
  }
  for (int n : {2, 3}) {
    const fs::path pids = pid_dir("experts" + std::to_string(n));
    Server s({"--parallel", "4", "--stage-timeout", "20", "--split-mode", "experts"}, kRefModel,
             launcher(n, pids));
    ASSERT_GT(s.port(), 0) << s.log();
    s.stop_with(rank_pid(pids, 0));
    EXPECT_EQ(four_at_once(s.port()), one) << n << " expert-parallel ranks";
    const json m = metrics(s.port());
    EXPECT_EQ(m["sluice_pipeline_micro_batches"], 1);
    const std::string log = sluice::test::read_file(s.log());  // the server's output file
    EXPECT_NE(log.find("experts split over " + std::to_string(n) + " processes"), std::string::npos)
        << log;
  }
}

// SIGTERM to stage 0 from a user is a shutdown like one process's: running requests go on for
// --shutdown-grace, then end with the server's shutdown error, and the job exits 0 (it answered
// at once with "a pipeline stage may have failed" though none had).
TEST(ServePipeline, SigtermToStageZeroHonoursTheGracePeriod) {
  const fs::path pids = pid_dir("grace");
  Server s({"--shutdown-grace", "3", "-c", "16384", "--stage-timeout", "20"}, kRefModel, launcher(2, pids));
  ASSERT_GT(s.port(), 0) << s.log();
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  const std::string req = request_text(
      "POST", "/v1/completions",
      R"({"prompt":"Hello","max_tokens":100000,"temperature":0,"stream":true,"ignore_eos":true})", "");
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, n);
  }
  const auto t0 = std::chrono::steady_clock::now();
  kill(rank_pid(pids, 0), SIGTERM);
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, n);
  close(fd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int status = s.wait_exit(30s);
  const std::string log = sluice::test::read_file(s.log());
  EXPECT_GT(secs, 2.9) << "the stream did not run on through the grace period; log: " << log;
  EXPECT_LT(secs, 15.0);
  EXPECT_NE(got.find(R"("code":"server_shutdown")"), std::string::npos) << got.substr(got.size() > 600 ? got.size() - 600 : 0);
  EXPECT_EQ(got.find("pipeline stage"), std::string::npos) << got.substr(got.size() > 600 ? got.size() - 600 : 0);
  EXPECT_NE(log.find("may finish within 3 s"), std::string::npos) << log;
  EXPECT_EQ(status, 0) << log;
}

// Starts a long streaming request on a 2-stage server, signals stage 1 with `sig` once tokens
// flow, and returns what the client read, the job's exit status and the seconds to its end.
struct Outcome {
  std::string body;
  int status;
  double seconds;
};
Outcome signal_stage_during_request(int sig, const std::string& tag) {
  const fs::path pids = pid_dir(tag);
  Server s({"--stage-timeout", "3", "-c", "16384"}, kRefModel, launcher(2, pids));
  EXPECT_GT(s.port(), 0) << s.log();
  Outcome o{"", -1, 0};
  std::thread client([&] {
    o.body =
        http(
            s.port(), "POST", "/v1/completions",
            R"({"prompt":"Hello","max_tokens":100000,"temperature":0,"stream":true,"ignore_eos":true})",
            "")
            .body;
  });
  std::this_thread::sleep_for(1500ms);  // admitted and decoding
  const pid_t stage1 = rank_pid(pids, 1);
  const auto signalled = std::chrono::steady_clock::now();
  kill(stage1, sig);
  o.status = s.wait_exit(30s);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  if (sig == SIGSTOP) kill(stage1, SIGKILL);
  client.join();
  if (o.status < 0) ADD_FAILURE() << "the job did not end; log: " << s.log();
  o.body += "\nlog: " + sluice::test::read_file(s.log());
  return o;
}

TEST(ServePipeline, KilledStageAnswersTheRunningRequestWithAnError) {
  const Outcome o = signal_stage_during_request(SIGKILL, "kill");
  EXPECT_GT(o.status, 0) << o.body;
  EXPECT_LT(o.seconds, 10.0) << o.body;
  EXPECT_NE(o.body.find("data: {\"choices\""), std::string::npos)
      << "no tokens before the kill: " << o.body;
  EXPECT_NE(o.body.find("data: {\"error\""), std::string::npos) << o.body;
  EXPECT_NE(o.body.find("rank 1"), std::string::npos) << "mpirun names the dead rank: " << o.body;
}

TEST(ServePipeline, HungStageFailsTheRequestNamingIt) {
  const Outcome o = signal_stage_during_request(SIGSTOP, "stop");
  EXPECT_GT(o.status, 0) << o.body;
  EXPECT_LT(o.seconds, 10.0) << o.body;
  EXPECT_NE(o.body.find("data: {\"error\""), std::string::npos) << o.body;
  EXPECT_NE(o.body.find("the model's pipeline failed: stage 1 (rank 1 on"), std::string::npos)
      << o.body;
}

}  // namespace
