// --kv-disk at the scheduler: a 1000-token context evicted at stop survives a restart (a new engine
// and scheduler on the same directory), and a prompt sharing that prefix prefills only its suffix
// with the tokens a fresh session generates; an unreadable file in the directory is skipped.
// deepseek4 contexts are restored as far as its rings can be rolled back. The same over HTTP:
// `sluice serve --kv-disk` stopped by SIGTERM and started again prefills only the suffix, as
// /metrics counts it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve_client.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string kRef = std::string(SLUICE_TESTDATA) + "/reference/";
const std::string kModel = kRef + "gptoss-f32.gguf";

std::unique_ptr<sluice::Engine> load(const std::string& model = kModel) {
  return sluice::Engine::load({.model_path = model, .n_threads = 2, .n_ctx = 1200, .kv_slots = 1});
}

std::vector<int32_t> prompt2(const std::string& model) {
  std::ifstream in(kRef + model + ".prompt2.json");
  return nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
}

std::vector<int32_t> splice(const std::vector<int32_t>& t, int head, int from, int to) {
  std::vector<int32_t> out(t.begin(), t.begin() + head);
  out.insert(out.end(), t.begin() + from, t.begin() + to);
  return out;
}

sluice::GenerateResult run(sluice::Scheduler& sched, const std::vector<int32_t>& prompt) {
  sluice::GenerateOptions o;
  o.max_tokens = 4;
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  auto sub = sched.submit({.prompt = prompt, .options = o});
  EXPECT_EQ(sub.status, sluice::SubmitStatus::kOk);
  sluice::CompletionEvent ev;
  for (int i = 0; i < 600; ++i)
    if (sub.handle->next(ev, 100ms) && ev.kind != sluice::CompletionEvent::Kind::kText) break;
  EXPECT_EQ(ev.kind, sluice::CompletionEvent::Kind::kDone) << ev.text;
  return ev.result;
}

}  // namespace

TEST(KvDisk, SharedPrefixSurvivesARestartAndPrefillsOnlyTheSuffix) {
  const auto toks = prompt2("gptoss-f32");
  std::vector<int32_t> a(toks.begin(), toks.begin() + 1050);
  std::vector<int32_t> b(toks.begin(), toks.begin() + 1000);
  b.insert(b.end(), toks.begin() + 1060, toks.begin() + 1100);
  ASSERT_NE(a[1000], b[1000]);

  const fs::path dir = fs::temp_directory_path() / ("sluice_kv_disk_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "damaged.slkv") << "SLUICEKV and then nothing that parses";
  {
    auto engine = load();
    sluice::Scheduler sched(*engine, {.n_parallel = 1, .kv_disk_dir = dir.string()});
    run(sched, a);
    EXPECT_EQ(sched.stats().kv_disk_skipped, 1u);
    EXPECT_EQ(sched.stats().kv_disk_misses, 1u);
  }  // stopping writes the idle slot's context
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().filename() != "damaged.slkv";
  EXPECT_EQ(files, 1);

  auto engine = load();
  sluice::GenerateResult fresh;
  {
    auto session = engine->new_session();
    sluice::GenerateOptions o;
    o.max_tokens = 4;
    o.sampling.temperature = 0;
    o.stop_at_eog = false;
    fresh = session->generate(b, o, nullptr);
  }
  {
    sluice::Scheduler sched(*engine, {.n_parallel = 1, .kv_disk_dir = dir.string()});
    const sluice::GenerateResult r = run(sched, b);
    EXPECT_EQ(r.n_reused, 1000);
    EXPECT_EQ(r.n_prompt, 40);
    EXPECT_EQ(r.tokens, fresh.tokens);
    const sluice::SchedulerStats st = sched.stats();
    EXPECT_EQ(st.kv_disk_hits, 1u);
    EXPECT_GT(st.kv_disk_bytes_read, 0u);
  }
  fs::remove_all(dir);
}

// deepseek4's rings hold the last kRollback (16) positions behind a context's end: a saved context
// is restored for a prompt that leaves it at most that far before its end, and a prompt that leaves
// it earlier is a miss, prefilled whole; the tokens are a fresh session's either way.
TEST(KvDisk, Deepseek4RestoresWhatItsRingsStillHold) {
  const std::string model = kRef + "deepseek4-f32.gguf";
  const auto toks = prompt2("deepseek4-f32");
  const auto a = splice(toks, 1000, 0, 0);
  const auto near = splice(toks, 995, 1050, 1080);  // leaves the saved ~1003 tokens 8 or 9 early
  const auto far = splice(toks, 900, 1050, 1080);
  const fs::path dir =
      fs::temp_directory_path() / ("sluice_kv_disk_ds4_" + std::to_string(getpid()));
  fs::remove_all(dir);
  {
    auto engine = load(model);
    sluice::Scheduler sched(*engine, {.n_parallel = 1, .kv_disk_dir = dir.string()});
    run(sched, a);
  }
  auto engine = load(model);
  auto fresh = [&](const std::vector<int32_t>& prompt) {
    sluice::GenerateOptions o;
    o.max_tokens = 4;
    o.sampling.temperature = 0;
    o.stop_at_eog = false;
    return engine->new_session()->generate(prompt, o, nullptr).tokens;
  };
  const auto want_near = fresh(near), want_far = fresh(far);
  {
    sluice::Scheduler sched(*engine, {.n_parallel = 1, .kv_disk_dir = dir.string()});
    const sluice::GenerateResult r = run(sched, near);
    EXPECT_EQ(r.n_reused, 995);
    EXPECT_EQ(r.n_prompt, 30);
    EXPECT_EQ(r.tokens, want_near);
    EXPECT_EQ(sched.stats().kv_disk_hits, 1u);
  }
  {
    sluice::Scheduler sched(*engine, {.n_parallel = 1, .kv_disk_dir = dir.string()});
    const sluice::GenerateResult r = run(sched, far);
    EXPECT_EQ(r.n_reused, 0);
    EXPECT_EQ(r.tokens, want_far);
    EXPECT_EQ(sched.stats().kv_disk_hits, 0u);
    EXPECT_EQ(sched.stats().kv_disk_misses, 1u);
  }
  fs::remove_all(dir);
}

TEST(KvDisk, ServeRestartPrefillsOnlyTheSuffixOfASharedPrefix) {
  namespace sv = sluice::test::serve;
  std::ifstream in(std::string(SLUICE_TESTDATA) + "/reference/gptoss-f32.prompt2.json");
  const auto toks = nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> a(toks.begin(), toks.begin() + 1000);
  std::vector<int32_t> b = a;
  b.insert(b.end(), toks.begin() + 1060, toks.begin() + 1100);
  const fs::path dir = sluice::test::scratch_dir() / ("kv_disk_serve_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::vector<std::string> args = {"-c", "1200", "--parallel", "1", "--kv-disk", dir.string(), "--api-key", sv::kKey};
  auto complete = [](int port, const std::vector<int32_t>& prompt) {
    const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"ignore_eos", true}};
    const sv::Http h = sv::http(port, "POST", "/v1/completions", body.dump());
    EXPECT_EQ(h.status, 200) << h.body;
    EXPECT_EQ(h.j()["usage"]["prompt_tokens"], prompt.size()) << h.body;
  };
  {
    sv::Server server(args, kModel);
    ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
    complete(server.port(), a);
    EXPECT_EQ(sv::metrics(server.port()).value("sluice_kv_disk_misses_total", 0.0), 1.0);
  }  // SIGTERM: the idle slot's context goes to the directory
  {
    sv::Server server(args, kModel);
    ASSERT_GT(server.port(), 0) << "server did not start; log: " << server.log();
    complete(server.port(), b);
    const nlohmann::json m = sv::metrics(server.port());
    EXPECT_EQ(m.value("sluice_kv_disk_hits_total", 0.0), 1.0);
    EXPECT_GT(m.value("sluice_kv_disk_read_bytes_total", 0.0), 0.0);
    EXPECT_EQ(m.value("sluice_prompt_tokens_reused_total", 0.0), 1000.0);
    // Rows evaluated over the prompt: only the 40-token suffix.
    EXPECT_EQ(m.value("sluice_batch_tokens_total", 0.0) - m.value("sluice_decode_tokens_total", 0.0), 40.0) << m.dump();
  }
  fs::remove_all(dir);
}
