// StepOrders, what a pipeline's stage 0 sends its scheduler's followers before each step: every
// field survives the trip, and bytes that were not written whole fail by name instead of being
// read as orders.
#include "runtime/step_orders.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace sluice {
namespace {

StepOrders sample_orders() {
  StepOrders o;
  o.cancelled = {3};
  o.timed_out = {0, 7};
  StepOrders::Start a;
  a.slot = 5;
  a.request.prompt = {1, 2, 3, 40000};
  a.request.options.max_tokens = 77;
  a.request.options.logprobs = -1;
  a.request.options.sampling.temperature = 0.7f;
  a.request.options.sampling.top_k = 12;
  a.request.options.sampling.top_p = 0.9f;
  a.request.options.sampling.min_p = 0.01f;
  a.request.options.sampling.repeat_penalty = 1.1f;
  a.request.options.sampling.presence_penalty = 0.25f;
  a.request.options.sampling.frequency_penalty = -0.5f;
  a.request.options.sampling.penalty_last_n = 33;
  a.request.options.sampling.seed = 0x123456789abcdefULL;
  a.request.options.sampling.logit_bias = {{7, -100.0f}, {3, 2.5f}};
  a.request.options.stop = {"\n\n", "", "END"};
  a.request.options.stop_at_eog = false;
  a.request.options.grammar = "root ::= [0-9]+ \"\\n\"\n";
  o.started.push_back(a);
  StepOrders::Start b;
  b.slot = 0;
  b.request.prompt = {9};
  o.started.push_back(b);
  return o;
}

TEST(StepOrders, EveryFieldSurvivesTheTrip) {
  const StepOrders o = sample_orders();
  const StepOrders d = decode_orders(encode_orders(o));
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.cancelled, o.cancelled);
  EXPECT_EQ(d.timed_out, o.timed_out);
  ASSERT_EQ(d.started.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const CompletionRequest &x = o.started[i].request, &y = d.started[i].request;
    EXPECT_EQ(d.started[i].slot, o.started[i].slot);
    EXPECT_EQ(y.prompt, x.prompt);
    EXPECT_EQ(y.options.max_tokens, x.options.max_tokens);
    EXPECT_EQ(y.options.logprobs, x.options.logprobs);
    const SamplingOptions &p = x.options.sampling, &q = y.options.sampling;
    EXPECT_EQ(q.temperature, p.temperature);
    EXPECT_EQ(q.top_k, p.top_k);
    EXPECT_EQ(q.top_p, p.top_p);
    EXPECT_EQ(q.min_p, p.min_p);
    EXPECT_EQ(q.repeat_penalty, p.repeat_penalty);
    EXPECT_EQ(q.presence_penalty, p.presence_penalty);
    EXPECT_EQ(q.frequency_penalty, p.frequency_penalty);
    EXPECT_EQ(q.penalty_last_n, p.penalty_last_n);
    EXPECT_EQ(q.seed, p.seed);
    EXPECT_EQ(q.logit_bias, p.logit_bias);
    EXPECT_EQ(y.options.stop, x.options.stop);
    EXPECT_EQ(y.options.stop_at_eog, x.options.stop_at_eog);
    EXPECT_EQ(y.options.grammar, x.options.grammar);
  }
  StepOrders stop;
  stop.stop = true;
  EXPECT_TRUE(decode_orders(encode_orders(stop)).stop);
  EXPECT_TRUE(decode_orders(encode_orders(StepOrders{})).empty());
}

TEST(StepOrders, TornOrPaddedBytesFail) {
  const std::vector<uint8_t> bytes = encode_orders(sample_orders());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::span<const uint8_t> torn(bytes.data(), n);
    EXPECT_THROW(decode_orders(torn), Error) << n << " of " << bytes.size() << " bytes";
  }
  std::vector<uint8_t> padded = bytes;
  padded.push_back(0);
  EXPECT_THROW(decode_orders(padded), Error);
}

}  // namespace
}  // namespace sluice
