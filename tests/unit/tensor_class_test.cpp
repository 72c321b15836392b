// Tensor-name classification: every tensor of every reference model gets its expected class, plus
// names of layouts the reference set lacks (legacy Mixtral experts, fused gate_up, MTP layers).
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "gguf/gguf.h"
#include "plan/tensor_class.h"
#include "test_util.h"

using namespace sluice;

namespace {

// The expected class of a reference-model tensor, written as a table of patterns independent of
// the classifier's own parsing.
TensorClass expected_class(const std::string& name) {
  static const std::vector<std::pair<std::regex, TensorClass>> table = {
      {std::regex(R"(blk\.\d+\.ffn_(gate|up|down)_exps\.(weight|bias))"), TensorClass::RoutedExpert},
      {std::regex(R"(blk\.\d+\.ffn_(gate|up|down)_shexp\.weight)"), TensorClass::SharedExpert},
      {std::regex(R"(blk\.\d+\.(attn_norm|ffn_norm|attn_q_norm|attn_k_norm|post_attention_norm|attn_q_a_norm|attn_kv_a_norm)\.weight)"), TensorClass::Norm},
      {std::regex(R"(output_norm\.weight)"), TensorClass::Norm},
      {std::regex(R"(blk\.\d+\.(ffn_gate_inp\.(weight|bias)|exp_probs_b\.bias))"), TensorClass::Router},
      {std::regex(R"(blk\.\d+\.attn_(q|k|v|output)\.(weight|bias))"), TensorClass::Attention},
      {std::regex(R"(blk\.\d+\.attn_(q_a|q_b|kv_a_mqa|k_b|v_b|sinks)\.weight)"), TensorClass::Attention},
      {std::regex(R"(blk\.\d+\.ffn_(gate|up|down)\.weight)"), TensorClass::DenseFfn},
      {std::regex(R"(token_embd\.weight)"), TensorClass::Embedding},
      {std::regex(R"(output\.weight)"), TensorClass::Output},
  };
  for (const auto& [re, c] : table)
    if (std::regex_match(name, re)) return c;
  ADD_FAILURE() << "no expectation for reference tensor " << name;
  return TensorClass::Other;
}

}  // namespace

TEST(TensorClass, EveryReferenceModelTensor) {
  const char* files[] = {"reference/qwen3moe-f32.gguf",   "reference/mixtral-f32.gguf",
                         "reference/qwen3moe-256-q4km.gguf", "reference/deepseek2-q8_0.gguf",
                         "reference/gptoss-mxfp4.gguf",   "reference/glm4moe-f32.gguf",
                         "models/stories260K.gguf"};
  std::map<TensorClass, int> seen;
  for (const char* rel : files) {
    auto f = gguf::File::open(test::testdata(rel));
    for (const auto& t : f->tensors()) {
      TensorClass c = classify_tensor(t.name);
      EXPECT_EQ(tensor_class_name(c), tensor_class_name(expected_class(t.name))) << rel << ": " << t.name;
      ++seen[c];
      auto slice = expert_slice(t);
      EXPECT_EQ(slice.has_value(), c == TensorClass::RoutedExpert) << t.name;
      if (slice) {
        EXPECT_EQ(slice->n_experts, t.ne[t.n_dims - 1]) << t.name;
        EXPECT_EQ(slice->bytes_per_expert * static_cast<uint64_t>(slice->n_experts), t.nbytes) << t.name;
      }
    }
  }
  // Every class the reference set can exercise was exercised.
  for (TensorClass c : {TensorClass::RoutedExpert, TensorClass::SharedExpert, TensorClass::Attention,
                        TensorClass::Norm, TensorClass::Router, TensorClass::DenseFfn,
                        TensorClass::Embedding, TensorClass::Output})
    EXPECT_GT(seen[c], 0) << tensor_class_name(c);
}

TEST(TensorClass, LayoutsBeyondTheReferenceSet) {
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.3.weight"), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_down.0.weight"), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate_up_exps.weight"), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate_inp_shexp.weight"), TensorClass::SharedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate_up.weight"), TensorClass::DenseFfn);
  EXPECT_EQ(classify_tensor("blk.7.attn_kv_b.weight"), TensorClass::Attention);
  EXPECT_EQ(classify_tensor("blk.7.attn_qkv.bias"), TensorClass::Attention);
  EXPECT_EQ(classify_tensor("blk.7.layer_output_norm.weight"), TensorClass::Norm);
  EXPECT_EQ(classify_tensor("blk.46.nextn.eh_proj.weight"), TensorClass::Other);
  EXPECT_EQ(classify_tensor("per_layer_token_embd.weight"), TensorClass::Embedding);
  EXPECT_EQ(classify_tensor("per_layer_proj_norm.weight"), TensorClass::Norm);
  EXPECT_EQ(classify_tensor("token_embd_norm.weight"), TensorClass::Norm);
  EXPECT_EQ(classify_tensor("output.bias"), TensorClass::Output);
  EXPECT_EQ(classify_tensor("rope_freqs.weight"), TensorClass::Other);
  EXPECT_EQ(classify_tensor("blk.x.ffn_up_exps.weight"), TensorClass::Other);
  EXPECT_EQ(classify_tensor("blk.3"), TensorClass::Other);
  EXPECT_EQ(classify_tensor(""), TensorClass::Other);
  // The trailing MTP block is Other entirely, routed experts included; earlier blocks are not.
  EXPECT_EQ(classify_tensor("blk.46.ffn_up_exps.weight", 46), TensorClass::Other);
  EXPECT_EQ(classify_tensor("blk.46.attn_q.weight", 46), TensorClass::Other);
  EXPECT_EQ(classify_tensor("blk.45.ffn_up_exps.weight", 46), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("output.weight", 46), TensorClass::Output);
}

// A family sluice runs says which tensors are its routed experts (its registry entry); the name
// patterns of every layout answer only for other architectures.
TEST(TensorClass, RoutedExpertsAreTheFamilysRule) {
  for (const char* arch : {"qwen3moe", "deepseek2", "deepseek4", "glm4moe", "gpt-oss", "llama"}) {
    SCOPED_TRACE(arch);
    EXPECT_EQ(classify_tensor("blk.7.ffn_up_exps.weight", -1, arch), TensorClass::RoutedExpert);
    EXPECT_EQ(classify_tensor("blk.7.ffn_down_exps.bias", -1, arch), TensorClass::RoutedExpert);
    // No family sluice runs loads a fused gate_up expert tensor: it would never be streamed.
    EXPECT_EQ(classify_tensor("blk.7.ffn_gate_up_exps.weight", -1, arch), TensorClass::Other);
    EXPECT_EQ(classify_tensor("blk.46.ffn_up_exps.weight", 46, arch), TensorClass::Other);
  }
  // One tensor per expert is llama's (Mixtral) alone; to qwen3moe ffn_gate.3 is no expert.
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.3.weight", -1, "llama"), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.3.weight", -1, "qwen3moe"), TensorClass::DenseFfn);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.x.weight", -1, "llama"), TensorClass::DenseFfn);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.weight", -1, "llama"), TensorClass::DenseFfn);
  // An architecture sluice cannot run: the patterns.
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate_up_exps.weight", -1, "mystery"), TensorClass::RoutedExpert);
  EXPECT_EQ(classify_tensor("blk.7.ffn_gate.3.weight", -1, "mystery"), TensorClass::RoutedExpert);
}

TEST(TensorClass, LayerOf) {
  EXPECT_EQ(layer_of("blk.0.attn_q.weight"), 0);
  EXPECT_EQ(layer_of("blk.61.ffn_up_exps.weight"), 61);
  EXPECT_FALSE(layer_of("token_embd.weight"));
  EXPECT_FALSE(layer_of("blk..attn_q.weight"));
  EXPECT_FALSE(layer_of("blk.-1.attn_q.weight"));
  EXPECT_FALSE(layer_of("blk.99999999999.attn_q.weight"));
  EXPECT_FALSE(layer_of("blk.3"));
}

TEST(TensorClass, ExpertSliceOfLegacyAndMergedTensors) {
  gguf::TensorInfo legacy;
  legacy.name = "blk.2.ffn_up.5.weight";
  legacy.n_dims = 2;
  legacy.ne = {128, 64, 1, 1};
  legacy.nbytes = 128 * 64 * 4;
  auto s = expert_slice(legacy);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->first_expert, 5);
  EXPECT_EQ(s->n_experts, 1);
  EXPECT_EQ(s->bytes_per_expert, legacy.nbytes);

  gguf::TensorInfo merged;
  merged.name = "blk.2.ffn_down_exps.weight";
  merged.type = GgmlType::Q8_0;
  merged.n_dims = 3;
  merged.ne = {64, 128, 16, 1};
  merged.nbytes = 139264;
  s = expert_slice(merged);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->first_expert, 0);
  EXPECT_EQ(s->n_experts, 16);
  EXPECT_EQ(s->bytes_per_expert, 8704u);

  merged.name = "blk.2.attn_q.weight";
  EXPECT_FALSE(expert_slice(merged));
}
