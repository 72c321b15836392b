// Speculative decoding keeps greedy output: on every reference model and the shipped model, a
// greedy generation with n-gram drafts is token-identical to one without, through Session and
// through the Scheduler (the two callers of the one generation loop). The prompt is the
// reference prompt twice, so the context has n-grams to look up and drafts are really verified.
// Verify passes compute every row as a one-token pass does (ExactRows), checked bit for bit below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ops/matmul.h"
#include "sluice/serving.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

struct Case {
  std::string gguf;
  std::string json;  // prompt tokens; empty: tokenize kText
  std::string label;
};

const char* kText =
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    "
    "return a * b\n\n"
    "def add(a, b):\n    return a + b\n";

std::vector<Case> discover() {
  std::vector<Case> out;
  const fs::path d = fs::path(SLUICE_TESTDATA) / "reference";
  if (fs::exists(d))
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.path().extension() != ".gguf") continue;
      const std::string model = e.path().stem().string();
      const fs::path json = d / (model + ".prompt1.json");
      std::string label = model;
      std::replace_if(
          label.begin(), label.end(),
          [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      out.push_back({e.path().string(), fs::exists(json) ? json.string() : "", label});
    }
  out.push_back(
      {std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf", "", "sluice_tiny_moe"});
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.label < b.label; });
  return out;
}

std::vector<int32_t> prompt_of(const Case& c, Engine& engine) {
  std::vector<int32_t> p;
  if (!c.json.empty()) {
    std::ifstream in(c.json);
    p = nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
    // The reference text, then one of its tokens repeated: random-weight models tend to go on
    // repeating, which gives n-gram drafts to verify (and to reject when they break off).
    p.resize(std::min<size_t>(p.size(), 32));
    const std::vector<int32_t> cycle(p.begin() + 4, p.begin() + 5);
    for (int i = 0; i < 24; ++i) p.insert(p.end(), cycle.begin(), cycle.end());
  } else {
    p = engine.tokenize(kText, true);
  }
  return p;
}

GenerateOptions greedy(int n, DraftMode mode) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  o.draft.mode = mode;
  o.draft.max = 6;
  o.draft.adaptive = false;  // every candidate drafted, whatever the timings: the test sees drafts
  return o;
}

class Speculative : public ::testing::TestWithParam<Case> {};

TEST_P(Speculative, GreedyOutputIsIdenticalWithDrafts) {
  const Case& c = GetParam();
  constexpr int kGen = 96;
  EngineOptions eo;
  eo.model_path = c.gguf;
  eo.n_ctx = 256;
  auto engine = Engine::load(eo);
  const std::vector<int32_t> prompt = prompt_of(c, *engine);
  ASSERT_LT(prompt.size() + kGen, 256u);

  auto plain = engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kNone), {});
  auto session = engine->new_session();
  auto drafted = session->generate(prompt, greedy(kGen, DraftMode::kNgram), {});
  EXPECT_EQ(plain.n_drafted, 0);
  EXPECT_EQ(plain.n_steps, kGen);
  EXPECT_EQ(drafted.tokens, plain.tokens);
  // Random-weight models draft only when their greedy output recurs (gptoss's reference models
  // never do within kGen tokens: their check is the bit-exact verify rows below); the shipped
  // model on the repetitive code prompt always drafts.
  std::printf("[%s] %d drafted, %d accepted, %d forward passes for %d tokens\n", c.label.c_str(),
              drafted.n_drafted, drafted.n_accepted, drafted.n_steps, kGen);
  if (c.json.empty()) {
    EXPECT_GT(drafted.n_drafted, 0);
  }
  // Fewer forward passes exactly by the accepted drafts.
  EXPECT_EQ(drafted.n_steps + drafted.n_accepted, kGen);
  // The session's context is the prompt and the evaluated output; continuing from it stays exact.
  EXPECT_EQ(session->tokens().size(), prompt.size() + kGen - 1);

  // The same through the scheduler, the server's loop.
  engine.reset();
  engine = Engine::load(eo);
  // One request at a time: the scheduler batches several requests' rows together, whose quantized
  // matmuls then take other kernels than one row alone (see BatchedRowsAgainstSequentialLogits).
  SchedulerOptions so;
  so.n_parallel = 1;
  so.draft.max = 6;
  so.draft.adaptive = false;
  Scheduler sched(*engine, so);
  CompletionRequest req;
  req.prompt = prompt;
  req.options = greedy(kGen, DraftMode::kNone);  // the scheduler's draft options apply
  Submission sub = sched.submit(std::move(req));
  ASSERT_EQ(sub.status, SubmitStatus::kOk) << sub.message;
  CompletionEvent ev;
  GenerateResult result;
  while (!sub.handle->finished())
    if (sub.handle->next(ev, std::chrono::milliseconds(1000)) &&
        ev.kind == CompletionEvent::Kind::kDone)
      result = ev.result;
  ASSERT_NE(ev.kind, CompletionEvent::Kind::kError) << ev.text;
  EXPECT_EQ(result.tokens, plain.tokens);
  EXPECT_EQ(result.n_drafted, drafted.n_drafted);
  EXPECT_EQ(result.n_accepted, drafted.n_accepted);
}

// A verify pass evaluates several rows under ExactRows: each row then equals one-token evaluation
// bit for bit. Printed for the record: how far rows of an ordinary batch (GEMM and multi-row
// kernels) drift from it on each model.
TEST_P(Speculative, ExactRowsMatchSequentialLogits) {
  const Case& c = GetParam();
  EngineOptions eo;
  eo.model_path = c.gguf;
  eo.n_ctx = 256;
  auto engine = Engine::load(eo);
  std::vector<int32_t> ctx = prompt_of(c, *engine);
  const int n_vocab = engine->info().n_vocab;
  const std::vector<float> batched = engine->new_session()->evaluate_all(ctx);
  std::vector<float> exact;
  {
    const ExactRows scope(true);
    exact = engine->new_session()->evaluate_all(ctx);
  }
  auto seq = engine->new_session();
  constexpr int kRows = 8;
  double batched_diff = 0, exact_diff = 0;
  // One token per evaluation from the start: the reference every decode step matches.
  for (size_t pos = 0; pos < ctx.size(); ++pos) {
    const std::span<const float> l = seq->evaluate(std::span<const int32_t>(ctx.data(), pos + 1));
    if (pos + kRows < ctx.size()) continue;
    for (int v = 0; v < n_vocab; ++v) {
      batched_diff =
          std::max(batched_diff, static_cast<double>(std::fabs(l[v] - batched[pos * n_vocab + v])));
      exact_diff =
          std::max(exact_diff, static_cast<double>(std::fabs(l[v] - exact[pos * n_vocab + v])));
    }
  }
  std::printf("[%s] max |logit diff| against one token at a time: batched %.3g, exact rows %.3g\n",
              c.label.c_str(), batched_diff, exact_diff);
  EXPECT_EQ(exact_diff, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Testdata, Speculative, ::testing::ValuesIn(discover()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.label; });

// Chi-square critical value for `df` degrees of freedom at the 0.1 % level (Wilson–Hilferty).
double chi_square_critical(int df) {
  const double z = 3.0902;  // standard normal quantile 0.999
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

// Two-sample chi-square (homogeneity) of token counts; categories with fewer than 10 draws over
// both samples are pooled into one. Returns the statistic and sets the degrees of freedom.
double homogeneity(const std::map<int32_t, int>& x, const std::map<int32_t, int>& y, int* df) {
  std::map<int32_t, std::pair<int, int>> cat;
  for (const auto& [t, c] : x) cat[t].first += c;
  for (const auto& [t, c] : y) cat[t].second += c;
  std::vector<std::pair<int, int>> bins;
  std::pair<int, int> rare{0, 0};
  for (const auto& [t, c] : cat) {
    if (c.first + c.second >= 10)
      bins.push_back(c);
    else
      rare.first += c.first, rare.second += c.second;
  }
  if (rare.first + rare.second > 0) bins.push_back(rare);
  double x2 = 0;
  for (const auto& [a, b] : bins) {
    const double e = (a + b) / 2.0;  // equal sample sizes
    x2 += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
  }
  *df = static_cast<int>(bins.size()) - 1;
  return x2;
}

// Temperature sampling with drafts keeps the model's distribution: over a fixed set of seeds the
// 2nd and 3rd generated tokens (sampled from verify rows when a draft was proposed) have the same
// distribution with and without drafting. A rejection rule that favours the draft (always taking
// it, or drawing the residual with the draft left in) fails this by a wide margin.
TEST(SpeculativeSampling, TemperatureKeepsTheDistribution) {
  EngineOptions eo;
  eo.model_path = std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf";
  eo.n_ctx = 128;
  auto engine = Engine::load(eo);
  // A verse and the start of it again: the model (trained on the King James Bible) tends to copy
  // it, so the n-gram drafter proposes the continuation and the sampler accepts or rejects it.
  const std::vector<int32_t> prompt = engine->tokenize(
      "In the beginning God created the heaven and the earth. And the earth was without form, and "
      "void; and "
      "darkness was upon the face of the deep.\n\nIn the beginning God created the heaven and the "
      "earth. And the "
      "earth was",
      true);
  constexpr int kSeeds = 600;
  std::map<int32_t, int> by_mode[2][2];  // [drafting][position 1, 2]
  int drafted = 0, rejected = 0;
  for (int mode = 0; mode < 2; ++mode) {
    auto session = engine->new_session();
    for (int seed = 0; seed < kSeeds; ++seed) {
      GenerateOptions o;
      o.max_tokens = 4;
      o.stop_at_eog = false;
      o.sampling.temperature = 0.6f;
      o.sampling.top_k = 0, o.sampling.top_p = 1.0f,
      o.sampling.min_p = 0.0f;                        // every draft is possible
      o.sampling.seed = 1000 + seed + mode * 100000;  // independent samples for the two-sample test
      o.draft.mode = mode ? DraftMode::kNgram : DraftMode::kNone;
      o.draft.max = 3;
      o.draft.adaptive = false;
      const GenerateResult r = session->generate(prompt, o, {});
      ASSERT_EQ(r.tokens.size(), 4u);
      ++by_mode[mode][0][r.tokens[1]];
      ++by_mode[mode][1][r.tokens[2]];
      if (mode) drafted += r.n_drafted, rejected += r.n_drafted - r.n_accepted;
    }
  }
  // The test means something only if drafts were verified and some were rejected.
  EXPECT_GT(drafted, kSeeds / 8);
  EXPECT_GT(rejected, 20);
  for (int pos = 0; pos < 2; ++pos) {
    int df = 0;
    const double x2 = homogeneity(by_mode[0][pos], by_mode[1][pos], &df);
    std::printf(
        "token %d: chi-square %.2f with %d degrees of freedom (0.1 %% critical value %.2f); %d "
        "drafted, %d rejected\n",
        pos + 2, x2, df, chi_square_critical(std::max(df, 1)), drafted, rejected);
    ASSERT_GE(df, 1);
    EXPECT_LT(x2, chi_square_critical(df)) << "token " << pos + 2;
  }
}

}  // namespace
