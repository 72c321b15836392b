// `sluice perplexity`: sliding-window perplexity of a text file. Protocol (shared with
// tools/train-tiny-moe/evaluate.py so the two agree to the last digit of the NLL sum):
// windows of --window tokens start every --stride tokens; the first window scores every
// prediction it makes, later windows only their last `stride` positions, so each token after the
// first is scored exactly once with at least window − stride tokens of context.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"

namespace sluice::cli {

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Sliding-window perplexity of a text file", "sluice perplexity"};
  ModelFlags mf;
  add_model_flags(app, mf);
  add_routing_trace_flag(app, mf);
  std::string path;
  int window = 128, stride = 64;
  bool bos = false, json = false;
  app.add_option("-f,--file", path, "text file ('-': standard input)")->required()->check(stdin_or_file());
  app.add_option("--window", window, "tokens per window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  app.add_option("--stride", stride, "tokens between window starts")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_flag("--bos", bos, "prepend the model's BOS token to the text");
  app.add_flag("--json", json, "print the result as JSON");
  SLUICE_PARSE(app, argc, argv);
  if (stride > window) throw CLI::ValidationError("--stride", fmt::format("{} is larger than --window {}", stride, window));

  const std::string text = read_text(path);
  mf.ctx = std::max(mf.ctx, window);
  auto engine = Engine::load(engine_options(mf));
  const std::vector<int32_t> ids = engine->tokenize(text, bos);
  const int n = static_cast<int>(ids.size());
  if (n < 2) fail("{}: {} tokens; need at least 2 to score", path, n);
  const int n_vocab = engine->info().n_vocab;
  auto session = engine->new_session();

  Timer t;
  double nll = 0;
  int64_t scored = 0, evaluated = 0, windows = 0;
  Progress progress("perplexity", static_cast<uint64_t>(n), "tokens");
  for (int s = 0;; s += stride) {
    const int end = std::min(n, s + window);
    std::vector<int32_t> win(ids.begin() + s, ids.begin() + end);
    const std::vector<float> logits = session->evaluate_all(win);
    evaluated += static_cast<int64_t>(win.size());
    ++windows;
    const int first = s == 0 ? 1 : window - stride;
    for (int p = first; p < static_cast<int>(win.size()); ++p) {
      const float* row = logits.data() + static_cast<int64_t>(p - 1) * n_vocab;
      double mx = row[0];
      for (int v = 1; v < n_vocab; ++v) mx = std::max<double>(mx, row[v]);
      double sum = 0;
      for (int v = 0; v < n_vocab; ++v) sum += std::exp(row[v] - mx);
      nll += (mx + std::log(sum)) - row[win[p]];
      ++scored;
    }
    progress.update(static_cast<uint64_t>(end));
    if (s + window >= n) break;
  }
  const double secs = t.seconds();
  const double ppl = std::exp(nll / static_cast<double>(scored));
  if (json) {
    fmt::print("{{\"perplexity\": {:.6f}, \"mean_nll\": {:.8f}, \"n_tokens\": {}, \"n_scored\": {}, \"n_windows\": {}, "
               "\"window\": {}, \"stride\": {}, \"tokens_per_second\": {:.2f}}}\n",
               ppl, nll / static_cast<double>(scored), n, scored, windows, window, stride, evaluated / secs);
  } else {
    fmt::print("perplexity {:.4f} over {} scored tokens ({} tokens, {} windows of {} stride {}), {:.1f} tokens/s\n", ppl,
               scored, n, windows, window, stride, evaluated / secs);
  }
  return 0;
}

}  // namespace sluice::cli
