// The MTP (nextn) block of generated files with one nextn layer, glm4moe (GLM-4.5) and deepseek2
// (DeepSeek V3 layout): its arithmetic against a recomputation from the file's tensors
// (concatenation order, norms, head), and its batched rows against row-by-row evaluation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "model/gen/gen_model.h"
#include "model/model.h"
#include "quant/dequant.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

// 2-layer glm4moe and deepseek2 files with one nextn layer (F32 weights, so the recomputation
// below is exact up to summation order), written once.
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

  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<int32_t> prompt() {
    std::vector<int32_t> p;
    for (int i = 0; i < 40; ++i) p.push_back((i * 37 + 11) % 200);
    return p;
  }

  static inline fs::path dir_;
  static inline std::string path_, v3_path_;
};

std::vector<float> tensor_f32(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  std::vector<float> out(t.n_elements());
  for (int64_t r = 0; r < t.n_rows(); ++r)
    dequantize_row(t.type, t.data + r * t.row_bytes(), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

std::vector<double> rms_norm(const float* x, const std::vector<float>& w, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double s = 1.0 / std::sqrt(ss / n + eps);
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * w[i];
  return y;
}

int32_t argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

void check_forward(const std::string& path, const std::vector<int32_t>& p) {
  auto file = gguf::File::open(path);
  auto model = load_model(*file);
  model->load_mtp(*file);
  const HParams& hp = model->hparams();
  const int64_t d = hp.n_embd;
  ThreadPool pool(2);
  auto experts = make_in_place_store(model->expert_layout(), "ram");
  const int n = static_cast<int>(p.size());

  // The main pass: `hidden` is the final residual before the output norm (its norm and the head
  // give the logits), which MTP starts from.
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
  {
    const std::vector<double> h = rms_norm(hidden.data() + (n - 1) * d, out_norm, d, hp.rms_eps);
    for (int v = 0; v < hp.n_vocab; v += 97) {
      double z = 0;
      for (int64_t i = 0; i < d; ++i) z += h[i] * head[v * d + i];
      EXPECT_NEAR(logits[(n - 1) * hp.n_vocab + v], z, 1e-3) << "token " << v;
    }
  }

  // MTP over rows 0..n−2: row t = hidden t with token t + 1 at position t. The hook gives the
  // projected input and the block's output; both are recomputed here from the file's tensors.
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
  model->forward_mtp(pool, mb, hidden.data(), *mkv, *experts, mout, mlogits, &hook);
  ASSERT_EQ(mlogits.size(), static_cast<size_t>((n - 1) * hp.n_vocab));
  ASSERT_EQ(proj.size(), static_cast<size_t>((n - 1) * d));
  EXPECT_EQ(block_out, mout);
  EXPECT_EQ(mkv->length(0), n - 1);
  for (int t : {0, n / 2, n - 2}) {
    // Embedding half first: eh_proj · [enorm(embed(token t+1)); hnorm(hidden t)].
    std::vector<double> cat = rms_norm(embd.data() + p[t + 1] * d, en, d, hp.rms_eps);
    const std::vector<double> hh = rms_norm(hidden.data() + t * d, hn, d, hp.rms_eps);
    cat.insert(cat.end(), hh.begin(), hh.end());
    for (int64_t o = 0; o < d; ++o) {
      double z = 0;
      for (int64_t i = 0; i < 2 * d; ++i) z += cat[i] * eh[o * 2 * d + i];
      ASSERT_NEAR(proj[t * d + o], z, 1e-4) << "row " << t << " output " << o;
    }
    // Logits: the main head over shared_head_norm of the block's output.
    const std::vector<double> y = rms_norm(mout.data() + t * d, sh, d, hp.rms_eps);
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
    model->forward_mtp(pool, one, hidden.data() + t * d, *kv1, *experts, o1, l1);
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

}  // namespace
