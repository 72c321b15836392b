// `sluice bench`: prefill and decode throughput of one model, llama-bench style.
//
// Each test runs on a fresh session (at a depth, see -d below): `pp N` evaluates N prompt tokens in
// one batch, `tg N` decodes N tokens after a one-token prompt, or after the text of -f (evaluated
// outside the measurement), with greedy sampling and end-of-generation ignored, so the real decode
// path runs every step; one token per forward pass unless --draft asks for speculative decoding
// (then the acceptance and tokens per pass are printed too). A warm-up pass first touches the
// weights so the first repetition does not pay page faults; with streamed experts it also fills the
// cache the way a running server's would be. Expert statistics are taken as deltas around the timed
// part of each repetition, so the MB/s and hit rate printed belong to that test alone. -d D1,D2
// repeats every test at each depth, as llama-bench's -d: D random tokens are evaluated once per
// depth, outside the measurement, into a session every test at that depth starts from (rolled back
// to exactly the D tokens, which re-evaluates one row), and the test's rows attend to them
// ("pp512@d4096"); evaluating the depth for each test and repetition instead cost 6 minutes each at
// 16k on the 16-layer qwen3-30b-a3b preset, most of the run. --replay-routing makes the model route
// as a trace of another model says (learned routing at this model's expert sizes); every output
// format then says so, since the tokens are no longer the model's.
// --decode-text FILE adds `td N` tests: the file's first N tokens evaluated one row a step, as if
// the model had written them (teacher-forced decode), so the expert reads are those of real text at
// decode's one row per pass; --timeline FILE.csv writes each such step's reads for plots of how the
// cache follows the text (a topic switch's miss burst).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/units.h"

namespace sluice::cli {
namespace {

struct TestResult {
  std::string name;  // "pp64", "tg32", "pp512@d4096"
  int n_tokens = 0;
  int depth = 0;
  std::vector<double> tps;  // tokens/s per repetition
  int drafted = 0, accepted = 0, steps = 0;  // decode tests: speculative decoding, summed
  ExpertStats experts;      // summed over the repetitions
  double seconds = 0;       // summed over the repetitions
};

ExpertStats minus(const ExpertStats& a, const ExpertStats& b) {
  ExpertStats d;
  d.requests = a.requests - b.requests;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.read_seconds = a.read_seconds - b.read_seconds;
  d.stall_seconds = a.stall_seconds - b.stall_seconds;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.prefetch_used = a.prefetch_used - b.prefetch_used;
  return d;
}

ExpertStats plus(const ExpertStats& a, const ExpertStats& b) {
  ExpertStats s;
  s.requests = a.requests + b.requests;
  s.hits = a.hits + b.hits;
  s.misses = a.misses + b.misses;
  s.bytes_read = a.bytes_read + b.bytes_read;
  s.read_seconds = a.read_seconds + b.read_seconds;
  s.stall_seconds = a.stall_seconds + b.stall_seconds;
  s.prefetch_issued = a.prefetch_issued + b.prefetch_issued;
  s.prefetch_used = a.prefetch_used + b.prefetch_used;
  return s;
}

std::vector<int> parse_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > (1 << 20))
      fail("{}: '{}' is not a token count (expected comma-separated integers 0..1048576)", flag, item);
    if (v > 0) out.push_back(v);
  }
  return out;
}

// Random ids drawn from the vocabulary, seeded so every run (and every engine) sees the same.
std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

// What a decode test needs beyond the token count: its prompt (a file's text, else one random
// token) and the draft options.
struct TgSetup {
  std::vector<int32_t> prompt;
  DraftOptions draft;
  int depth = 0;              // -d: tokens already in the context when a test starts
  std::vector<int32_t> depth_tokens;  // those tokens
  Session* at_depth = nullptr;        // a session holding them (depth > 0)
  std::vector<int32_t> text;  // --decode-text: the tokens td tests evaluate
  FILE* timeline = nullptr;   // --timeline: one CSV row per td step
};

struct Timing {
  double seconds = 0;
  int drafted = 0, accepted = 0, steps = 0;
  ExpertStats experts;  // read by the timed part only
  // Routing-trace rows of the timed part (--routing-trace): `route-stats --rows BEGIN:END`.
  uint64_t trace_begin = 0, trace_end = 0;
};

// The context a test starts from at depth d: d random tokens, evaluated outside the measurement.
constexpr uint32_t kDepthSeed = 7919;

// The session a test runs in: a fresh one at depth 0; at a depth, the depth's session rolled back
// to exactly its tokens (the cache keeps them; one row is evaluated again for the logits).
Session& test_session(Engine& engine, const TgSetup& setup, std::unique_ptr<Session>& fresh) {
  if (setup.depth == 0) {
    fresh = engine.new_session();
    return *fresh;
  }
  setup.at_depth->evaluate(setup.depth_tokens);
  return *setup.at_depth;
}

Timing run_pp(Engine& engine, int n, uint32_t seed, const TgSetup& setup) {
  std::unique_ptr<Session> fresh;
  Session& session = test_session(engine, setup, fresh);
  auto tokens = setup.depth_tokens;
  const auto prompt = random_tokens(n, engine.info().n_vocab, seed);
  tokens.insert(tokens.end(), prompt.begin(), prompt.end());
  Timer t;
  const ExpertStats before = engine.expert_stats();
  const uint64_t trace_begin = engine.routing_trace_rows();
  session.evaluate(tokens);  // the depth is reused from the cache: n rows are evaluated
  // In a pipeline the prompt is done when the last stage is: wait for its word.
  engine.share_token(0);
  if (session.reused() != setup.depth)
    fail("pp{}: {} tokens of the depth of {} came from the cache (the rest was evaluated again)", n,
         session.reused(), setup.depth);
  Timing out{t.seconds(), 0, 0, 0, minus(engine.expert_stats(), before)};
  out.trace_begin = trace_begin;
  out.trace_end = engine.routing_trace_rows();
  return out;
}

Timing run_tg(Engine& engine, int n, uint32_t seed, const TgSetup& setup) {
  std::unique_ptr<Session> fresh;
  Session& session = test_session(engine, setup, fresh);
  GenerateOptions go;
  go.max_tokens = n;
  go.sampling.temperature = 0;
  go.stop_at_eog = false;
  go.draft = setup.draft;
  auto prompt = setup.prompt;
  if (prompt.empty()) {  // the depth, then one random token
    prompt = setup.depth_tokens;
    prompt.push_back(random_tokens(1, engine.info().n_vocab, kDepthSeed + seed)[0]);
  }
  // A prompt file or the depth is evaluated first, outside the measurement (generate() then reuses
  // it).
  if (prompt.size() > 1) session.evaluate(prompt);
  const ExpertStats before = engine.expert_stats();
  const uint64_t trace_begin = engine.routing_trace_rows();
  GenerateResult r = session.generate(prompt, go, [](int32_t, std::string_view) { return true; });
  if (static_cast<int>(r.tokens.size()) != n)
    fail("tg{}: generated {} tokens instead of {}", n, r.tokens.size(), n);
  Timing out{r.decode_seconds, r.n_drafted, r.n_accepted, r.n_steps, minus(engine.expert_stats(), before)};
  out.trace_begin = trace_begin;
  out.trace_end = engine.routing_trace_rows();
  return out;
}

// Teacher-forced decode: the text's first n tokens, one row per evaluate() (each call reuses the
// session's context and evaluates the one new token). When the context is full a new session
// starts at the next token, so a text longer than the context keeps being read; the expert cache is
// the engine's and stays warm across the cut. Each step's expert-read delta goes to the timeline.
constexpr uint32_t kFirstSeed = 100;  // repetition r runs with seed kFirstSeed + r

Timing run_td(Engine& engine, int n, uint32_t seed, const TgSetup& setup) {
  const int ctx = engine.info().n_ctx;
  std::unique_ptr<Session> session;
  std::vector<int32_t> context;
  Timing out;
  const ExpertStats start = engine.expert_stats();
  ExpertStats before = start;
  out.trace_begin = engine.routing_trace_rows();
  for (int i = 0; i < n; ++i) {
    if (!session || static_cast<int>(context.size()) >= ctx) {
      session = engine.new_session();
      context.clear();
    }
    context.push_back(setup.text[static_cast<size_t>(i)]);
    Timer t;
    session->evaluate(context);
    const double secs = t.seconds();
    out.seconds += secs;
    const ExpertStats now = engine.expert_stats();
    if (setup.timeline) {
      const ExpertStats d = minus(now, before);
      fmt::print(setup.timeline, "td{},{},{},{},{:.6f},{},{},{},{},{:.6f},{},{}\n", n,
                 seed - kFirstSeed, i, setup.text[static_cast<size_t>(i)], secs, d.requests, d.hits,
                 d.misses, d.bytes_read, d.stall_seconds, d.prefetch_issued, d.prefetch_used);
    }
    before = now;
  }
  out.steps = n;
  out.experts = minus(engine.expert_stats(), start);
  out.trace_end = engine.routing_trace_rows();
  return out;
}

// The table's t/s cell, "mean ± sd", padded as one string: formatted field by field its width
// grew with the values (and the multibyte ±), which pushed the columns after it out of line.
constexpr int kTpsWidth = 18;
std::string tps_cell(double mean, double sd) {
  const std::string cell = fmt::format("{:.2f} ± {:.2f}", mean, sd);
  // "±" is two bytes and one column: pad by columns, not bytes.
  const int columns = static_cast<int>(cell.size()) - 1;
  return std::string(static_cast<size_t>(std::max(0, kTpsWidth - columns)), ' ') + cell;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure prefill and decode tokens/s", "sluice bench"};
  ModelFlags mf;
  add_model_flags(app, mf);
  std::string pp_list = "64,512", tg_list = "32", format = "table";
  int reps = 3;
  bool no_warmup = false;
  app.add_option("-p,--n-prompt", pp_list, "prefill tests: comma-separated prompt lengths (0: none)")->capture_default_str();
  app.add_option("-n,--n-gen", tg_list, "decode tests: comma-separated token counts (0: none)")->capture_default_str();
  app.add_option("-r,--repetitions", reps, "repetitions of each test")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("-o,--output", format, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}))->capture_default_str();
  app.add_flag("--no-warmup", no_warmup, "skip the warm-up pass");
  std::string depth_list = "0";
  app.add_option("-d,--n-depth", depth_list,
                 "context depths: each test runs after this many tokens already in the context (as "
                 "llama-bench's -d), for each depth in the comma-separated list")
      ->capture_default_str();
  std::string prompt_file;
  app.add_option("-f,--file", prompt_file, "decode tests: continue this text (default: one random token)")
      ->check(CLI::ExistingFile);
  DraftFlags df;
  df.mode = "none";  // decode tests measure plain decoding unless drafting is asked for
  add_draft_flags(app, df);
  std::string decode_text, timeline_path;
  app.add_option(
         "--decode-text", decode_text,
         "decode tests read this text instead of generating: tdN evaluates its first N tokens one "
         "per step (teacher-forced decode: real text's expert reads at one row a pass; a new "
         "session when the context is full)")
      ->check(CLI::ExistingFile);
  app.add_option("--timeline", timeline_path,
                 "with --decode-text: write each td step's seconds and expert reads to this CSV");
  add_routing_trace_flag(app, mf);
  app.add_option("--replay-routing", mf.replay_routing,
                 "route as this routing trace says (ids mapped into the model's range, layers "
                 "cycled): the reads follow learned routing, the text is not the model's")
      ->check(CLI::ExistingFile);
  SLUICE_PARSE(app, argc, argv);
  TgSetup setup;
  setup.draft = draft_options(df);
  std::vector<int> pps = parse_list(pp_list, "--n-prompt");
  std::vector<int> tgs = parse_list(tg_list, "--n-gen");
  if (pps.empty() && tgs.empty()) fail("nothing to measure: give -p and/or -n with a count above 0");
  // parse_list leaves zeros out (a count of 0 is "no test"); a depth of 0 is the empty context.
  std::vector<int> depths = parse_list(depth_list, "--n-depth");
  std::stringstream items(depth_list);
  for (std::string item; std::getline(items, item, ',');)
    if (!item.empty() && item.find_first_not_of('0') == std::string::npos) {
      depths.insert(depths.begin(), 0);
      break;
    }
  if (depths.empty()) throw CLI::ValidationError("--n-depth", "no depth given");
  const int max_depth = *std::max_element(depths.begin(), depths.end());
  if (max_depth > 0 && (!prompt_file.empty() || !decode_text.empty()))
    throw CLI::ValidationError("--n-depth", "the depth is the context the tests start from; -f and --decode-text give one too");

  // Without -p/-n the default tests are shortened to fit the context (-c, default the model's);
  // tests given explicitly must fit it, or -c must make room (past the trained length: a warning).
  const bool defaults = app.count("--n-prompt") == 0 && app.count("--n-gen") == 0;
  EngineOptions eo = engine_options(mf);
  set_engine_draft(eo, df, setup.draft);
  int longest = 2;
  for (int n : pps) longest = std::max(longest, max_depth + n + 1);
  // td tests start a new session when the context fills: any length fits.
  if (decode_text.empty())
    for (int n : tgs) longest = std::max(longest, max_depth + n + 2);
  // With a prompt file its length is known only once the tokenizer is loaded: the context is then
  // the model's default (or -c) and checked below.
  if (!decode_text.empty() && !prompt_file.empty())
    throw CLI::ValidationError("--decode-text", "reads a text, -f continues one with generated tokens: give one of them");
  if (!timeline_path.empty() && decode_text.empty())
    throw CLI::ValidationError("--timeline", "it records td tests; give --decode-text FILE");
  if (!defaults && mf.ctx == 0 && prompt_file.empty() && decode_text.empty()) eo.n_ctx = longest;
  apply_pipeline(mf, eo);
  pipeline_output_from(0);
  auto engine = Engine::load(eo);
  const ModelInfo& mi = engine->info();
  if (defaults) {
    for (auto* list : {&pps, &tgs}) {
      const int room = mi.n_ctx - max_depth - (list == &pps ? 1 : 2);
      if (room < 1) fail("depth {} leaves no room in the context of {} (-c to enlarge it)", max_depth, mi.n_ctx);
      for (int& n : *list)
        if (n > room) {
          SLUICE_LOG_WARN("bench: test of {} tokens shortened to {} to fit the context of {} (-c, -p, -n to choose)", n,
                          room, mi.n_ctx);
          n = room;
        }
      list->erase(std::unique(list->begin(), list->end()), list->end());
    }
  } else if (longest > mi.n_ctx) {
    fail("the longest test needs {} positions; the context is {} (-c to enlarge it)", longest, mi.n_ctx);
  }
  if (!decode_text.empty()) {
    setup.text = engine->tokenize(read_text(decode_text), true);
    for (int n : tgs)
      if (n > static_cast<int>(setup.text.size()))
        fail("td{}: {} has {} tokens (-n at most that)", n, decode_text, setup.text.size());
  }
  if (!prompt_file.empty()) {
    setup.prompt = engine->tokenize(read_text(prompt_file), true);
    for (int n : tgs)
      if (static_cast<int>(setup.prompt.size()) + n + 1 > mi.n_ctx)
        fail("tg{} after the {} tokens of {} needs {} positions; the context is {} (-c to enlarge it)", n,
             setup.prompt.size(), prompt_file, setup.prompt.size() + n + 1, mi.n_ctx);
  }
  SLUICE_LOG_INFO("model: {} ({}, {} layers, {} experts top-{}), {}, loaded in {:.2f} s", mf.model, mi.architecture,
                  mi.n_layer, mi.n_expert, mi.n_expert_used, format_bytes(mi.file_bytes), engine->load_seconds());
  SLUICE_LOG_INFO("{}", mi.experts_detail);  // "experts: ram (in place); ..."
  if (!mi.routing.empty()) SLUICE_LOG_INFO("{}", mi.routing);  // "routing replayed from ..."

  if (!no_warmup) {
    run_pp(*engine, std::min(16, longest), 1, setup);
    run_tg(*engine, 2, 2, setup);
  }

  std::vector<TestResult> results;
  auto measure = [&](const std::string& name, int n, auto&& fn) {
    TestResult tr{name, n, setup.depth, {}, 0, 0, 0, {}, 0};
    for (int r = 0; r < reps; ++r) {
      const Timing tm = fn(*engine, n, kFirstSeed + static_cast<uint32_t>(r), setup);
      const double secs = tm.seconds;
      tr.drafted += tm.drafted, tr.accepted += tm.accepted, tr.steps += tm.steps;
      tr.seconds += secs;
      tr.experts = plus(tr.experts, tm.experts);
      tr.tps.push_back(n / std::max(secs, 1e-9));
      if (!mf.routing_trace.empty())  // what route-stats counts to compare its caches with this run
        SLUICE_LOG_INFO("{} rep {}: routing trace rows {}:{} (route-stats --rows {}:{})", name, r, tm.trace_begin,
                        tm.trace_end, tm.trace_begin, tm.trace_end);
    }
    results.push_back(std::move(tr));
  };
  // Tests are named as llama-bench names them: "pp512", and "pp512@d4096" at a depth.
  auto named = [&](const char* kind, int n) {
    return setup.depth ? fmt::format("{}{}@d{}", kind, n, setup.depth) : fmt::format("{}{}", kind, n);
  };
  std::unique_ptr<FILE, int (*)(FILE*)> timeline(nullptr, std::fclose);
  if (!timeline_path.empty()) {
    timeline.reset(std::fopen(timeline_path.c_str(), "w"));
    if (!timeline) fail("--timeline: cannot write '{}'", timeline_path);
    std::fputs(
        "test,rep,step,token,seconds,requests,hits,misses,bytes_read,stall_s,prefetch_issued,"
        "prefetch_used\n",
        timeline.get());
    setup.timeline = timeline.get();
  }
  std::unique_ptr<Session> depth_session;
  for (const int depth : depths) {
    setup.depth = depth;
    depth_session.reset();  // the last depth's cache goes before this one's is filled
    setup.at_depth = nullptr;
    setup.depth_tokens = random_tokens(depth, mi.n_vocab, kDepthSeed);
    if (depth > 0) {
      depth_session = engine->new_session();
      Timer t;
      depth_session->evaluate(setup.depth_tokens);
      const double secs = t.seconds();
      SLUICE_LOG_INFO("depth {}: evaluated in {:.1f} s ({:.2f} t/s), once for every test at it",
                      depth, secs, depth / std::max(secs, 1e-9));
      setup.at_depth = depth_session.get();
    }
    for (int n : pps) measure(named("pp", n), n, run_pp);
    for (int n : tgs) {
      if (setup.text.empty())
        measure(named("tg", n), n, run_tg);
      else
        measure(named("td", n), n, run_td);
    }
  }

  const std::string threads = mf.threads > 0 ? std::to_string(mf.threads) : "all";
  size_t name_w = 6;  // the test column fits its longest name ("pp512@d16384")
  for (const TestResult& r : results) name_w = std::max(name_w, r.name.size());
  if (format == "csv") {
    fmt::print("model,experts_mode,threads,test,n_tokens,reps,tps_mean,tps_stddev,hit_rate,mb_read_per_token,"
               "read_mb_s,stall_s_per_token,prefetch_precision,draft_acceptance,tokens_per_step,replayed_routing,"
               "depth\n");
  } else if (format == "table") {
    fmt::print("| {:<{}} | {:>{}} | {:>8} | {:>9} | {:>10} | {:>8} | {:>11} | {:>8} | {:>8} |\n", "test", name_w,
               "t/s", kTpsWidth, "hit %", "MB/token", "read MB/s", "stall/t", "prefetch %", "accept %", "tok/pass");
    fmt::print("|{:-<{}}|{:-<{}}|{:-<10}|{:-<11}|{:-<12}|{:-<10}|{:-<13}|{:-<10}|{:-<10}|\n", "", name_w + 2, "",
               kTpsWidth + 2, "", "", "", "", "", "", "");
  } else {
    fmt::print("[");
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const TestResult& r = results[i];
    const ExpertStats& e = r.experts;
    const double tokens = static_cast<double>(r.n_tokens) * reps;
    const double hit = e.requests ? 100.0 * e.hits / e.requests : 100.0;
    const double mb_tok = e.bytes_read / 1e6 / tokens;
    const double mbs = e.bytes_read / 1e6 / std::max(r.seconds, 1e-9);
    const double stall = e.stall_seconds / tokens;
    const double prec = e.prefetch_issued ? 100.0 * e.prefetch_used / e.prefetch_issued : 0.0;
    // Decode tests: drafts accepted and tokens per forward pass (1 without drafting); 0 for prefill.
    const double accept = r.drafted ? 100.0 * r.accepted / r.drafted : 0.0;
    const double per_pass = r.steps ? tokens / r.steps : 0.0;
    if (format == "csv") {
      fmt::print("{},{},{},{},{},{},{:.3f},{:.3f},{:.2f},{:.3f},{:.1f},{:.4f},{:.2f},{:.2f},{:.3f},{},{}\n", mf.model,
                 mi.experts_mode, threads, r.name, r.n_tokens, reps, mean(r.tps), stddev(r.tps), hit, mb_tok, mbs, stall,
                 prec, accept, per_pass, mf.replay_routing, r.depth);
    } else if (format == "table") {
      fmt::print("| {:<{}} | {} | {:>8.1f} | {:>9.2f} | {:>10.1f} | {:>8.4f} | {:>11.1f} | {:>8.1f} | {:>8.2f} |\n",
                 r.name, name_w, tps_cell(mean(r.tps), stddev(r.tps)), hit, mb_tok, mbs, stall, prec, accept,
                 per_pass);
    } else {
      fmt::print("{}{{\"test\":\"{}\",\"n_tokens\":{},\"experts_mode\":\"{}\",\"tps_mean\":{:.4f},\"tps_stddev\":{:.4f},"
                 "\"hit_rate\":{:.3f},\"mb_read_per_token\":{:.4f},\"read_mb_s\":{:.2f},\"stall_s_per_token\":{:.5f},"
                 "\"prefetch_precision\":{:.3f},\"draft_acceptance\":{:.2f},\"tokens_per_step\":{:.3f},"
                 "\"replayed_routing\":{},\"depth\":{}}}",
                 i ? "," : "", r.name, r.n_tokens, mi.experts_mode, mean(r.tps), stddev(r.tps), hit, mb_tok, mbs,
                 stall, prec, accept, per_pass, nlohmann::json(mf.replay_routing).dump(), r.depth);
    }
  }
  if (format == "json") fmt::print("]\n");
  return 0;
}

}  // namespace sluice::cli
