// The copies that fill and empty staging slots (base/stream_copy.h): every byte lands, none
// around the destination is touched, for every relative alignment of source and destination
// and sizes around each path's thresholds.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/stream_copy.h"

namespace chorus::internal {
namespace {

using Copy = void (*)(void*, const void*, size_t);

uint8_t* OnALine(uint8_t* p) {
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
}

void ExpectExactCopies(Copy copy, const std::string& name) {
  constexpr size_t kGuard = 128;
  const size_t sizes[] = {0,    1,    15,   63,   64,   65,   255,  256,
                          257,  2047, 2048, 2049, 4099, 65536, 100003};
  for (size_t bytes : sizes) {
    for (size_t src_offset : {size_t{0}, size_t{1}, size_t{4}, size_t{17}, size_t{63}}) {
      for (size_t dst_offset : {size_t{0}, size_t{3}, size_t{8}, size_t{32}, size_t{60}}) {
        // Buffers that start on a line, so the offsets are offsets within a line.
        const size_t total = bytes + 2 * kGuard;
        std::vector<uint8_t> src_store(total + 64), dst_store(total + 64);
        auto* src = OnALine(src_store.data());
        auto* dst = OnALine(dst_store.data());
        for (size_t i = 0; i < total; ++i) {
          src[i] = static_cast<uint8_t>(i * 131 + 7);
          dst[i] = 0xA5;
        }
        copy(dst + kGuard / 2 + dst_offset, src + src_offset, bytes);
        size_t wrong = 0;
        for (size_t i = 0; i < total; ++i) {
          const size_t at = kGuard / 2 + dst_offset;
          const uint8_t want = i >= at && i < at + bytes ? src[src_offset + (i - at)] : 0xA5;
          wrong += dst[i] != want ? 1 : 0;
        }
        EXPECT_EQ(wrong, 0u) << name << ": " << bytes << " bytes, source +" << src_offset
                             << ", destination +" << dst_offset;
      }
    }
  }
}

TEST(Copies, MisalignedCopyIsExact) { ExpectExactCopies(MisalignedCopy, "MisalignedCopy"); }
TEST(Copies, CopyBytesIsExact) { ExpectExactCopies(CopyBytes, "CopyBytes"); }
TEST(Copies, StreamCopyIsExact) { ExpectExactCopies(StreamCopy, "StreamCopy"); }

}  // namespace
}  // namespace chorus::internal
