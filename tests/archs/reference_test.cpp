// Forward pass against the reference engine's outputs in testdata/reference and models/: every
// `<model>.<prompt>.json` whose `<model>.gguf` exists is evaluated from its `tokens` with teacher
// forcing. F32 models: every listed logit within 2e-3 and an identical greedy continuation;
// quantized models: top-1 agreement ≥ 80 % and median |Δ| of the reference top-1 logit ≤ 0.1
// (the band between two exact implementations of the same file). Files are discovered, not
// listed, so variants dropped into the directory are checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

struct Case {
  std::string json;
  std::string gguf;
  std::string label;
};

std::vector<Case> discover() {
  std::vector<Case> out;
  for (const char* dir : {"reference", "models"}) {
    const fs::path d = fs::path(SLUICE_TESTDATA) / dir;
    if (!fs::exists(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".json") continue;
      const std::string model = name.substr(0, name.find('.'));
      fs::path g = d / (model + ".gguf");
      if (!fs::exists(g)) g = fs::path(SLUICE_TESTDATA) / "models" / (model + ".gguf");
      if (!fs::exists(g)) continue;
      std::string label = name.substr(0, name.size() - 5);
      std::replace_if(label.begin(), label.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      out.push_back({e.path().string(), g.string(), label});
    }
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.label < b.label; });
  return out;
}

// Integer tables (deepseek4's tid2eid, I32) hold ids, not weights: they do not make a model quantized.
bool all_f32(const std::string& path) {
  auto f = gguf::File::open(path);
  for (const auto& t : f->tensors())
    if (t.type != GgmlType::F32 && t.type != GgmlType::I32) return false;
  return true;
}

class Reference : public ::testing::TestWithParam<Case> {};

TEST_P(Reference, MatchesReferenceEngine) {
  const Case& c = GetParam();
  {
    auto f = gguf::File::open(c.gguf);
    const std::string arch = f->get_string("general.architecture");
    auto archs = supported_architectures();
    if (std::find(archs.begin(), archs.end(), arch) == archs.end())
      GTEST_SKIP() << "architecture " << arch << " is not implemented yet";
  }
  std::ifstream in(c.json);
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy_ref = ref["greedy"].get<std::vector<int32_t>>();

  EngineOptions eo;
  eo.model_path = c.gguf;
  eo.n_ctx = static_cast<int>(tokens.size() + greedy_ref.size() + 8);
  auto engine = Engine::load(eo);
  const int n_vocab = engine->info().n_vocab;
  ASSERT_EQ(n_vocab, ref["n_vocab"].get<int>());
  auto session = engine->new_session();
  const std::vector<float> all = session->evaluate_all(tokens);
  ASSERT_EQ(all.size(), tokens.size() * n_vocab);

  const bool exact = all_f32(c.gguf);
  double max_err = 0;
  int top1_agree = 0;
  std::vector<double> top1_delta;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = all.data() + i * n_vocab;
    const auto& top = ref["top_logits"][i];
    for (const auto& pair : top) {
      const double err = std::fabs(row[pair[0].get<int>()] - pair[1].get<double>());
      max_err = std::max(max_err, err);
    }
    const int ref_top = top[0][0].get<int>();
    if (argmax(std::span<const float>(row, n_vocab)) == ref_top) ++top1_agree;
    top1_delta.push_back(std::fabs(row[ref_top] - top[0][1].get<double>()));
  }
  const auto& last = ref["last_logits"];
  const float* last_row = all.data() + (tokens.size() - 1) * n_vocab;
  double last_err = 0;
  for (int v = 0; v < n_vocab; ++v) last_err = std::max(last_err, std::fabs(last_row[v] - last[v].get<double>()));
  std::nth_element(top1_delta.begin(), top1_delta.begin() + top1_delta.size() / 2, top1_delta.end());
  const double median = top1_delta[top1_delta.size() / 2];
  const double agree = static_cast<double>(top1_agree) / tokens.size();

  std::vector<int32_t> ctx = tokens;
  std::vector<int32_t> greedy;
  std::span<const float> logits(last_row, n_vocab);
  std::vector<float> held(logits.begin(), logits.end());
  for (size_t i = 0; i < greedy_ref.size(); ++i) {
    const int32_t next = argmax(held);
    greedy.push_back(next);
    ctx.push_back(next);
    auto l = session->evaluate(ctx);
    held.assign(l.begin(), l.end());
  }
  RecordProperty("max_err", std::to_string(max_err));
  std::printf("[%s] %s: max|Δ| listed %.2e, last %.2e, top-1 agreement %.3f, median top-1 |Δ| %.4f, greedy %s\n",
              c.label.c_str(), exact ? "F32" : "quantized", max_err, last_err, agree, median,
              greedy == greedy_ref ? "identical" : "DIFFERENT");
  if (exact) {
    EXPECT_LE(max_err, 2e-3);
    EXPECT_LE(last_err, 2e-3);
    EXPECT_EQ(greedy, greedy_ref);
  } else {
    EXPECT_GE(agree, 0.80);
    EXPECT_LE(median, 0.1);
  }
}

INSTANTIATE_TEST_SUITE_P(Testdata, Reference, ::testing::ValuesIn(discover()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.label; });

}  // namespace
