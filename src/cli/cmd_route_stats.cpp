// `sluice route-stats`: what a model's learned routing means for streaming. With -m and -f it runs
// the model over the text (windows of --window tokens, each from an empty cache, as perplexity's
// non-overlapping case) with a routing trace, then reads the trace; with --trace it reads a trace
// written earlier (`run|bench|perplexity --routing-trace`). It prints, per layer and overall, the
// reuse of a token's experts by the tokens after it, how concentrated the choices are, the hit
// rates the store's policies and Belady's optimum would reach with caches of 12.5–75 % of the
// experts (and of --cache-slots experts: a run's own cache), and the router lookahead's precision
// — beside the same figures for uniform routing of the same rows, which is what every generated
// model has (experts/routing_stats.h). The cache is asked what the store was asked: per forward
// pass of the trace and layer, the union of the pass's rows' experts; --rows counts the passes of
// one measured part of a run (bench names them).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "experts/routing_stats.h"

namespace sluice::cli {
namespace {

using Json = nlohmann::ordered_json;

Json figures_json(const RoutingFigures& f, const std::vector<std::string>& keys) {
  Json j;
  j["tokens"] = f.tokens;
  j["reuse_prev"] = f.reuse_prev;
  j["reuse_within_8"] = f.reuse_within_8;
  j["experts_share_50"] = f.experts_share_50;
  j["experts_share_90"] = f.experts_share_90;
  Json hr = Json::object();
  for (const auto& [policy, rates] : f.hit_rate)
    for (size_t i = 0; i < rates.size(); ++i)
      hr[policy][keys[i]] = rates[i];
  j["hit_rate"] = hr;
  if (f.has_lookahead) {
    j["lookahead_precision"] = f.lookahead_precision;
    j["lookahead_recall"] = f.lookahead_recall;
    j["lookahead_rank_precision"] = f.lookahead_rank_precision;
  }
  return j;
}

Json stats_json(const RoutingStats& st) {
  Json j;
  j["overall"] = figures_json(st.overall, st.cache_keys);
  Json layers = Json::array();
  for (const int il : st.routed_layers) {
    Json l = figures_json(st.layers[il], st.cache_keys);
    l["layer"] = il;
    layers.push_back(l);
  }
  j["layers"] = layers;
  return j;
}

std::string pct(double x) {
  return fmt::format("{:5.1f}", 100.0 * x);
}

void print_tables(const RoutingStats& st, const RoutingStats& uni) {
  const RoutingFigures& o = st.overall;
  const RoutingFigures& u = uni.overall;
  fmt::print("{:<44} {:>7} {:>8}\n", "overall (%)", "model", "uniform");
  auto row = [](const std::string& name, double a, double b) {
    fmt::print("{:<44} {:>7} {:>8}\n", name, pct(a), pct(b));
  };
  row("experts also chosen at the previous token", o.reuse_prev, u.reuse_prev);
  row("experts also chosen within the last 8 tokens", o.reuse_within_8, u.reuse_within_8);
  row("share of experts carrying 50 % of choices", o.experts_share_50, u.experts_share_50);
  row("share of experts carrying 90 % of choices", o.experts_share_90, u.experts_share_90);
  if (o.has_lookahead)
    row("router lookahead precision (= recall)", o.lookahead_precision, u.lookahead_precision);
  for (size_t i = 0; i < st.cache_keys.size(); ++i) {
    const std::string cache =
        i < kCacheFractions.size()
            ? fmt::format("{:g} % cache ({} experts)", 100 * kCacheFractions[i], st.cache_slots[i])
            : fmt::format("{}-expert cache", st.cache_slots[i]);
    for (const auto& [policy, rates] : o.hit_rate)
      row(fmt::format("hit rate, {}, {}", cache, policy), rates[i], u.hit_rate.at(policy)[i]);
  }
  if (o.has_lookahead) {
    fmt::print("lookahead precision by rank (model):");
    for (const double p : o.lookahead_rank_precision) fmt::print(" {}", pct(p));
    fmt::print("\n");
  }
  const size_t half =
      std::find(kCacheFractions.begin(), kCacheFractions.end(), 0.5) - kCacheFractions.begin();
  fmt::print("\nper layer (%; hit rates with a 50 % cache)\n");
  fmt::print("{:>5} {:>6} {:>6} {:>6} {:>6}", "layer", "prev", "in 8", "50 %", "90 %");
  for (const auto& [policy, rates] : o.hit_rate) fmt::print(" {:>7}", policy.substr(0, 7));
  fmt::print(" {:>7}\n", "lookah");
  for (const int il : st.routed_layers) {
    const RoutingFigures& f = st.layers[il];
    fmt::print("{:>5} {:>6} {:>6} {:>6} {:>6}", il, pct(f.reuse_prev), pct(f.reuse_within_8),
               pct(f.experts_share_50), pct(f.experts_share_90));
    for (const auto& [policy, rates] : f.hit_rate) fmt::print(" {:>7}", pct(rates[half]));
    fmt::print(" {:>7}\n", f.has_lookahead ? pct(f.lookahead_precision) : "-");
  }
}

// Runs the model over `path`'s text in windows, writing the routing to `trace_path`.
void trace_text(ModelFlags mf, const std::string& path, int window, const std::string& trace_path) {
  mf.routing_trace = trace_path;
  mf.ctx = std::max(mf.ctx, window);
  auto engine = Engine::load(engine_options(mf));
  const std::vector<int32_t> ids = engine->tokenize(read_text(path), false);
  if (ids.size() < 2) fail("{}: {} tokens, route-stats needs at least 2", path, ids.size());
  Progress progress("routing", ids.size(), "tokens");
  for (size_t s = 0; s < ids.size(); s += window) {
    const size_t n = std::min<size_t>(window, ids.size() - s);
    engine->new_session()->evaluate(std::span<const int32_t>(ids.data() + s, n));
    progress.update(s + n);
  }
}

// --rows FIRST[:END] into the counted rows.
void parse_rows(const std::string& spec, RoutingStatsOptions& so) {
  const size_t colon = spec.find(':');
  auto number = [&](const std::string& s) -> size_t {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size() || s[0] == '-')
      fail("--rows {}: expected FIRST or FIRST:END, row numbers (e.g. 170:410)", spec);
    return static_cast<size_t>(v);
  };
  so.first_row = number(spec.substr(0, colon));
  if (colon != std::string::npos) {
    so.end_row = number(spec.substr(colon + 1));
    if (so.end_row <= so.first_row)
      fail("--rows {}: END must be after FIRST", spec);
  }
}

}  // namespace

int cmd_route_stats(int argc, char** argv) {
  CLI::App app{"Routing statistics of a model on a text, or of a routing trace",
               "sluice route-stats"};
  ModelFlags mf;
  add_model_flags(app, mf);
  std::string text, trace_in, trace_out;
  int window = 512;
  bool json = false, row_passes = false;
  std::vector<int> slots;
  std::string rows;
  uint64_t seed = 1;
  auto* f = app.add_option("-f,--file", text, "text to run the model over ('-': standard input)")
                ->check(stdin_or_file());
  app.add_option("--trace", trace_in, "analyse this routing trace instead of running a model")
      ->check(CLI::ExistingFile)
      ->excludes(f);
  app.add_option("--trace-out", trace_out, "keep the trace of -f's run in FILE")->needs(f);
  app.add_option("--window", window, "tokens per window of -f's run (each from an empty cache)")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", seed, "seed of the uniform baseline")->capture_default_str();
  app.add_option("--cache-slots", slots,
                 "also simulate caches of N experts (comma-separated), e.g. the slots a streamed "
                 "run's cache had (\"N slots × SIZE\" in its log)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--rows", rows,
                 "count only the passes that start in trace rows FIRST..END−1 (FIRST[:END]; the "
                 "cache is simulated from row 0): a measured part of a run, as bench names it");
  app.add_flag("--row-passes", row_passes,
               "take every row as a pass of its own (one-token decode), whatever passes the trace "
               "records; the default with -f, whose windows are prompt passes");
  std::string timeline;
  app.add_option("--timeline", timeline,
                 "also write FILE (CSV): per counted pass, its first row, the experts it asked for "
                 "and how many each policy and Belady found in memory with the first --cache-slots "
                 "cache, for a plot over the run");
  app.add_flag("--json", json, "print the figures as JSON");
  SLUICE_PARSE(app, argc, argv);
  if (text.empty() && trace_in.empty())
    fail("give a text with -f FILE (and -m MODEL), or a trace with --trace FILE");

  std::string path = trace_in;
  bool remove_after = false;
  if (path.empty()) {
    path = trace_out;
    if (path.empty()) {
      path = (std::filesystem::temp_directory_path() /
              fmt::format("sluice-route-stats-{}.trace", getpid()))
                 .string();
      remove_after = true;
    }
    trace_text(mf, text, window, path);
  }
  RoutingTrace trace = read_routing_trace(path);
  if (remove_after) std::filesystem::remove(path);
  RoutingStatsOptions so;
  so.row_passes = row_passes || !text.empty();
  so.slots = slots;
  if (!rows.empty()) parse_rows(rows, so);
  if (!timeline.empty()) {
    if (slots.empty()) fail("--timeline needs --cache-slots N: the cache it simulates");
    const CacheTimeline tl = cache_timeline(trace, so, slots.front());
    std::string csv = "row,requested";
    for (const std::string& p : tl.policies) csv += "," + p;
    csv += "\n";
    for (const CacheTimeline::Pass& pass : tl.passes) {
      csv += fmt::format("{},{}", pass.row, pass.requested);
      for (const uint64_t h : pass.hits) csv += fmt::format(",{}", h);
      csv += "\n";
    }
    AtomicFile out(timeline);
    out.bytes(csv.data(), csv.size());
    out.close();
  }
  const RoutingStats st = routing_stats(trace, so);
  const RoutingStats uni = routing_stats(uniform_like(trace, seed), so);

  const std::string source = trace_in.empty() ? fmt::format("{} on {}", mf.model, text) : trace_in;
  if (json) {
    Json j;
    j["source"] = source;
    j["rows"] = trace.n_rows();
    j["n_layer"] = st.n_layer;
    j["n_expert"] = st.n_expert;
    j["n_used"] = st.n_used;
    j["routed_layers"] = st.routed_layers;
    j["passes_in_trace"] = so.row_passes ? trace.n_rows() : trace.n_passes();
    j["row_passes"] = so.row_passes;
    j["counted"] = {{"first_row", so.first_row},
                    {"passes", st.passes},
                    {"rows", st.pass_rows},
                    {"layer_requests", st.layer_requests},
                    {"experts_requested", st.experts_requested},
                    {"row_experts", st.row_experts}};
    j["cache_fractions"] = kCacheFractions;
    j["cache_keys"] = st.cache_keys;
    j["cache_slots"] = st.cache_slots;
    const Json model = stats_json(st);
    j["overall"] = model["overall"];
    j["layers"] = model["layers"];
    j["uniform"] = stats_json(uni);
    fmt::print("{}\n", j.dump(1));
    return 0;
  }
  fmt::print(
      "{}: {} rows in {} passes{}, {} routed layers of {}, {} experts top-{}; uniform: the same "
      "rows routed at random (seed {})\n",
      source, trace.n_rows(), so.row_passes ? trace.n_rows() : trace.n_passes(),
      so.row_passes ? " (each row a pass)" : "", st.routed_layers.size(), st.n_layer, st.n_expert,
      st.n_used, seed);
  const double requests = static_cast<double>(std::max<uint64_t>(st.layer_requests, 1));
  fmt::print(
      "cache simulated on {} passes ({} rows{}): {:.1f} experts asked per layer request (the "
      "union of its pass's rows), {:.1f} without sharing\n\n",
      st.passes, st.pass_rows, rows.empty() ? "" : fmt::format(", --rows {}", rows),
      st.experts_requested / requests, st.row_experts / requests);
  print_tables(st, uni);
  return 0;
}

}  // namespace sluice::cli
