// Structural checks of the i-quant tables: the reference vectors only touch a few hundred grid
// entries, so an edited or mistyped entry elsewhere would go unnoticed without these. Every grid
// is a set of distinct points over a fixed value alphabet, and all but IQ1's are stored sorted.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <set>
#include <vector>

#include "quant/iq_grids.h"

using namespace sluice;

namespace {

template <typename T>
void check_grid(const char* name, const T* grid, size_t n, int width, std::set<int> alphabet,
                bool sorted, bool is_signed) {
  SCOPED_TRACE(name);
  std::set<T> seen(grid, grid + n);
  EXPECT_EQ(seen.size(), n) << "duplicate points";
  if (sorted) {
    EXPECT_TRUE(std::is_sorted(grid, grid + n));
  }
  std::set<int> used;
  for (size_t i = 0; i < n; ++i)
    for (int k = 0; k < width; ++k) {
      const uint8_t b = iq::grid_byte(grid[i], k);
      used.insert(is_signed ? static_cast<int8_t>(b) : b);
    }
  EXPECT_EQ(used, alphabet);
}

}  // namespace

TEST(IqGrids, PointsAreDistinctOverTheirAlphabet) {
  const std::set<int> iq2 = {8, 25, 43};
  check_grid("iq2xxs", iq::kIq2xxsGrid, 256, 8, iq2, true, false);
  check_grid("iq2xs", iq::kIq2xsGrid, 512, 8, iq2, true, false);
  check_grid("iq2s", iq::kIq2sGrid, 1024, 8, iq2, true, false);
  check_grid("iq3xxs", iq::kIq3xxsGrid, 256, 4, {4, 12, 20, 28, 36, 44, 52, 62}, true, false);
  check_grid("iq3s", iq::kIq3sGrid, 512, 4, {1, 3, 5, 7, 9, 11, 13, 15}, true, false);
  check_grid("iq1s", iq::kIq1sGrid, 2048, 8, {-1, 0, 1}, false, true);
}

TEST(IqGrids, SignCodesHaveEvenParity) {
  for (unsigned i = 0; i < 128; ++i) {
    EXPECT_EQ(iq::kSignsIq2[i] & 127u, i);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(iq::kSignsIq2[i])) % 2, 0) << i;
  }
}

TEST(IqGrids, FourBitTablesAreMonotone) {
  EXPECT_TRUE(std::is_sorted(iq::kValuesIq4nl.begin(), iq::kValuesIq4nl.end()));
  // MXFP4: codes 0..7 are +0..+6 (doubled), 8..15 the same magnitudes negated.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(iq::kValuesMxfp4[i + 8], -iq::kValuesMxfp4[i]);
  EXPECT_TRUE(std::is_sorted(iq::kValuesMxfp4.begin(), iq::kValuesMxfp4.begin() + 8));
}
