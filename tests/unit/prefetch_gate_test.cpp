// The prefetch gate admits a (layer, rank) only while its measured precision holds up, and keeps
// exploring so that a layer whose routing turns predictable is admitted again.
#include "experts/prefetch_gate.h"

#include <gtest/gtest.h>

using namespace sluice;

namespace {

// One token's prefetch call for layer il at `rank`: issued when admitted, used when `right`.
// Returns whether it was admitted.
bool call(PrefetchGate& g, int il, int rank, bool right) {
  g.start_call(il);
  if (!g.admits(il, rank)) return false;
  g.issued(il, rank);
  if (right) g.used(il, rank);
  return true;
}

TEST(PrefetchGate, EachLayerIsJudgedByItsOwnPrecision) {
  PrefetchGate g(2);
  // Layer 0's first choice is wrong nine times in ten, layer 1's right nine times in ten (the
  // lookahead into layer 1 of sluice-moe-128 against its later layers).
  int admitted0 = 0, admitted1 = 0;
  for (int t = 0; t < 400; ++t) {
    admitted0 += call(g, 0, 0, t % 10 == 0);
    admitted1 += call(g, 1, 0, t % 10 != 0);
  }
  EXPECT_EQ(admitted1, 400);
  // Layer 0 is read while it has too few samples to judge, then only on exploring calls.
  EXPECT_LT(admitted0, 400 / 8 + 40);
  EXPECT_GE(admitted0, 400 / 8);
}

TEST(PrefetchGate, ALayerThatTurnsPredictableIsAdmittedAgain) {
  PrefetchGate g(1);
  for (int t = 0; t < 200; ++t) call(g, 0, 3, false);
  g.start_call(0);
  bool shut = !g.admits(0, 3);
  EXPECT_TRUE(shut);
  // Its guesses now hold: the exploring calls raise the precision until every call is admitted.
  int last_refused = -1;
  for (int t = 0; t < 400; ++t)
    if (!call(g, 0, 3, true)) last_refused = t;
  EXPECT_GE(last_refused, 0);
  EXPECT_LT(last_refused, 300);
  // Other ranks of the layer kept their own statistics.
  g.start_call(0);
  EXPECT_TRUE(g.admits(0, 0));
}

// A layer's unordered sets (several rows' guesses: a draft-verify pass) are judged by their own
// precision: wrong ones are refused except on exploring calls, while a layer whose sets are used
// keeps reading them.
TEST(PrefetchGate, SetsAreJudgedPerLayer) {
  PrefetchGate g(2);
  int admitted0 = 0, admitted1 = 0;
  for (int t = 0; t < 400; ++t) {
    for (int il = 0; il < 2; ++il) {
      g.start_call(il);
      for (int m = 0; m < 6; ++m) {  // six members per set: one used in layer 0, five in layer 1
        if (!g.admits_set(il)) continue;
        g.issued_set(il);
        if (il == 0 ? m == 0 : m > 0) g.used_set(il);
        (il == 0 ? admitted0 : admitted1) += 1;
      }
    }
  }
  EXPECT_EQ(admitted1, 400 * 6);
  EXPECT_LT(admitted0, 400 * 6 / 8 + 60);
}

}  // namespace
