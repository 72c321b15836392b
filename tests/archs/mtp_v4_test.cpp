// DeepSeek V4 MTP from the separate GGUF its converter writes (gen-model --nextn 1 on deepseek4,
// loaded with --mtp FILE): the block's input projection per hyper-connection stream, its own head
// mixer and the model's output head against a recomputation from the files' tensors; batched
// rows against row-by-row and streamed against in RAM; a catch-up that runs only its last row's
// experts; the main model's logits unchanged by loading
// the block; greedy output with MTP drafts token-identical to plain decoding (experts in RAM, and
// streamed from both files through one store); every draft accepted on files whose heads always
// pick token 0, in a session and in the batch scheduler; the errors of a mismatched or misused MTP
// file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "gen/gen_model.h"
#include "model/archs/registry.h"
#include "model/model.h"
#include "plan/sizing.h"
#include "../unit/ds4_cut.h"
#include "mtp_support.h"
#include "quant/dequant.h"
#include "runtime/expert_setup.h"
#include "sluice/serving.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;
using namespace sluice::mtp_test;

namespace {

// Six layers of every kind (window-only, ratio 4 with the indexer, ratio 128; hash and selection
// routing), F32 weights so the recomputation is exact up to summation order.
GenSpec v4_spec() {
  GenSpec s = test::ds4_cut({.n_embd = 128, .head_dim = 64, .rope_dim = 16, .q_lora_rank = 64,
                             .out_lora_rank = 32, .window = 16, .indexer_heads = 4, .indexer_dim = 64,
                             .indexer_top_k = 4, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64});
  s.n_vocab = 0;
  s.type_experts = s.type_attn = s.type_attn_v = s.type_embd = s.type_output = s.type_dense =
      s.type_aux = GgmlType::F32;
  s.type_experts_down.reset();
  s.type_experts_mixed.reset();
  s.vocab_from = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
  return s;
}

class V4Mtp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("sluice-mtp-v4-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    setenv("SLUICE_HEAT_DIR", dir_.c_str(), 1);
    GenSpec s = v4_spec();
    model_ = (dir_ / "v4.gguf").string();
    write_random_model(s, model_);
    s.n_nextn = 1;
    mtp_ = (dir_ / "v4-mtp.gguf").string();
    write_random_model(s, mtp_);
    // The MTP head's mixer differs from the model's (gen-model seeds both by name), and the MTP
    // file's copy of the output head is zero: the block must use its own mixer and the model's
    // head.
    zero_tensors(mtp_, {"output_hc_fn.weight", "output.weight"});
    // Heads that always pick token 0 (every logit 0): every draft stands.
    const_model_ = (dir_ / "v4-constant.gguf").string();
    const_mtp_ = (dir_ / "v4-mtp-constant.gguf").string();
    fs::copy_file(model_, const_model_);
    fs::copy_file(mtp_, const_mtp_);
    zero_tensors(const_model_, {"output_norm.weight"});
    zero_tensors(const_mtp_, {"blk.6.nextn.shared_head_norm.weight"});
    // An MTP file of another model: two layers more.
    s.n_layer = 8;
    other_mtp_ = (dir_ / "v4-8l-mtp.gguf").string();
    write_random_model(s, other_mtp_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<int32_t> prompt() { return prompt40(); }

  static EngineOptions engine_options(const std::string& model, const std::string& mtp) {
    EngineOptions eo;
    eo.model_path = model;
    eo.mtp_path = mtp;
    eo.n_ctx = 256;
    eo.lock_memory = false;
    eo.draft = DraftMode::kMtp;
    return eo;
  }

  static inline fs::path dir_;
  static inline std::string model_, mtp_, const_model_, const_mtp_, other_mtp_;
};

TEST_F(V4Mtp, ForwardMatchesRecomputationFromTensors) {
  auto file = gguf::File::open(model_);
  auto mfile = gguf::File::open(mtp_);
  auto model = load_model(*file);
  ThreadPool pool(2);
  const std::vector<int32_t> p = prompt();
  const int n = static_cast<int>(p.size());
  Batch b;
  for (int i = 0; i < n; ++i) b.add(p[i], i, 0, true);
  std::vector<float> hidden, logits_before, logits;
  {
    auto experts = make_in_place_store(model->expert_layout(), "ram");
    model->forward_stage(pool, b, *model->make_kv_cache(64), *experts, hidden, logits_before);
  }
  model->load_mtp(*mfile, static_cast<uint32_t>(file->n_parts()));
  auto experts = make_in_place_store(model->expert_layout(), "ram");
  model->forward_stage(pool, b, *model->make_kv_cache(64), *experts, hidden, logits);
  EXPECT_EQ(logits, logits_before) << "loading the MTP block changed the main model";

  const HParams& hp = model->hparams();
  const int64_t d = hp.n_embd, S = 4, V = hp.n_vocab;
  ASSERT_EQ(hidden.size(), static_cast<size_t>(n * S * d));
  std::vector<float> rows(hidden.size());
  model->mtp_hidden_rows(pool, hidden.data(), n, rows.data());
  EXPECT_EQ(rows, hidden) << "V4's MTP starts from the streams before the head mixer";

  const std::string blk = "blk." + std::to_string(hp.n_layer) + ".nextn.";
  const std::vector<float> eh = tensor_f32(*mfile, blk + "eh_proj.weight");  // (2·d, d)
  const std::vector<float> en = tensor_f32(*mfile, blk + "enorm.weight");
  const std::vector<float> hn = tensor_f32(*mfile, blk + "hnorm.weight");
  const std::vector<float> sh = tensor_f32(*mfile, blk + "shared_head_norm.weight");
  const std::vector<float> hc_fn = tensor_f32(*mfile, "output_hc_fn.weight");  // (S·d, S)
  const std::vector<float> hc_base = tensor_f32(*mfile, "output_hc_base.weight");
  const std::vector<float> hc_scale = tensor_f32(*mfile, "output_hc_scale.weight");
  const std::vector<float> embd = tensor_f32(*file, "token_embd.weight");
  const std::vector<float> head = tensor_f32(*file, "output.weight");

  auto mkv = model->make_mtp_kv_cache(64);
  Batch mb;
  for (int t = 0; t + 1 < n; ++t) mb.add(p[t + 1], t, 0, true);
  std::vector<float> proj, block_out, mout, mlogits;
  const ActivationHook hook = [&](const char* name, int il, const float* data, int64_t r,
                                  int64_t c) {
    EXPECT_EQ(il, hp.n_layer);
    if (std::strcmp(name, "mtp_eh_proj") == 0) proj.assign(data, data + r * c);
    if (std::strcmp(name, "l_out") == 0) block_out.assign(data, data + r * c);
  };
  model->forward_mtp(pool, mb, rows.data(), *mkv, *experts, mout, mlogits, &hook);
  ASSERT_EQ(proj.size(), static_cast<size_t>((n - 1) * S * d));
  ASSERT_EQ(mlogits.size(), static_cast<size_t>((n - 1) * V));
  EXPECT_EQ(mout, block_out) << "chaining takes the block's output streams";
  EXPECT_EQ(mkv->length(0), n - 1);
  const float hc_eps = 1e-6f;
  for (int t : {0, n / 2, n - 2}) {
    // Each stream s: eh_proj · [enorm(embed(token t+1)); hnorm(X_s)].
    const std::vector<double> e = rms_norm(embd.data() + p[t + 1] * d, en.data(), d, hp.rms_eps);
    for (int s = 0; s < S; ++s) {
      const std::vector<double> h =
          rms_norm(rows.data() + (t * S + s) * d, hn.data(), d, hp.rms_eps);
      for (int64_t o = 0; o < d; o += 7) {
        double z = 0;
        for (int64_t i = 0; i < d; ++i)
          z += e[i] * eh[o * 2 * d + i] + h[i] * eh[o * 2 * d + d + i];
        ASSERT_NEAR(proj[(t * S + s) * d + o], z, 1e-4) << "row " << t << " stream " << s;
      }
    }
    // The head: the MTP file's mixer collapses the streams, shared_head_norm, the model's head.
    const float* y = block_out.data() + t * S * d;
    const std::vector<double> z = rms_norm(y, nullptr, S * d, hp.rms_eps);
    std::vector<double> collapsed(d, 0.0);
    for (int s = 0; s < S; ++s) {
      double m = 0;
      for (int64_t i = 0; i < S * d; ++i) m += z[i] * hc_fn[s * S * d + i];
      const double pre = 1.0 / (1.0 + std::exp(-(hc_scale[0] * m + hc_base[s]))) + hc_eps;
      for (int64_t i = 0; i < d; ++i) collapsed[i] += pre * y[s * d + i];
    }
    std::vector<float> cf(collapsed.begin(), collapsed.end());
    const std::vector<double> hnorm = rms_norm(cf.data(), sh.data(), d, hp.rms_eps);
    for (int v = 0; v < V; v += 61) {
      double l = 0;
      for (int64_t i = 0; i < d; ++i) l += hnorm[i] * head[v * d + i];
      ASSERT_NEAR(mlogits[t * V + v], l, 1e-3) << "row " << t << " token " << v;
    }
  }

  // Streamed with a cold cache of a few slots, the block's experts are read from the MTP file
  // (its parts numbered after the model's): the same logits bit for bit.
  {
    EngineOptions o;
    o.model_path = model_;
    o.lock_memory = false;
    o.cold = true;
    ExpertPlan plan;
    plan.memory.placement = Placement::kStream;
    plan.memory.cache_bytes = 4u << 20;
    auto streamed = make_expert_store(*file, *model, o, plan, mfile.get());
    std::vector<float> so, sl;
    model->forward_mtp(pool, mb, rows.data(), *model->make_mtp_kv_cache(64), *streamed, so, sl);
    EXPECT_EQ(sl, mlogits);
    EXPECT_GT(streamed->stats().bytes_read, 0u);
  }

  // A catch-up that wants only its last row's draft: the other rows fill the cache without
  // running their experts, and the last row's logits stay the same.
  {
    Batch last = mb;
    std::fill(last.want_logits.begin(), last.want_logits.end(), 0);
    last.want_logits.back() = 1;
    auto counted = make_in_place_store(model->expert_layout(), "ram");
    std::vector<float> lo, ll;
    model->forward_mtp(pool, last, rows.data(), *model->make_mtp_kv_cache(64), *counted, lo, ll);
    ASSERT_EQ(ll.size(), static_cast<size_t>(V));
    float max_diff = 0;
    for (int v = 0; v < V; ++v)
      max_diff = std::max(max_diff, std::fabs(ll[v] - mlogits[(n - 2) * V + v]));
    EXPECT_LT(max_diff, 1e-3f);
    EXPECT_EQ(argmax(ll.data(), V), argmax(mlogits.data() + (n - 2) * V, V));
    EXPECT_EQ(counted->stats().requests, static_cast<uint64_t>(hp.n_expert_used));
  }

  // Row by row through the block's own window cache gives the same drafts.
  auto kv1 = model->make_mtp_kv_cache(64);
  for (int t = 0; t + 1 < n; ++t) {
    Batch one;
    one.add(p[t + 1], t, 0, true);
    std::vector<float> o1, l1;
    model->forward_mtp(pool, one, rows.data() + t * S * d, *kv1, *experts, o1, l1);
    float max_diff = 0;
    for (int v = 0; v < V; ++v)
      max_diff = std::max(max_diff, std::fabs(l1[v] - mlogits[t * V + v]));
    EXPECT_LT(max_diff, 1e-3f) << "row " << t;
    EXPECT_EQ(argmax(l1.data(), V), argmax(mlogits.data() + t * V, V)) << "row " << t;
  }
}

void expect_identical(const EngineOptions& eo, bool all_accepted) {
  constexpr int kGen = 40;
  auto engine = Engine::load(eo);
  const std::vector<int32_t> p = prompt40();
  const GenerateResult plain =
      engine->new_session()->generate(p, greedy(kGen, DraftMode::kNone), {});
  auto session = engine->new_session();
  const GenerateResult mtp = session->generate(p, greedy(kGen, DraftMode::kMtp), {});
  std::printf("[%s] V4 MTP: %d drafted, %d accepted, %d passes for %d tokens\n",
              expert_mode_name(eo.experts), mtp.n_drafted, mtp.n_accepted, mtp.n_steps, kGen);
  EXPECT_EQ(mtp.tokens, plain.tokens);
  EXPECT_GT(mtp.n_drafted, 0);
  EXPECT_EQ(mtp.n_steps + mtp.n_accepted, kGen);
  if (all_accepted) {
    EXPECT_EQ(plain.tokens, std::vector<int32_t>(kGen, 0));
    EXPECT_EQ(mtp.n_accepted, mtp.n_drafted);
    EXPECT_LE(mtp.n_steps, kGen / 4 + 1);  // 4 drafts + 1 token per pass
  }
  // A follow-up on the same session continues the block's window cache and stays exact.
  std::vector<int32_t> more = session->tokens();
  more.insert(more.end(), p.begin(), p.begin() + 8);
  const GenerateResult again = session->generate(more, greedy(16, DraftMode::kMtp), {});
  EXPECT_EQ(again.tokens,
            engine->new_session()->generate(more, greedy(16, DraftMode::kNone), {}).tokens);
  EXPECT_GT(again.n_drafted, 0);
}

TEST_F(V4Mtp, GreedyOutputIsIdenticalWithMtpDrafts) {
  expect_identical(engine_options(model_, mtp_), false);
}

// The block's routed experts live in the MTP file: the store reads them from its second file.
TEST_F(V4Mtp, GreedyOutputIsIdenticalWithMtpDraftsStreamed) {
  EngineOptions eo = engine_options(model_, mtp_);
  eo.experts = ExpertMode::kStream;
  expect_identical(eo, false);
}

TEST_F(V4Mtp, ConstantHeadsAcceptEveryDraft) {
  expect_identical(engine_options(const_model_, const_mtp_), true);
  EngineOptions eo = engine_options(const_model_, const_mtp_);
  eo.experts = ExpertMode::kStream;
  expect_identical(eo, true);
}

TEST_F(V4Mtp, SchedulerDraftsWithTheSeparateBlock) {
  auto engine = Engine::load(engine_options(const_model_, const_mtp_));
  std::vector<std::vector<int32_t>> prompts = {prompt(), prompt(), prompt()};
  prompts[1].resize(prompts[1].size() / 2);
  prompts[2].push_back(prompts[2][1]);
  SchedulerOptions so;
  so.n_parallel = 3;
  so.draft = greedy(24, DraftMode::kMtp).draft;
  Scheduler scheduler(*engine, so);
  std::vector<Submission> subs;
  for (const auto& p : prompts)
    subs.push_back(scheduler.submit({.prompt = p, .options = greedy(24, DraftMode::kMtp)}));
  for (auto& sub : subs) {
    ASSERT_EQ(sub.status, SubmitStatus::kOk) << sub.message;
    CompletionEvent ev;
    while (!sub.handle->next(ev, std::chrono::milliseconds(100)) ||
           ev.kind == CompletionEvent::Kind::kText) {
    }
    ASSERT_EQ(ev.kind, CompletionEvent::Kind::kDone) << ev.text;
    EXPECT_EQ(ev.result.tokens, std::vector<int32_t>(24, 0));
  }
  const SchedulerStats st = scheduler.stats();
  EXPECT_GT(st.drafted_tokens, 0u);
  EXPECT_EQ(st.accepted_tokens, st.drafted_tokens);
}

// The memory plan counts what the block reads from its file: its layer, its head's norm and
// mixer; the file's copies of the embedding and the output head are never read.
TEST_F(V4Mtp, MemoryPlanCountsTheBlockWithoutTheFilesHeadCopies) {
  auto mfile = gguf::File::open(mtp_);
  MemoryFacts f;
  add_mtp_block(*mfile, 6, true, f);
  uint64_t all = 0;
  for (const auto& t : mfile->tensors()) all += t.nbytes;
  const uint64_t copies =
      mfile->tensor("token_embd.weight").nbytes + mfile->tensor("output.weight").nbytes;
  EXPECT_EQ(f.resident_bytes + f.routed_bytes, all - copies);
  EXPECT_GT(f.routed_bytes, 0u);
  EXPECT_GT(f.expert_bytes, 0u);
}

// The plan's per-position bytes with the block loaded: the main cache, the block's, and the
// drafter's hidden row (4 streams of n_embd floats); its fixed bytes add the block's ring.
TEST_F(V4Mtp, MemoryPlanCountsTheDraftersRowsAndRing) {
  auto file = gguf::File::open(model_);
  auto mfile = gguf::File::open(mtp_);
  auto model = load_model(*file);
  model->load_mtp(*mfile, static_cast<uint32_t>(file->n_parts()));
  EngineOptions o = engine_options(model_, mtp_);
  o.mem_limit = 1ull << 30;
  auto kv = model->make_kv_cache(256);
  const ExpertPlan plan = plan_experts(*file, *model, o, *kv, 256, mfile.get());
  auto mkv = model->make_mtp_kv_cache(256);
  EXPECT_EQ(plan.facts.kv_bytes_per_token,
            kv->bytes_per_position() + mkv->bytes_per_position() + 4 * 128 * sizeof(float));
  EXPECT_EQ(plan.facts.kv_fixed_bytes, kv->bytes_for(0) + mkv->bytes_for(0));
  EXPECT_GT(mkv->bytes_for(0), 0u);
}

void expect_load_error(const EngineOptions& eo, const std::string& part) {
  try {
    Engine::load(eo);
    ADD_FAILURE() << "loaded; expected an error naming '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(V4Mtp, MismatchedOrMisusedFilesAreErrors) {
  expect_load_error(engine_options(model_, other_mtp_), "block_count is 9, expected the model's 6");
  EngineOptions eo = engine_options(model_, mtp_);
  eo.draft = DraftMode::kNgram;
  expect_load_error(eo, "drafting here is ngram");
  // The MTP file alone is no model.
  expect_load_error(engine_options(mtp_, ""), "give this file with --mtp");
  // Without the file, --draft mtp names where V4's block comes from.
  expect_load_error(engine_options(model_, ""), "--mtp FILE");
  // A glm4moe model with a deepseek4 MTP file.
  GenSpec g = gen_preset("tiny");
  g.arch = "glm4moe";
  g.n_expert_shared = 1;
  g.vocab_from = v4_spec().vocab_from;
  const std::string glm = (dir_ / "glm.gguf").string();
  write_random_model(g, glm);
  expect_load_error(engine_options(glm, mtp_),
                    "architecture is 'deepseek4', the model's 'glm4moe'");
}

}  // namespace
