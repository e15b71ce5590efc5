// The copies that fill and empty staging slots (base/stream_copy.h, base/slot_writer.h): every
// byte lands, none around the destination is touched, for every relative alignment of source
// and destination and sizes around each path's thresholds; and the choice between ordinary and
// streaming stores, fed with the costs of the host's two phases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/slot_writer.h"
#include "base/stream_copy.h"

namespace chorus::internal {
namespace {

using Copy = void (*)(void*, const void*, size_t);

uint8_t* OnALine(uint8_t* p) {
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
}

void ExpectExactCopies(Copy copy, const std::string& name,
                       std::vector<size_t> sizes = {0, 1, 15, 63, 64, 65, 255, 256, 257, 2047, 2048,
                                                    2049, 4099, 65536, 100003}) {
  constexpr size_t kGuard = 128;
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

// Three writers, one per choice; the timed one picks its stores as it goes, which the copies
// must not show.
SlotWriter g_auto_writer;
SlotWriter g_cached_writer(StoreChoice::kCached);
SlotWriter g_stream_writer(StoreChoice::kStream);

TEST(Copies, SlotWritersAreExact) {
  // The small sizes, and around the size from which a writer may stream.
  std::vector<size_t> sizes = {0, 1, 63, 65, 4099, 100003};
  for (size_t bytes :
       {SlotWriter::kMinBytes - 1, SlotWriter::kMinBytes, SlotWriter::kMinBytes + 77}) {
    sizes.push_back(bytes);
  }
  for (int round = 0; round < 2; ++round) {  // the timed writer's clock is read every 4th write
    ExpectExactCopies([](void* d, const void* s, size_t n) { g_auto_writer.Copy(d, s, n); },
                      "SlotWriter (auto)", sizes);
  }
  ExpectExactCopies([](void* d, const void* s, size_t n) { g_cached_writer.Copy(d, s, n); },
                    "SlotWriter (cached)", sizes);
  ExpectExactCopies([](void* d, const void* s, size_t n) { g_stream_writer.Copy(d, s, n); },
                    "SlotWriter (stream)", sizes);
}

TEST(Copies, ProducedBlocksAreExact) {
  // A block a kernel writes, at an offset within a line, in both stores.
  for (SlotWriter* writer : {&g_cached_writer, &g_stream_writer, &g_auto_writer}) {
    for (size_t offset : {size_t{0}, size_t{4}, size_t{60}}) {
      std::vector<uint8_t> out(SlotWriter::kBlockBytes + 128, 0xA5);
      uint8_t* at = OnALine(out.data()) + offset;
      const size_t bytes = SlotWriter::kBlockBytes - 8;
      writer->Produce(at, bytes, [&](void* dst) {
        auto* d = static_cast<uint8_t*>(dst);
        for (size_t i = 0; i < bytes; ++i) d[i] = static_cast<uint8_t>(i * 7 + 1);
      });
      size_t wrong = 0;
      for (size_t i = 0; i < bytes; ++i) wrong += at[i] != static_cast<uint8_t>(i * 7 + 1);
      EXPECT_EQ(wrong, 0u) << "offset " << offset;
      EXPECT_EQ(at[bytes], 0xA5) << "offset " << offset;
      if (offset > 0) {
        EXPECT_EQ(at[-1], 0xA5) << "offset " << offset;
      }
    }
  }
}

TEST(Copies, OnlyWholeBlocksAreTimed) {
  SlotWriter writer;
  std::vector<uint8_t> out(SlotWriter::kBlockBytes);
  const auto fill = [&](size_t bytes) {
    writer.Produce(out.data(), bytes, [&](void* dst) { std::memset(dst, 7, bytes); });
  };
  for (int i = 0; i < 100; ++i) fill(SlotWriter::kBlockBytes / 2 - 1);  // segments' tails
  EXPECT_EQ(writer.choice().cost(StoreChoice::kCached), 0);
  EXPECT_EQ(writer.choice().cost(StoreChoice::kStream), 0);
  for (unsigned i = 0; i < 2 * SlotWriter::kTimeEvery; ++i) fill(SlotWriter::kBlockBytes);
  EXPECT_GT(writer.choice().cost(StoreChoice::kCached) + writer.choice().cost(StoreChoice::kStream),
            0);
}

TEST(Copies, FixedSlotWritersStreamOnlyLargeMessagesAndOnlyWhenAskedTo) {
  EXPECT_TRUE(g_stream_writer.Streams(SlotWriter::kMinBytes));
  EXPECT_FALSE(g_stream_writer.Streams(SlotWriter::kMinBytes - 1));
  EXPECT_FALSE(g_cached_writer.Streams(size_t{1} << 30));
}

// The costs measured on this host (ns per KiB of a 256 KiB copy into a slot): ordinary stores
// 24 while the vCPUs share a cache and 400 while they do not; streaming stores 40-80 in both.
constexpr double kFastCached = 24, kSlowCached = 400, kStreamed = 50;

using Time = StoreChoice::Clock::time_point;
Time At(int ms) { return Time{} + std::chrono::hours(1) + std::chrono::milliseconds(ms); }

// One copy at `ms` with the costs of the phase; returns the mode the choice picked for it.
StoreChoice::Mode CopyAt(StoreChoice& choice, int ms, double cached_cost, double stream_cost) {
  const StoreChoice::Mode mode = choice.Next(At(ms));
  choice.Note(mode, mode == StoreChoice::kCached ? cached_cost : stream_cost);
  return mode;
}

TEST(StoreChoice, ProbesStreamingFirstThenKeepsOrdinaryStoresWhileTheyAreCheap) {
  StoreChoice choice;
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);
  EXPECT_EQ(CopyAt(choice, 0, kFastCached, kStreamed), StoreChoice::kStream);  // the first probe
  for (int ms = 1; ms < 100; ++ms) {
    EXPECT_EQ(CopyAt(choice, ms, kFastCached, kStreamed), StoreChoice::kCached) << ms;
  }
  EXPECT_EQ(CopyAt(choice, 100, kFastCached, kStreamed), StoreChoice::kStream);  // next probe
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);
  EXPECT_EQ(choice.cost(StoreChoice::kCached), kFastCached);
  EXPECT_EQ(choice.cost(StoreChoice::kStream), kStreamed);
}

TEST(StoreChoice, StreamsWithinAFewCopiesOfTheSlowPhaseAndReturnsAtTheFirstProbeAfterIt) {
  StoreChoice choice;
  for (int ms = 0; ms < 50; ++ms) CopyAt(choice, ms, kFastCached, kStreamed);
  ASSERT_EQ(choice.chosen(), StoreChoice::kCached);
  // The phase turns slow: a handful of copies (each a quarter of the way, at most 4x) suffice.
  int copies = 0;
  while (choice.chosen() == StoreChoice::kCached && copies < 20) {
    CopyAt(choice, 50, kSlowCached, kStreamed);
    ++copies;
  }
  EXPECT_EQ(choice.chosen(), StoreChoice::kStream);
  EXPECT_LE(copies, 5);
  // Streaming until the next probe of ordinary stores, which still finds them slow.
  for (int ms = 51; ms < 100; ++ms) {
    EXPECT_EQ(CopyAt(choice, ms, kSlowCached, kStreamed), StoreChoice::kStream) << ms;
  }
  EXPECT_EQ(CopyAt(choice, 100, kSlowCached, kStreamed), StoreChoice::kCached);
  EXPECT_EQ(choice.chosen(), StoreChoice::kStream);
  // The phase turns fast again: the next probe, 100 ms on, finds out at once.
  for (int ms = 101; ms < 200; ++ms) {
    EXPECT_EQ(CopyAt(choice, ms, kFastCached, kStreamed), StoreChoice::kStream) << ms;
  }
  EXPECT_EQ(CopyAt(choice, 200, kFastCached, kStreamed), StoreChoice::kCached);
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);
}

TEST(StoreChoice, OneInterruptedCopyDoesNotSwitch) {
  StoreChoice choice;
  for (int ms = 0; ms < 50; ++ms) CopyAt(choice, ms, kFastCached, kStreamed);
  CopyAt(choice, 50, 1e6, kStreamed);  // a copy the scheduler stopped for a whole slice
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);
  for (int ms = 51; ms < 60; ++ms) CopyAt(choice, ms, kFastCached, kStreamed);
  EXPECT_EQ(choice.cost(StoreChoice::kCached), kFastCached);
}

TEST(StoreChoice, CostsBetweenTheTwoRatiosKeepTheModeChosen) {
  StoreChoice choice;
  for (int ms = 0; ms < 50; ++ms) CopyAt(choice, ms, 1.8 * kStreamed, kStreamed);
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);  // 1.8x: not yet worth streaming
  for (int i = 0; i < 20; ++i) CopyAt(choice, 50, kSlowCached, kStreamed);
  ASSERT_EQ(choice.chosen(), StoreChoice::kStream);
  EXPECT_EQ(CopyAt(choice, 150, 1.8 * kStreamed, kStreamed), StoreChoice::kCached);  // probe
  EXPECT_EQ(choice.chosen(), StoreChoice::kStream);  // 1.8x: not yet worth going back
  EXPECT_EQ(CopyAt(choice, 250, 1.4 * kStreamed, kStreamed), StoreChoice::kCached);
  EXPECT_EQ(choice.chosen(), StoreChoice::kCached);
}

}  // namespace
}  // namespace chorus::internal
