// Speculative decoding parts: n-gram drafts, the adaptive draft length, the sampler's rejection
// rule (its output follows the target distribution whatever the draft) and Generation::take.
#include "runtime/draft.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "gguf/gguf.h"
#include "runtime/request.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

using namespace sluice;

namespace {

// Candidates the policy declines, each decoded by a one-row pass of `plain` seconds, before it
// drafts again (the drafts it then takes in *k).
int declines_before_draft(DraftPolicy& p, int match, int available, int* k, double plain = 0.010) {
  for (int n = 0; n < 10000; ++n) {
    if ((*k = p.choose(match, available)) > 0) return n;
    p.record(0, 0, plain);
  }
  return -1;
}

TEST(NgramDraft, ProposesWhatFollowedTheLatestOccurrenceOfTheSuffix) {
  // Suffix (7, 8) occurs at 1 and 5; the latest (5) was followed by 9, 7, 8, the context's end:
  // the text has repeated with period 3 since, so the draft goes on around the cycle.
  const std::vector<int32_t> ctx = {1, 7, 8, 2, 3, 7, 8, 9, 7, 8};
  EXPECT_EQ(ngram_draft(ctx, 4).tokens, (std::vector<int32_t>{9, 7, 8, 9}));
  EXPECT_EQ(ngram_draft(ctx, 8).tokens, (std::vector<int32_t>{9, 7, 8, 9, 7, 8, 9, 7}));
  EXPECT_EQ(ngram_draft(ctx, 4).match, 2);
  EXPECT_EQ(ngram_draft(ctx, 2).tokens, (std::vector<int32_t>{9, 7}));
  EXPECT_EQ(ngram_draft(ctx, 0).tokens, std::vector<int32_t>{});
  // A longer match wins over a more recent shorter one: (3, 7, 8) matched at 4 proposes 9.
  const std::vector<int32_t> ctx2 = {3, 7, 8, 5, 3, 7, 8, 9, 1, 7, 8, 6, 3, 7, 8};
  EXPECT_EQ(ngram_draft(ctx2, 1).tokens, std::vector<int32_t>{9});
  EXPECT_EQ(ngram_draft(ctx2, 1).match, 3);
  // No recurring suffix of two tokens: nothing (a single repeated token is not enough).
  EXPECT_EQ(ngram_draft(std::vector<int32_t>{1, 2, 3, 4, 2, 5}, 4).match, 0);
  EXPECT_EQ(ngram_draft(std::vector<int32_t>{}, 4).tokens, std::vector<int32_t>{});
}

TEST(DraftPolicy, DraftsOnlyWhenExpectedTokensBeatTheMeasuredCost) {
  DraftPolicy d({DraftMode::kNgram, 6, 1});
  // Two one-row passes of 10 ms are measured before any draft.
  EXPECT_EQ(d.choose(4, 6), 0);
  d.record(0, 0, 0.010);
  EXPECT_EQ(d.choose(4, 6), 0);
  d.record(0, 0, 0.010);
  EXPECT_EQ(d.choose(0, 0), 0);  // no candidate
  // The first verify pass drafts the fewest, to measure: a row of 9 ms (RAM-like cost).
  EXPECT_EQ(d.choose(4, 6), 1);
  d.record(1, 0, 0.019);
  EXPECT_NEAR(d.cost(1), 1.9, 1e-9);
  // Nothing stood: a ≈ 0.3 for 4-token matches, and E(k)/cost(k) < 1.05 for every k. It is
  // probed now and then, so that the estimate follows the text, but only while what the probes
  // lost (9 ms each here; not the first step's, which may have run cold) is within
  // 1/kProbeShare of the time.
  double total = 0.039, lost = 0;
  int k = 0;
  for (int i = 0; i < 20; ++i) {
    const int n = declines_before_draft(d, 4, 6, &k);
    ASSERT_GE(n, 1);
    EXPECT_EQ(k, 1);  // a rejected probe starts the probes' length over
    total += 0.010 * n;
    EXPECT_LE(lost, total / DraftPolicy::kProbeShare);
    d.record(k, 0, 0.019);
    total += 0.019;
    lost += 0.009;
  }
  EXPECT_GT(lost / total, 0.5 / DraftPolicy::kProbeShare);  // but it does keep probing
  // Cheap verify rows (streamed experts: the rows share the reads) make the same drafts pay.
  DraftPolicy s({DraftMode::kNgram, 6, 1});
  s.record(0, 0, 0.100);
  s.record(0, 0, 0.100);
  EXPECT_EQ(s.choose(3, 6), 1);
  s.record(1, 1, 0.102);  // 2 ms per drafted row
  EXPECT_NEAR(s.cost(6), 1.12, 1e-9);
  EXPECT_GT(s.choose(3, 6), 1);
  // Reliable matches earn longer drafts than unreliable ones under the same cost.
  DraftPolicy r({DraftMode::kNgram, 8, 1});
  r.record(0, 0, 0.010);
  r.record(0, 0, 0.010);
  EXPECT_EQ(r.choose(4, 8), 1);
  r.record(1, 1, 0.012);  // 2 ms per row; 4-token matches all stood
  for (int i = 0; i < 6; ++i) {
    const int k = r.choose(4, 8);
    EXPECT_GE(k, 1);
    r.record(k, k, 0.010 + k * 0.002);
  }
  EXPECT_GT(r.acceptance(4), 0.9);
  EXPECT_GE(r.choose(4, 8), 6);
  EXPECT_LE(r.choose(2, 8), 2);  // 2-token matches: only the prior a = 0.5
  EXPECT_EQ(DraftPolicy({DraftMode::kNgram, 0, 0}).choose(4, 6), 0);
  EXPECT_THROW(check_draft_options({DraftMode::kNgram, 65, 1}), Error);
  EXPECT_THROW(check_draft_options({DraftMode::kNgram, 4, 5}), Error);
}

// Text that turns predictable (a greedy loop after a rejected stretch) wins drafting back within a
// few probes: a rejected probe doubles the pause (at least kProbeShare times what it cost beyond
// a plain pass), a probe that stood halves it and doubles the next probe's drafts when drafts
// that stand would pay; when even they would not, probes back off all the same.
TEST(DraftPolicy, AProbeThatStoodHalvesThePause) {
  // Two seconds of plain passes first, so that the probes' losses stay within their share of the
  // time and the pauses alone decide.
  DraftPolicy d({DraftMode::kNgram, 6, 1});
  for (int i = 0; i < 200; ++i) d.record(0, 0, 0.010);
  EXPECT_EQ(d.choose(4, 6), 1);
  d.record(1, 0, 0.015);  // a drafted row costs half a pass, and nothing stood
  int k = 0;
  EXPECT_EQ(declines_before_draft(d, 4, 6, &k), 1);  // the pause doubles
  EXPECT_EQ(k, 1);
  d.record(1, 0, 0.015);
  EXPECT_EQ(declines_before_draft(d, 4, 6, &k), 3);  // and doubles
  d.record(1, 1, 0.015);                              // stood
  EXPECT_EQ(declines_before_draft(d, 4, 6, &k), 1);  // half the pause, twice the drafts
  EXPECT_EQ(k, 2);
  d.record(2, 0, 0.020);
  EXPECT_EQ(declines_before_draft(d, 4, 6, &k), 3);
  EXPECT_EQ(k, 1);  // a rejected probe starts the probes' length over
  // A drafted row costing a whole pass: 7 tokens for the cost of 7 passes never pays.
  DraftPolicy e({DraftMode::kNgram, 6, 1});
  for (int i = 0; i < 200; ++i) e.record(0, 0, 0.010);
  EXPECT_EQ(e.choose(4, 6), 1);
  e.record(1, 1, 0.020);  // the first step stood: no pause
  EXPECT_EQ(declines_before_draft(e, 4, 6, &k), 0);
  e.record(1, 1, 0.020);  // stood, but could not have paid: the pause doubles
  EXPECT_EQ(declines_before_draft(e, 4, 6, &k), 1);
  EXPECT_EQ(k, 2);
}

// A step's cost has a fixed part (a verify pass at all; an MTP block's pass per draft is not
// fixed, but its first step catches up on the whole prompt): 8 ms here, plus 2 ms per drafted row,
// against 10 ms one-row passes. The cold first step does not stick, and probes that stand
// measure longer drafts, whose fixed part is spread over more rows, until the longest is drafted.
// (Ten seconds of plain passes first: the cold step's loss is then within the probes' share.)
TEST(DraftPolicy, ProbesThatStandGrowAndMeasureLongDrafts) {
  DraftPolicy p({DraftMode::kMtp, 4, 1});
  for (int i = 0; i < 1000; ++i) p.record(0, 0, 0.010);
  ASSERT_EQ(p.choose(kMtpMatch, 4), 1);
  p.record(1, 1, 0.050);  // cold
  EXPECT_NEAR(p.cost(kMtpMatch, 1), 5.0, 1e-9);
  EXPECT_NEAR(p.cost(kMtpMatch, 4), 17.0, 1e-9);  // scaled from k = 1 as if every row cost 40 ms
  std::vector<int> drafted;
  for (int i = 0; i < 60; ++i) {
    const int k = p.choose(kMtpMatch, 4);
    drafted.push_back(k);
    p.record(k, k, k == 0 ? 0.010 : 0.018 + 0.002 * k);
  }
  EXPECT_NEAR(p.cost(kMtpMatch, 1), 2.0, 1e-9);  // the second sample replaced the cold one
  EXPECT_NEAR(p.cost(kMtpMatch, 4), 2.6, 1e-9);  // measured, not extrapolated
  EXPECT_EQ(drafted.back(), 4);
  // Once drafting 4 pays it keeps drafting 4: the last third of the candidates all drafted 4.
  EXPECT_EQ(std::count(drafted.end() - 20, drafted.end(), 4), 20);
}

// One stalled pass (the OS preempted it) counts as a pass kOutlier times the mean: it does not
// make every draft look cheap for the rest of the request.
TEST(DraftPolicy, AStalledPassMovesTheMeanOnlySoFar) {
  DraftPolicy d({DraftMode::kNgram, 6, 1});
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  ASSERT_EQ(d.choose(4, 6), 1);
  d.record(1, 1, 0.016);
  EXPECT_NEAR(d.cost(1), 1.6, 1e-9);
  d.record(0, 0, 0.200);  // a 200 ms one-row pass: counted as 20 ms
  EXPECT_NEAR(d.cost(1), 0.016 / 0.0125, 1e-9);
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  EXPECT_NEAR(d.cost(1), 1.6, 0.15);  // back near the true ratio after a few passes
}

// A drafted length is at most twice the longest measured: one verify step that ran faster than the
// mean one-row pass (noise) does not make sixteen drafted rows look free. And a length's first
// sample counts at most kOutlier times what the measured lengths predict, so one stalled step
// does not price it out for good.
TEST(DraftPolicy, LengthsGrowByDoublingAndOneStallDoesNotPriceALengthOut) {
  DraftPolicy d({DraftMode::kNgram, 16, 1});
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  ASSERT_EQ(d.choose(2, 16), 1);
  d.record(1, 1, 0.008);  // within noise of a pass: cost(1) reads as 1
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  EXPECT_EQ(d.choose(2, 16), 2);  // not 16, though 16 rows extrapolate as free
  d.record(2, 2, 0.500);          // a stall: counted as twice the extrapolated 10 ms
  EXPECT_NEAR(d.cost(2, 2), 2.0, 1e-9);
  d.record(2, 2, 0.012);  // its second sample replaces the first
  EXPECT_NEAR(d.cost(2, 2), 1.2, 1e-9);
  EXPECT_EQ(d.choose(2, 16), 4);
}

// Under --draft auto each drafter has its own costs: the MTP block's drafts cost a pass of the
// block and the head each, lookup's nothing. Repeated text (a lookup match that keeps standing)
// is drafted by lookup, without the MTP block's first step (a catch-up on the whole prompt) ever
// being spent; text without a match is drafted by the MTP block while its drafts pay; when
// neither pays nothing is drafted but both are probed now and then.
TEST(DraftPolicy, AutoTakesTheDrafterThatPaysMore) {
  DraftPolicy d({DraftMode::kAuto, 8, 1});
  d.record(0, 0, 0.010);
  d.record(0, 0, 0.010);
  const std::array<DraftOffer, 2> both = {DraftOffer{4, 8}, DraftOffer{kMtpMatch, 8}};
  const std::array<DraftOffer, 2> mtp_only = {DraftOffer{0, 0}, DraftOffer{kMtpMatch, 8}};
  // Lookup is measured first, with the fewest drafts.
  DraftChoice c = d.choose(both);
  EXPECT_EQ(c.match, 4);
  EXPECT_EQ(c.k, 1);
  d.record(1, 1, 0.012);  // a lookup draft: 2 ms per verified row
  EXPECT_NEAR(d.cost(4, 1), 1.2, 1e-9);
  // It stood and pays: lookup drafts, longer and longer, and the MTP block is left alone.
  for (int i = 0; i < 8; ++i) {
    c = d.choose(both);
    EXPECT_EQ(c.match, 4);
    d.record(c.k, c.k, 0.010 + 0.002 * c.k);
  }
  EXPECT_GE(c.k, 6);
  EXPECT_NEAR(d.cost(kMtpMatch, 1), 1.0, 1e-9);  // never measured
  // No lookup match: the MTP block, expected to lose about a pass, is measured only once the
  // request has run kProbeShare passes; a short request never pays for its first step.
  const auto plain_until_drafted = [&](std::span<const DraftOffer> offers) {
    int n = 0;
    for (c = d.choose(offers); c.k == 0 && n < 10000; c = d.choose(offers), ++n) d.record(0, 0, 0.010);
    return n;
  };
  EXPECT_GE(plain_until_drafted(mtp_only), 15);
  EXPECT_EQ(c.match, kMtpMatch);
  EXPECT_EQ(c.k, 1);
  d.record(1, 1, 0.050);  // cold: the block caught up on the prompt
  // Its 30 ms beyond two plain passes count as lost: the block waits until the request has run
  // kProbeShare times as long.
  EXPECT_GE(plain_until_drafted(mtp_only), 60);
  EXPECT_EQ(c.match, kMtpMatch);
  d.record(c.k, c.k, 0.010 + 0.006 * c.k);  // 6 ms per draft: its block pass, then the verified row
  EXPECT_NEAR(d.cost(kMtpMatch, 1), 1.6, 1e-9);
  for (int i = 0; i < 4; ++i) {
    c = d.choose(mtp_only);
    EXPECT_EQ(c.match, kMtpMatch);
    EXPECT_GE(c.k, 1);
    d.record(c.k, c.k, 0.010 + 0.006 * c.k);
  }
  // MTP drafts that never stand: it stops drafting them, and probes them only after pauses.
  int drafted = 0;
  for (int i = 0; i < 40; ++i) {
    c = d.choose(mtp_only);
    drafted += c.k > 0;
    d.record(c.k, 0, c.k == 0 ? 0.010 : 0.010 + 0.006 * c.k);
  }
  EXPECT_LT(drafted, 12);
  EXPECT_LT(d.acceptance(kMtpMatch), 0.5);  // below the prior
  // Lookup still pays where it matches.
  EXPECT_EQ(d.choose(both).match, 4);
}

// --draft-fixed (not adaptive): every step drafts all candidates up to max, from the first pass
// on, however much the verify passes cost and however few drafts stand, where the adaptive policy
// declines after the same timings; the MTP block drafts when it offers. It still measures, under
// the drafter that drafted.
TEST(DraftPolicy, FixedDraftsEveryCandidateWhateverTheCost) {
  DraftPolicy fixed({DraftMode::kNgram, 6, 2, false});
  DraftPolicy adaptive({DraftMode::kNgram, 6, 2});
  EXPECT_EQ(fixed.choose(4, 6), 6);  // no warm-up passes
  EXPECT_EQ(adaptive.choose(4, 6), 0);
  EXPECT_EQ(fixed.choose(4, 10), 6);  // at most max
  EXPECT_EQ(fixed.choose(2, 3), 3);   // every candidate
  EXPECT_EQ(fixed.choose(4, 1), 0);   // fewer than min
  EXPECT_EQ(fixed.choose(0, 0), 0);   // none
  // One-row passes of 10 ms, verify passes of 15 ms per drafted row, no draft ever standing.
  int fixed_drafts = 0, adaptive_drafts = 0;
  for (int i = 0; i < 50; ++i) {
    int k = fixed.choose(4, 6);
    fixed_drafts += k == 6;
    fixed.record(k, 0, 0.010 + 0.015 * k);
    k = adaptive.choose(4, 6);
    adaptive_drafts += k > 0;
    adaptive.record(k, 0, 0.010 + 0.015 * k);
  }
  EXPECT_EQ(fixed_drafts, 50);
  EXPECT_LT(adaptive_drafts, 10);
  EXPECT_LT(fixed.acceptance(4), 0.1);
  EXPECT_EQ(fixed.choose(4, 6), 6);
  // Under auto the MTP block's candidates, else lookup's; offers below min are passed over.
  DraftPolicy automatic({DraftMode::kAuto, 8, 2, false});
  const std::array<DraftOffer, 2> both = {DraftOffer{4, 8}, DraftOffer{kMtpMatch, 3}};
  DraftChoice c = automatic.choose(both);
  EXPECT_EQ(c.match, kMtpMatch);
  EXPECT_EQ(c.k, 3);
  automatic.record(3, 3, 0.050);
  EXPECT_GT(automatic.acceptance(kMtpMatch), 0.5);  // counted for the block, not for lookup
  EXPECT_DOUBLE_EQ(automatic.acceptance(4), 0.5);
  const std::array<DraftOffer, 2> short_mtp = {DraftOffer{3, 8}, DraftOffer{kMtpMatch, 1}};
  c = automatic.choose(short_mtp);
  EXPECT_EQ(c.match, 3);
  EXPECT_EQ(c.k, 8);
}

// Chi-square statistic of observed counts against probabilities `p` (n draws).
double chi_square(const std::map<int32_t, int>& seen, const std::vector<double>& p, int n) {
  double x2 = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    if (p[t] == 0) continue;
    const double e = p[t] * n;
    const auto it = seen.find(static_cast<int32_t>(t));
    const double o = it == seen.end() ? 0 : it->second;
    x2 += (o - e) * (o - e) / e;
  }
  return x2;
}

TEST(SampleDraft, KeepsTheTargetDistributionForAnyDraft) {
  // Temperature 1, no filters: p = softmax(logits).
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 1.5f, -0.5f};
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i]);
  for (double& x : p) x /= sum;
  SamplingParams sp;
  sp.temperature = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = 7;
  constexpr int kDraws = 20000;
  // 4 degrees of freedom: 18.47 is the 0.1 % critical value. A sampler that always takes the
  // draft, or draws the residual with the draft left in, lands far above it.
  for (int32_t draft : {1, 4, 9 /* outside the vocabulary: never accepted */}) {
    Sampler s(sp);
    std::map<int32_t, int> seen;
    int accepted = 0;
    for (int i = 0; i < kDraws; ++i) {
      bool acc = false;
      ++seen[s.sample_draft(logits, draft, &acc)];
      accepted += acc;
    }
    EXPECT_LT(chi_square(seen, p, kDraws), 18.47) << "draft " << draft;
    const double p_draft = draft < 5 ? p[draft] : 0.0;
    EXPECT_NEAR(static_cast<double>(accepted) / kDraws, p_draft, 0.02) << "draft " << draft;
  }
  // Greedy: the argmax, accepted only when it is the draft.
  sp.temperature = 0;
  Sampler g(sp);
  bool acc = true;
  EXPECT_EQ(g.sample_draft(logits, 3, &acc), 1);
  EXPECT_FALSE(acc);
  EXPECT_EQ(g.sample_draft(logits, 1, &acc), 1);
  EXPECT_TRUE(acc);
}

TEST(GenerationTake, SamplesWhileDraftsMatchAndStopsAtLimits) {
  auto file = gguf::File::open(std::string(SLUICE_SOURCE_DIR) + "/models/sluice-tiny-moe.gguf");
  auto tk = Tokenizer::from_gguf(*file);
  const int n_vocab = tk->n_vocab();
  const int32_t a = tk->encode(" the", false, false).back(),
                b = tk->encode(" cat", false, false).back();
  auto rows = [&](std::vector<int32_t> picks) {
    std::vector<float> l(picks.size() * n_vocab, 0.0f);
    for (size_t i = 0; i < picks.size(); ++i) l[i * n_vocab + picks[i]] = 10.0f;
    return l;
  };
  GenerateOptions o;
  o.max_tokens = 10;
  o.sampling.temperature = 0;
  const std::vector<int32_t> prompt = {a};
  Generation gen(*tk, o, prompt, 0);
  // Drafts a, b, a: the rows pick a, b, b — two accepted, the third row's b replaces the draft.
  const std::vector<int32_t> drafts = {a, b, a};
  std::string text;
  Generation::Step st =
      gen.take(rows({a, b, b, a}), drafts, 1, 100, [&](const Generation::Sampled& s) {
        text += s.text;
        return true;
      });
  EXPECT_EQ(st.n_accepted, 2);
  EXPECT_EQ(st.tokens, (std::vector<int32_t>{a, b, b}));
  EXPECT_EQ(text, tk->decode({a, b, b}));
  // All drafts accepted: the extra row gives one more token. The context limit stops the step:
  // 4 positions used, context 6 → two more tokens.
  st = gen.take(rows({a, a, a}), std::vector<int32_t>{a, a}, 4, 6, {});
  EXPECT_EQ(st.tokens.size(), 2u);
  EXPECT_TRUE(gen.finished());
  std::string tail;
  const GenerateResult r = gen.finish(&tail);
  EXPECT_EQ(r.n_drafted, 5);
  EXPECT_EQ(r.n_accepted, 4);
  EXPECT_EQ(r.n_steps, 2);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  // max_tokens bounds the drafts: with 5 of 6 tokens generated, none are proposed. The first
  // two passes decode one token each (the policy times them before it drafts).
  GenerateOptions o4 = o;
  o4.max_tokens = 6;
  o4.draft.mode = DraftMode::kNgram;
  Generation g4(*tk, o4, prompt, 0);
  const std::vector<int32_t> ctx = {a, b, a, b, a};
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(g4.propose(ctx, 100).empty());
    g4.take(rows({a}), std::vector<int32_t>{}, 5, 100, {});
  }
  EXPECT_FALSE(g4.propose(ctx, 100).empty());
  g4.take(rows({a, b, a}), std::vector<int32_t>{a, b}, 5, 100, {});
  EXPECT_TRUE(g4.propose(ctx, 100).empty());
  // A cancelled emit ends the step.
  Generation g5(*tk, o, prompt, 0);
  st = g5.take(rows({a, a, a}), std::vector<int32_t>{a, a}, 1, 100,
               [](const Generation::Sampled&) { return false; });
  EXPECT_EQ(st.tokens.size(), 1u);
  EXPECT_TRUE(g5.finished());
}

}  // namespace
