// An expert-parallel rank's experts in RAM are a packed copy (make_packed_store): the copies must
// be the file's bytes, every shape and bias carried over, so the forward pass computes the same
// bits as with every expert read in place; experts the rank does not own stay in place.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "gguf/gguf.h"
#include "model/archs/registry.h"
#include "model/model.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

uint64_t matrix_bytes(const MatView& v) { return v.row_stride * static_cast<uint64_t>(v.n_out); }

void expect_same_matrix(const MatView& a, const MatView& b, const char* what) {
  EXPECT_EQ(a.type, b.type) << what;
  EXPECT_EQ(a.n_in, b.n_in) << what;
  EXPECT_EQ(a.n_out, b.n_out) << what;
  ASSERT_EQ(a.row_stride, b.row_stride) << what;
  EXPECT_EQ(std::memcmp(a.data, b.data, matrix_bytes(a)), 0) << what;
}

void expect_same_bias(const float* a, const float* b, int64_t n, const char* what) {
  ASSERT_EQ(a == nullptr, b == nullptr) << what;
  if (a) {
    EXPECT_EQ(std::memcmp(a, b, n * sizeof(float)), 0) << what;
  }
}

class PackedStore : public testing::TestWithParam<const char*> {};

TEST_P(PackedStore, HandsOutCopiesOfOwnedExpertsAndTheSameLogits) {
  const fs::path path = fs::path(SLUICE_TESTDATA) / "reference" / (std::string(GetParam()) + ".gguf");
  ASSERT_TRUE(fs::exists(path)) << path << " is missing";
  auto file = gguf::File::open(path.string());
  auto model = load_model(*file);
  const ExpertLayout& layout = model->expert_layout();
  // Every other expert, shifted by layer: owned and unowned experts interleave in every tensor.
  std::vector<uint8_t> owned(layout.layers.size() * layout.n_expert, 0);
  int n_owned = 0;
  for (size_t il = 0; il < layout.layers.size(); ++il)
    for (int e = 0; e < layout.n_expert; ++e)
      if (layout.has_layer(static_cast<int>(il)) && (e + il) % 2 == 0) {
        owned[il * layout.n_expert + e] = 1;
        ++n_owned;
      }
  ASSERT_GT(n_owned, 0);
  auto packed = make_packed_store(layout, owned, "ram");
  EXPECT_NE(packed->describe().find(fmt::format("{} experts copied", n_owned)), std::string::npos)
      << packed->describe();

  for (int il = 0; il < static_cast<int>(layout.layers.size()); ++il) {
    if (!layout.has_layer(il)) continue;
    std::vector<int32_t> ids(layout.n_expert);
    for (int e = 0; e < layout.n_expert; ++e) ids[e] = e;
    packed->begin(il, ids);
    int index = 0, handed = 0;
    ExpertWeights w;
    while (packed->next(&index, &w)) {
      ++handed;
      const int e = ids[index];
      const ExpertWeights ref = layout.in_place(il, e);
      const std::string where = fmt::format("layer {} expert {}", il, e);
      expect_same_matrix(w.gate, ref.gate, (where + " gate").c_str());
      expect_same_matrix(w.up, ref.up, (where + " up").c_str());
      expect_same_matrix(w.down, ref.down, (where + " down").c_str());
      expect_same_bias(w.gate_bias, ref.gate_bias, ref.gate.n_out, (where + " gate bias").c_str());
      expect_same_bias(w.up_bias, ref.up_bias, ref.up.n_out, (where + " up bias").c_str());
      expect_same_bias(w.down_bias, ref.down_bias, ref.down.n_out, (where + " down bias").c_str());
      if (owned[static_cast<size_t>(il) * layout.n_expert + e]) {
        EXPECT_NE(w.gate.data, ref.gate.data) << where << ": owned, but not copied";
        EXPECT_NE(w.down.data, ref.down.data) << where << ": owned, but not copied";
      } else {
        EXPECT_EQ(w.gate.data, ref.gate.data) << where << ": not owned, but copied";
      }
    }
    packed->end();
    EXPECT_EQ(handed, layout.n_expert);
  }

  // The forward pass over the copies computes the in-place pass's bits.
  auto in_place = make_in_place_store(layout, "ram");
  std::vector<float> want, got;
  ThreadPool pool(2);
  for (ExpertStore* store : {in_place.get(), packed.get()}) {
    auto kv = model->make_kv_cache(16);
    Batch batch;
    for (int i = 0; i < 6; ++i) batch.add(5 + 11 * i, i, 0, true);
    model->forward(pool, batch, *kv, *store, store == packed.get() ? got : want);
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// gpt-oss: expert biases; mixtral: one tensor per expert and role.
INSTANTIATE_TEST_SUITE_P(Reference, PackedStore,
                         testing::Values("qwen3moe-f32", "gptoss-f32", "mixtral-f32", "deepseek2-q8_0"));

}  // namespace
