// TouchedPages: zeroed, every byte usable, the end guarded, moves that keep one owner.
#include "base/pages.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <utility>

namespace chorus::internal {
namespace {

void ExpectZeroThenWritable(TouchedPages& pages) {
  ASSERT_NE(pages.get(), nullptr);
  for (size_t i = 0; i < pages.size(); i += 997) ASSERT_EQ(pages.get()[i], std::byte{0}) << i;
  ASSERT_EQ(pages.get()[pages.size() - 1], std::byte{0});
  pages.get()[0] = std::byte{1};
  pages.get()[pages.size() - 1] = std::byte{2};
  EXPECT_EQ(pages.get()[pages.size() - 1], std::byte{2});
}

TEST(TouchedPages, SmallAndLargeAreZeroedAndWritableToTheLastByte) {
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{100000}, TouchedPages::kHugePage,
                       TouchedPages::kHugePage * 3 + 12345}) {
    TouchedPages pages(bytes);
    EXPECT_EQ(pages.size(), bytes);
    ExpectZeroThenWritable(pages);
  }
}

TEST(TouchedPages, LargeOnesStartOnAHugePageBoundary) {
  TouchedPages pages(size_t{8} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages.get()) % TouchedPages::kHugePage, 0u);
}

TEST(TouchedPages, MovesHandOverTheBytes) {
  TouchedPages a(size_t{4} << 20);
  std::byte* bytes = a.get();
  TouchedPages b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.get(), bytes);
  TouchedPages c(16);
  c = std::move(b);
  EXPECT_EQ(c.get(), bytes);
  ExpectZeroThenWritable(c);
}

TEST(TouchedPagesDeathTest, AWritePastTheLastPageOfALargeOneFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TouchedPages pages(size_t{4} << 20);  // a whole number of pages: the guard follows the end
  EXPECT_DEATH(pages.get()[pages.size()] = std::byte{1}, "");
}

}  // namespace
}  // namespace chorus::internal
