// The slot arena of the streaming expert cache: one size class per expert size, slots sized to
// their class (not to the largest expert), the budget shared in proportion to each class's bytes
// in the file, at least one token's experts per class, never more bytes than the budget.
#include "experts/slot_arena.h"

#include <gtest/gtest.h>

#include "core/error.h"

using namespace sluice;

namespace {

// n_layer layers of n_expert experts; layer il's experts have slices of bytes[il % size] each
// (three slices, laid out back to back from an aligned start).
ExpertFileMap synthetic_map(int n_layer, int n_expert, std::vector<uint64_t> slice_bytes) {
  ExpertFileMap m;
  m.part_paths = {"unused.gguf"};
  m.n_layer = n_layer;
  m.n_expert = n_expert;
  m.ranges.resize(static_cast<size_t>(n_layer) * n_expert);
  uint64_t at = 0;
  for (int il = 0; il < n_layer; ++il)
    for (int e = 0; e < n_expert; ++e) {
      const uint64_t b = slice_bytes[il % slice_bytes.size()];
      for (int r = 0; r < 3; ++r, at += b)
        m.ranges[static_cast<size_t>(il) * n_expert + e][r] = {0, at, b};
    }
  return m;
}

TEST(SlotArena, OneClassPerExpertSizeWithinBudget) {
  // Even layers 3 × 8 KiB per expert, odd layers 3 × 32 KiB (a Q4_K layer among 2-bit ones).
  const ExpertFileMap map = synthetic_map(4, 16, {8192, 32768});
  const uint64_t small = 3 * 8192, large = 3 * 32768;
  const uint64_t budget = 10 * large + 10 * small + 5000;
  SlotArena arena(map, budget, 4, /*lock=*/false);
  ASSERT_EQ(arena.classes().size(), 2u);
  EXPECT_EQ(arena.classes()[0].slot_bytes, small);
  EXPECT_EQ(arena.classes()[1].slot_bytes, large);
  EXPECT_EQ(arena.classes()[0].n_keys, 32);
  EXPECT_EQ(arena.classes()[1].n_keys, 32);
  EXPECT_LE(arena.bytes(), budget);
  // A cache of largest-size slots would hold only budget / large = 12 experts.
  EXPECT_GT(arena.n_slots(), static_cast<int>(budget / large));
  // The budget is shared by bytes: both classes hold about the same share of their experts.
  const double share0 = static_cast<double>(arena.classes()[0].count) / 32;
  const double share1 = static_cast<double>(arena.classes()[1].count) / 32;
  EXPECT_NEAR(share0, share1, 0.15);
  for (int c = 0; c < 2; ++c) EXPECT_GE(arena.classes()[c].count, 4);
  for (int32_t k = 0; k < 64; ++k) EXPECT_EQ(arena.class_of(k), (k / 16) % 2);
  // Slots of a class are contiguous and sized to it.
  const SizeClass& c1 = arena.classes()[1];
  EXPECT_EQ(arena.data(c1.first + 1) - arena.data(c1.first), static_cast<std::ptrdiff_t>(large));
}

TEST(SlotArena, EveryClassGetsOneTokensExperts) {
  const ExpertFileMap map = synthetic_map(4, 16, {8192, 32768});
  // Room for 4 large and 4 small slots but not much more: the minimum binds for both classes.
  const uint64_t budget = 4 * 3 * 32768 + 4 * 3 * 8192 + 3 * 8192;
  SlotArena arena(map, budget, 4, false);
  EXPECT_GE(arena.classes()[0].count, 4);
  EXPECT_EQ(arena.classes()[1].count, 4);
  EXPECT_LE(arena.bytes(), budget);
}

TEST(SlotArena, ClassesMergeWhenTheirMinimumsDoNotFit) {
  const ExpertFileMap map = synthetic_map(4, 16, {8192, 32768});
  // Room for 4 large slots and 3 small ones: a class each cannot hold 4 small ones, one class of
  // large slots holds the minimum, as a single slot size always did.
  const uint64_t budget = 4 * 3 * 32768 + 3 * 3 * 8192;
  SlotArena arena(map, budget, 4, false);
  ASSERT_EQ(arena.classes().size(), 1u);
  EXPECT_EQ(arena.classes()[0].slot_bytes, 3u * 32768);
  EXPECT_EQ(arena.classes()[0].n_keys, 4 * 16);
  EXPECT_EQ(arena.n_slots(), 4);
  for (int32_t k = 0; k < 4 * 16; ++k) EXPECT_EQ(arena.class_of(k), 0);
  EXPECT_THROW(SlotArena(map, 4 * 3 * 32768 - 1, 4, false), Error);
}

TEST(SlotArena, UniformExpertsAreOneClassOfTheWidenedSize) {
  // Slices of 5000 bytes start at unaligned offsets: each is widened to whole 4 KiB pages, and
  // the class's slots fit the widest of them.
  const ExpertFileMap map = synthetic_map(2, 8, {5000});
  SlotArena arena(map, 1 << 20, 2, false);
  ASSERT_EQ(arena.classes().size(), 1u);
  uint64_t widest = 0;
  for (int32_t k = 0; k < 16; ++k) widest = std::max(widest, expert_slot_bytes(map, k));
  EXPECT_EQ(arena.classes()[0].slot_bytes, widest);
  EXPECT_EQ(arena.n_slots(), 16);  // never more slots than experts
  EXPECT_EQ(arena.bytes(), 16 * widest);
}

}  // namespace
