// MTP (nextn) drafts on generated files with one nextn layer, glm4moe (GLM-4.5) and deepseek2
// (DeepSeek V3 layout): the MTP block's arithmetic against a recomputation from the file's
// tensors (concatenation order, norms, head) and its batched rows against row-by-row evaluation;
// greedy generation with MTP drafts token-identical to plain decoding (experts in RAM and
// streamed through one store), drafts produced and verified; accepted drafts (greedy and
// sampled) on a file whose heads always pick token 0; a context restored from disk; the errors of
// --draft mtp without MTP layers. Random weights accept no drafts otherwise: there only exactness
// is asserted.
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
#include "mtp_support.h"
#include "quant/dequant.h"
#include "sluice/serving.h"
#include "sluice/sluice.h"

namespace fs = std::filesystem;
using namespace sluice;
using namespace sluice::mtp_test;

namespace {

// 2-layer glm4moe and deepseek2 files with one nextn layer (F32 weights, so the recomputation
// below is exact up to summation order), and the glm4moe file without it, written once.
class MtpModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("sluice-mtp-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    setenv("SLUICE_HEAT_DIR", dir_.c_str(), 1);
    GenSpec s = gen_preset("tiny");
    s.arch = "glm4moe";
    s.name = "glm4moe with nextn (random weights)";
    s.n_expert_shared = 1;
    s.sigmoid_gating = true;
    s.expert_weights_norm = true;
    s.n_nextn = 1;
    s.vocab_from = std::string(SLUICE_SOURCE_DIR) + "/tests/data/vocab/tiny-bpe.gguf";
    path_ = (dir_ / "glm-nextn.gguf").string();
    write_random_model(s, path_);
    s.n_nextn = 0;
    plain_path_ = (dir_ / "glm-plain.gguf").string();
    write_random_model(s, plain_path_);

    GenSpec v3 = gen_preset("deepseek-v3");
    v3.n_layer = 2;
    v3.n_leading_dense = 1;
    v3.n_embd = 128;
    v3.n_head = 4;
    v3.n_head_kv = 1;
    v3.head_dim = 32;
    v3.q_lora_rank = v3.kv_lora_rank = 64;
    v3.rope_dim = 16;
    v3.n_ff = 256;
    v3.n_ff_exp = 64;
    v3.n_expert = 8;
    v3.n_expert_used = 2;
    v3.n_expert_groups = v3.n_group_used = 0;
    v3.n_vocab = 0;
    v3.n_nextn = 1;
    v3.type_experts = v3.type_attn = v3.type_attn_v = v3.type_embd = v3.type_output =
        v3.type_dense = GgmlType::F32;
    v3.type_experts_down.reset();
    v3.vocab_from = s.vocab_from;
    v3_path_ = (dir_ / "deepseek-v3-nextn.gguf").string();
    write_random_model(v3, v3_path_);

    // The glm4moe file with output_norm and the MTP block's shared_head_norm zeroed: every logit
    // of both heads is 0, so greedy decoding and every MTP draft are token 0 (the first maximum),
    // and drafts are accepted.
    constant_path_ = (dir_ / "glm-nextn-constant.gguf").string();
    fs::copy_file(path_, constant_path_);
    zero_tensors(constant_path_, {"output_norm.weight", "blk.2.nextn.shared_head_norm.weight"});
  }

  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<int32_t> prompt() { return prompt40(); }

  static inline fs::path dir_;
  static inline std::string path_, plain_path_, v3_path_, constant_path_;
};

void check_forward(const std::string& path, const std::vector<int32_t>& p) {
  auto file = gguf::File::open(path);
  auto model = load_model(*file);
  model->load_mtp(*file);
  const HParams& hp = model->hparams();
  const int64_t d = hp.n_embd;
  ThreadPool pool(2);
  auto experts = make_in_place_store(model->expert_layout(), "ram");
  const int n = static_cast<int>(p.size());

  // The main pass: `hidden` is the final residual before the output norm; head_rows() gives what
  // the head multiplies (its output_norm), which MTP starts from.
  auto kv = model->make_kv_cache(64);
  Batch b;
  for (int i = 0; i < n; ++i) b.add(p[i], i, 0, true);
  std::vector<float> hidden, logits;
  model->forward_stage(pool, b, *kv, *experts, hidden, logits);
  ASSERT_EQ(hidden.size(), static_cast<size_t>(n * d));
  const std::vector<float> out_norm = tensor_f32(*file, "output_norm.weight");
  const std::vector<float> embd = tensor_f32(*file, "token_embd.weight");
  const std::vector<float> head =
      file->find_tensor("output.weight") ? tensor_f32(*file, "output.weight") : embd;
  std::vector<float> head_in(n * d);
  model->head_rows(pool, hidden.data(), n, head_in.data());
  for (int t : {0, n - 1}) {
    const std::vector<double> h = rms_norm(hidden.data() + t * d, out_norm.data(), d, hp.rms_eps);
    for (int64_t i = 0; i < d; ++i) ASSERT_NEAR(head_in[t * d + i], h[i], 1e-5) << "row " << t;
    for (int v = 0; v < hp.n_vocab; v += 97) {
      double z = 0;
      for (int64_t i = 0; i < d; ++i) z += h[i] * head[v * d + i];
      EXPECT_NEAR(logits[t * hp.n_vocab + v], z, 1e-3) << "row " << t << " token " << v;
    }
  }

  // MTP over rows 0..n−2: row t = head input t with token t + 1 at position t. The hook gives
  // the projected input and the block's output; the projection, the normed output and the
  // logits are recomputed here from the file's tensors.
  const std::string blk = "blk." + std::to_string(hp.n_layer) + ".nextn.";
  const std::vector<float> eh = tensor_f32(*file, blk + "eh_proj.weight");  // (2·d, d)
  const std::vector<float> en = tensor_f32(*file, blk + "enorm.weight");
  const std::vector<float> hn = tensor_f32(*file, blk + "hnorm.weight");
  const std::vector<float> sh = tensor_f32(*file, blk + "shared_head_norm.weight");
  auto mkv = model->make_mtp_kv_cache(64);
  Batch mb;
  for (int t = 0; t + 1 < n; ++t) mb.add(p[t + 1], t, 0, true);
  std::vector<float> proj, block_out, mout, mlogits;
  const ActivationHook hook = [&](const char* name, int il, const float* data, int64_t rows,
                                  int64_t cols) {
    EXPECT_EQ(il, hp.n_layer);
    if (std::strcmp(name, "mtp_eh_proj") == 0) proj.assign(data, data + rows * cols);
    if (std::strcmp(name, "l_out") == 0) block_out.assign(data, data + rows * cols);
  };
  model->forward_mtp(pool, mb, head_in.data(), *mkv, *experts, mout, mlogits, &hook);
  ASSERT_EQ(mlogits.size(), static_cast<size_t>((n - 1) * hp.n_vocab));
  ASSERT_EQ(proj.size(), static_cast<size_t>((n - 1) * d));
  ASSERT_EQ(block_out.size(), mout.size());
  EXPECT_EQ(mkv->length(0), n - 1);
  for (int t : {0, n / 2, n - 2}) {
    // Embedding half first: eh_proj · [enorm(embed(token t+1)); hnorm(head input t)].
    std::vector<double> cat = rms_norm(embd.data() + p[t + 1] * d, en.data(), d, hp.rms_eps);
    const std::vector<double> hh = rms_norm(head_in.data() + t * d, hn.data(), d, hp.rms_eps);
    cat.insert(cat.end(), hh.begin(), hh.end());
    for (int64_t o = 0; o < d; ++o) {
      double z = 0;
      for (int64_t i = 0; i < 2 * d; ++i) z += cat[i] * eh[o * 2 * d + i];
      ASSERT_NEAR(proj[t * d + o], z, 1e-4) << "row " << t << " output " << o;
    }
    // The output: shared_head_norm of the block's; logits: the main head over it.
    const std::vector<double> y = rms_norm(block_out.data() + t * d, sh.data(), d, hp.rms_eps);
    for (int64_t i = 0; i < d; ++i) ASSERT_NEAR(mout[t * d + i], y[i], 1e-5) << "row " << t;
    for (int v = 0; v < hp.n_vocab; v += 61) {
      double z = 0;
      for (int64_t i = 0; i < d; ++i) z += y[i] * head[v * d + i];
      ASSERT_NEAR(mlogits[t * hp.n_vocab + v], z, 1e-3) << "row " << t << " token " << v;
    }
  }

  // The cache: the same rows evaluated one at a time give the same draft at every row.
  auto kv1 = model->make_mtp_kv_cache(64);
  for (int t = 0; t + 1 < n; ++t) {
    Batch one;
    one.add(p[t + 1], t, 0, true);
    std::vector<float> o1, l1;
    model->forward_mtp(pool, one, head_in.data() + t * d, *kv1, *experts, o1, l1);
    float max_diff = 0;
    for (int v = 0; v < hp.n_vocab; ++v)
      max_diff = std::max(max_diff, std::fabs(l1[v] - mlogits[t * hp.n_vocab + v]));
    EXPECT_LT(max_diff, 1e-3f) << "row " << t;
    EXPECT_EQ(argmax(l1.data(), hp.n_vocab), argmax(mlogits.data() + t * hp.n_vocab, hp.n_vocab))
        << "row " << t;
  }
}

TEST_F(MtpModel, ForwardMatchesRecomputationFromTensors) {
  check_forward(path_, prompt());
}
TEST_F(MtpModel, DeepSeekV3ForwardMatchesRecomputationFromTensors) {
  check_forward(v3_path_, prompt());
}

void expect_identical_with_mtp(const std::string& path, ExpertMode mode,
                               const std::vector<int32_t>& prompt) {
  constexpr int kGen = 48;
  EngineOptions eo;
  eo.model_path = path;
  eo.n_ctx = 256;
  eo.experts = mode;
  eo.lock_memory = false;
  eo.draft = DraftMode::kMtp;
  auto engine = Engine::load(eo);
  const GenerateResult plain =
      engine->new_session()->generate(prompt, greedy(kGen, DraftMode::kNone), {});
  auto session = engine->new_session();
  const GenerateResult mtp = session->generate(prompt, greedy(kGen, DraftMode::kMtp), {});
  std::printf("[%s] MTP: %d drafted, %d accepted, %d forward passes for %d tokens\n",
              expert_mode_name(mode), mtp.n_drafted, mtp.n_accepted, mtp.n_steps, kGen);
  EXPECT_EQ(plain.n_drafted, 0);
  EXPECT_EQ(mtp.tokens, plain.tokens);
  EXPECT_GT(mtp.n_drafted, 0);
  EXPECT_EQ(mtp.n_steps + mtp.n_accepted, kGen);
  EXPECT_EQ(session->tokens().size(), prompt.size() + kGen - 1);
  // A follow-up prompt reuses the session's context; its generation stays exact too.
  std::vector<int32_t> more = session->tokens();
  more.insert(more.end(), prompt.begin(), prompt.begin() + 8);
  const GenerateResult again = session->generate(more, greedy(16, DraftMode::kMtp), {});
  const GenerateResult again_plain =
      engine->new_session()->generate(more, greedy(16, DraftMode::kNone), {});
  EXPECT_EQ(again.tokens, again_plain.tokens);
  EXPECT_GT(again.n_drafted, 0);
}

TEST_F(MtpModel, GreedyOutputIsIdenticalWithMtpDrafts) {
  expect_identical_with_mtp(path_, ExpertMode::kRam, prompt());
}

// The MTP block's routed experts stream through the same store as the main layers'.
TEST_F(MtpModel, GreedyOutputIsIdenticalWithMtpDraftsStreamed) {
  expect_identical_with_mtp(path_, ExpertMode::kStream, prompt());
}

TEST_F(MtpModel, DeepSeekV3GreedyOutputIsIdenticalWithMtpDrafts) {
  expect_identical_with_mtp(v3_path_, ExpertMode::kRam, prompt());
}

// Accepted MTP drafts: several tokens per verify pass, the MTP cache caught up over the accepted
// rows each step.
TEST_F(MtpModel, AcceptedMtpDraftsGiveSeveralTokensPerPass) {
  constexpr int kGen = 40;
  EngineOptions eo;
  eo.model_path = constant_path_;
  eo.n_ctx = 256;
  eo.draft = DraftMode::kMtp;
  auto engine = Engine::load(eo);
  const GenerateResult plain =
      engine->new_session()->generate(prompt(), greedy(kGen, DraftMode::kNone), {});
  const GenerateResult mtp =
      engine->new_session()->generate(prompt(), greedy(kGen, DraftMode::kMtp), {});
  std::printf("MTP: %d drafted, %d accepted, %d forward passes for %d tokens\n", mtp.n_drafted,
              mtp.n_accepted, mtp.n_steps, kGen);
  EXPECT_EQ(plain.tokens, std::vector<int32_t>(kGen, 0));
  EXPECT_EQ(mtp.tokens, plain.tokens);
  EXPECT_EQ(mtp.n_accepted, mtp.n_drafted);
  EXPECT_EQ(mtp.n_steps + mtp.n_accepted, kGen);
  EXPECT_LE(mtp.n_steps, kGen / 4 + 1);  // 4 drafts + 1 token per pass
}

// A context restored from disk comes without the main pass's hidden rows: that session drafts
// nothing with MTP (and stays exact) until it starts over; a new session drafts again.
TEST_F(MtpModel, RestoredContextDraftsNothingAndStaysExact) {
  EngineOptions eo;
  eo.model_path = path_;
  eo.n_ctx = 256;
  eo.draft = DraftMode::kMtp;
  auto engine = Engine::load(eo);
  const std::string state = (dir_ / "restored.kv").string();
  const std::vector<int32_t> p = prompt();
  auto first = engine->new_session();
  first->generate(p, greedy(8, DraftMode::kMtp), {});
  first->save(state);
  std::vector<int32_t> more = first->tokens();
  more.insert(more.end(), p.begin(), p.begin() + 4);
  auto restored = engine->new_session();
  ASSERT_EQ(restored->load(state), "");
  const GenerateResult r = restored->generate(more, greedy(16, DraftMode::kMtp), {});
  const GenerateResult plain =
      engine->new_session()->generate(more, greedy(16, DraftMode::kNone), {});
  EXPECT_EQ(r.tokens, plain.tokens);
  EXPECT_EQ(r.n_drafted, 0);
  restored->clear();
  const GenerateResult again = restored->generate(more, greedy(16, DraftMode::kMtp), {});
  EXPECT_EQ(again.tokens, plain.tokens);
  EXPECT_GT(again.n_drafted, 0);
}

// Temperature sampling with MTP drafts: the rejection rule runs on MTP drafts like on n-gram ones.
TEST_F(MtpModel, SamplingWithMtpDraftsAccountsEveryToken) {
  EngineOptions eo;
  eo.model_path = constant_path_;
  eo.n_ctx = 256;
  eo.draft = DraftMode::kMtp;
  auto engine = Engine::load(eo);
  GenerateOptions o = greedy(32, DraftMode::kMtp);
  o.sampling.temperature = 1.0f;
  const GenerateResult r = engine->new_session()->generate(prompt(), o, {});
  EXPECT_EQ(r.tokens.size(), 32u);
  EXPECT_GT(r.n_drafted, 0);
  EXPECT_EQ(r.n_steps + r.n_accepted, 32);
}

TEST_F(MtpModel, AutoDraftsWithMtpWhenTheFileHasIt) {
  EngineOptions eo;
  eo.model_path = path_;
  eo.n_ctx = 256;
  eo.draft = DraftMode::kAuto;
  auto engine = Engine::load(eo);
  const GenerateResult a =
      engine->new_session()->generate(prompt(), greedy(24, DraftMode::kAuto), {});
  const GenerateResult m =
      engine->new_session()->generate(prompt(), greedy(24, DraftMode::kMtp), {});
  EXPECT_EQ(a.tokens, m.tokens);
  EXPECT_EQ(a.n_drafted, m.n_drafted);
  EXPECT_EQ(a.n_accepted, m.n_accepted);
}

TEST_F(MtpModel, MtpWithoutNextnLayersIsAnError) {
  EngineOptions eo;
  eo.model_path = plain_path_;
  eo.n_ctx = 64;
  eo.draft = DraftMode::kMtp;
  try {
    Engine::load(eo);
    FAIL() << "loaded --draft mtp on a file without MTP layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP layers"), std::string::npos) << e.what();
  }
  // auto on such a file drafts n-grams; asking a session for mtp names the cause.
  eo.draft = DraftMode::kAuto;
  auto engine = Engine::load(eo);
  try {
    engine->new_session()->generate(prompt(), greedy(4, DraftMode::kMtp), {});
    FAIL() << "generated with mtp drafts without MTP layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP (nextn) layers"), std::string::npos) << e.what();
  }
  // The batch scheduler says the same.
  SchedulerOptions so;
  so.draft.mode = DraftMode::kMtp;
  try {
    Scheduler scheduler(*engine, so);
    FAIL() << "a scheduler with mtp drafts without MTP layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP (nextn) layers"), std::string::npos) << e.what();
  }
}

// The final event of a submitted request.
GenerateResult wait_done(const Submission& s) {
  CompletionEvent ev;
  while (!s.handle->next(ev, std::chrono::milliseconds(100)) ||
         ev.kind == CompletionEvent::Kind::kText) {
  }
  EXPECT_EQ(ev.kind, CompletionEvent::Kind::kDone) << ev.text;
  return ev.result;
}

// The batch scheduler drafts with MTP per slot (each slot its drafter, fed from the batched
// pass's hidden rows): three requests at once, then a follow-up reusing a slot's context, give
// plain decoding's tokens; on the constant-head file every draft stands.
TEST_F(MtpModel, SchedulerDraftsWithMtpPerSlot) {
  for (const std::string* path : {&path_, &constant_path_}) {
    EngineOptions eo;
    eo.model_path = *path;
    eo.n_ctx = 256;
    eo.draft = DraftMode::kMtp;
    auto engine = Engine::load(eo);
    std::vector<std::vector<int32_t>> prompts = {prompt(), prompt(), prompt()};
    prompts[1].resize(prompts[1].size() / 2);
    prompts[2].push_back(prompts[2][1]);
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : prompts)
      plain.push_back(engine->new_session()->generate(p, greedy(24, DraftMode::kNone), {}).tokens);
    // A follow-up extends request 0's context (in its slot, below): drafts go on from kept rows.
    std::vector<int32_t> more = prompts[0];
    more.insert(more.end(), plain[0].begin(), plain[0].end() - 1);
    more.push_back(prompts[0][2]);
    const std::vector<int32_t> more_plain =
        engine->new_session()->generate(more, greedy(16, DraftMode::kNone), {}).tokens;
    SchedulerOptions so;
    so.n_parallel = 3;
    so.draft = greedy(24, DraftMode::kMtp).draft;
    Scheduler scheduler(*engine, so);
    std::vector<Submission> subs;
    for (const auto& p : prompts)
      subs.push_back(scheduler.submit({.prompt = p, .options = greedy(24, DraftMode::kMtp)}));
    for (size_t i = 0; i < subs.size(); ++i) {
      ASSERT_EQ(subs[i].status, SubmitStatus::kOk) << subs[i].message;
      EXPECT_EQ(wait_done(subs[i]).tokens, plain[i]) << *path << " request " << i;
    }
    const GenerateResult follow =
        wait_done(scheduler.submit({.prompt = more, .options = greedy(16, DraftMode::kMtp)}));
    EXPECT_EQ(follow.tokens, more_plain);
    EXPECT_GT(follow.n_drafted, 0);
    const SchedulerStats st = scheduler.stats();
    std::printf("%s: %llu drafted, %llu accepted\n", path->c_str(),
                static_cast<unsigned long long>(st.drafted_tokens),
                static_cast<unsigned long long>(st.accepted_tokens));
    EXPECT_GT(st.drafted_tokens, 0u);
    if (path == &constant_path_) {
      EXPECT_EQ(st.accepted_tokens, st.drafted_tokens);
    }
  }
}

}  // namespace
