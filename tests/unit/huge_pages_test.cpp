// HugePageBuffer: aligned to a huge page, zero-filled, owned once (moves hand the mapping over).
#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace sluice {
namespace {

TEST(HugePageBuffer, IsAlignedZeroFilledAndWritable) {
  const uint64_t n = 3 * HugePageBuffer::kHugePage + 12345;
  HugePageBuffer b(n, "test");
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugePageBuffer::kHugePage, 0u);
  for (uint64_t i = 0; i < n; i += 4096) EXPECT_EQ(b.data()[i], std::byte{0}) << i;
  b.data()[n - 1] = std::byte{7};
  EXPECT_EQ(b.data()[n - 1], std::byte{7});
}

TEST(HugePageBuffer, MoveHandsTheMappingOver) {
  HugePageBuffer a(4096, "test");
  std::byte* p = a.data();
  p[0] = std::byte{1};
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), p);
  HugePageBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.data()[0], std::byte{1});
  EXPECT_EQ(HugePageBuffer(0, "test").data(), nullptr);
}

}  // namespace
}  // namespace sluice
