// `sluice logits`: evaluate the `tokens` of a reference-shaped JSON file and write top logits per
// position, all last-position logits and a greedy continuation in the same shape, so tests and
// outside checks compare engines on identical inputs.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "core/error.h"
#include "sampling/sampler.h"

namespace sluice::cli {

namespace {

nlohmann::json top_of(std::span<const float> row, int k) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(row.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < k; ++i) out.push_back({idx[i], row[idx[i]]});
  return out;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  CLI::App app{"Evaluate reference tokens and write logits as JSON", "sluice logits"};
  ModelFlags mf;
  add_model_flags(app, mf);
  std::string ref_path, out_path = "-";
  int top = 20, greedy = 16;
  app.add_option("--tokens-from", ref_path, "JSON file with a `tokens` array")->required()->check(CLI::ExistingFile);
  app.add_option("--top", top, "logits kept per position")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--greedy", greedy, "greedy tokens generated after the prompt")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("-o,--output", out_path, "output file (- for stdout)")->capture_default_str();
  SLUICE_PARSE(app, argc, argv);

  nlohmann::json ref;
  try {
    std::ifstream in(ref_path);
    ref = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", ref_path, e.what());
  }
  if (!ref.contains("tokens") || !ref["tokens"].is_array() || ref["tokens"].empty())
    fail("{}: expected a non-empty `tokens` array of integers", ref_path);
  std::vector<int32_t> tokens;
  for (const auto& t : ref["tokens"]) {
    if (!t.is_number_integer()) fail("{}: `tokens` holds a non-integer value {}", ref_path, t.dump());
    tokens.push_back(t.get<int32_t>());
  }
  mf.ctx = std::max<int>(mf.ctx, static_cast<int>(tokens.size()) + greedy);

  EngineOptions eo = engine_options(mf);
  apply_pipeline(mf, eo);
  auto engine = Engine::load(eo);
  const int n_vocab = engine->info().n_vocab;
  // In a pipeline only the last stage has logits: it writes the output and chooses the greedy
  // tokens, which every stage then evaluates.
  const bool has_logits = engine->info().stage == engine->info().n_stages - 1;
  pipeline_output_from(engine->info().n_stages - 1);
  auto session = engine->new_session();
  std::vector<float> all = session->evaluate_all(tokens);
  std::vector<int32_t> ctx = tokens;
  std::vector<int32_t> gen;
  std::span<const float> logits =
      has_logits ? std::span<const float>(all.data() + (tokens.size() - 1) * n_vocab, n_vocab) : std::span<const float>();
  for (int i = 0; i < greedy; ++i) {
    const int32_t next = engine->share_token(has_logits ? argmax(logits) : -1);
    gen.push_back(next);
    ctx.push_back(next);
    if (i + 1 < greedy) logits = session->evaluate(ctx);
  }
  if (!has_logits) return 0;
  nlohmann::json out;
  out["model"] = mf.model;
  out["n_vocab"] = n_vocab;
  out["tokens"] = tokens;
  out["top_logits"] = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i)
    out["top_logits"].push_back(top_of(std::span<const float>(all.data() + i * n_vocab, n_vocab), top));
  std::span<const float> last(all.data() + (tokens.size() - 1) * n_vocab, n_vocab);
  out["last_logits"] = std::vector<float>(last.begin(), last.end());
  out["greedy"] = gen;
  const std::string dumped = out.dump();
  if (out_path == "-") {
    fmt::print("{}\n", dumped);
  } else {
    std::ofstream f(out_path);
    if (!(f << dumped << '\n')) fail("cannot write '{}'", out_path);
  }
  return 0;
}

}  // namespace sluice::cli
