// The mailbox between two ranks (transport/control.h): credits come back through `tail` or,
// when the ranks exchange messages both ways, inside the entries of the reverse mailbox.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "transport/control.h"

namespace chorus::internal {
namespace {

constexpr int kDepth = 4;

WireMessage Numbered(uint64_t n) {
  WireMessage m;
  m.where = n;
  m.bytes = 8;
  m.tag.call_index = n;
  return m;
}

// One mailbox each way between ranks A and B.
struct Pair {
  Mailbox ab;
  Mailbox ba;
};

TEST(Mailbox, ReleasesComeBackInTheEntriesOfTheReverseMailbox) {
  auto pair = std::make_unique<Pair>();
  for (uint64_t n = 0; n < kDepth; ++n) {
    ASSERT_TRUE(pair->ab.HasCredit(kDepth));
    pair->ab.Post(Numbered(n), pair->ba.released(), kDepth);
  }
  EXPECT_FALSE(pair->ab.HasCredit(kDepth));

  // B reads and releases two of A's messages, then posts one back: it carries the two.
  WireMessage m;
  uint64_t ack = 0;
  for (uint64_t n = 0; n < 2; ++n) {
    ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth));
    EXPECT_EQ(m.where, n);
    EXPECT_EQ(ack, 0u);  // A had released nothing of B's
    pair->ab.Release(kDepth);
  }
  ASSERT_TRUE(pair->ba.HasCredit(kDepth));
  pair->ba.Post(Numbered(100), pair->ab.released(), kDepth);

  // A learns of them from the entry, before it looks at `tail` again.
  EXPECT_EQ(pair->ab.tail_seen, 0u);
  ASSERT_TRUE(pair->ba.Peek(&m, &ack, kDepth));
  EXPECT_EQ(m.where, 100u);
  EXPECT_EQ(ack, 2u);
  pair->ab.Acked(ack);
  EXPECT_EQ(pair->ab.tail_seen, 2u);
  EXPECT_TRUE(pair->ab.HasCredit(kDepth));

  // An older ack never takes credits back.
  pair->ab.Acked(1);
  EXPECT_EQ(pair->ab.tail_seen, 2u);
}

TEST(Mailbox, AnAckBeyondWhatWasPostedIsIgnored) {
  auto pair = std::make_unique<Pair>();
  for (uint64_t n = 0; n < kDepth; ++n) pair->ab.Post(Numbered(n), 0, kDepth);
  pair->ab.Acked(kDepth + 3);  // a confused or hostile receiver
  EXPECT_EQ(pair->ab.tail_seen, 0u);
  EXPECT_FALSE(pair->ab.HasCredit(kDepth));
}

TEST(Mailbox, OneWayTrafficStillReadsTail) {
  auto pair = std::make_unique<Pair>();
  for (uint64_t n = 0; n < kDepth; ++n) pair->ab.Post(Numbered(n), 0, kDepth);
  WireMessage m;
  uint64_t ack = 0;
  ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth));
  pair->ab.Release(kDepth);
  EXPECT_TRUE(pair->ab.HasCredit(kDepth));
  EXPECT_EQ(pair->ab.tail_seen, 1u);
}

// Two threads exchange numbered payloads through slots that the credits guard, both ways at
// once, with the smallest depth: a credit that came back before the slot was read would let
// the sender overwrite it (a wrong number here, a race under TSan).
TEST(Mailbox, TwoRanksExchangingThroughTwoSlotsNeverOverwriteAnUnreadOne) {
  constexpr int kSmallDepth = 2;
  constexpr uint64_t kMessages = 20000;
  struct Side {
    Mailbox out;
    uint64_t slots[kSmallDepth] = {};
  };
  auto a = std::make_unique<Side>();
  auto b = std::make_unique<Side>();
  std::atomic<bool> wrong{false};
  auto rank = [&](Side& me, Side& peer, uint64_t salt) {
    uint64_t sent = 0;
    uint64_t received = 0;
    while ((sent < kMessages || received < kMessages) && !wrong.load()) {
      bool moved = false;
      if (sent < kMessages && me.out.HasCredit(kSmallDepth)) {
        const uint64_t index = me.out.next() % kSmallDepth;
        me.slots[index] = salt + sent;
        me.out.Post(Numbered(index), peer.out.released(), kSmallDepth);
        ++sent;
        moved = true;
      }
      WireMessage m;
      uint64_t ack = 0;
      if (received < kMessages && peer.out.Peek(&m, &ack, kSmallDepth)) {
        me.out.Acked(ack);
        const uint64_t peer_salt = salt == 0 ? uint64_t{1} << 40 : 0;
        if (peer.slots[m.where] != peer_salt + received) wrong.store(true);
        peer.out.Release(kSmallDepth);
        ++received;
        moved = true;
      }
      if (!moved) std::this_thread::yield();
    }
  };
  std::thread ta([&] { rank(*a, *b, 0); });
  std::thread tb([&] { rank(*b, *a, uint64_t{1} << 40); });
  ta.join();
  tb.join();
  EXPECT_FALSE(wrong.load());
  EXPECT_TRUE(a->out.Drained());
  EXPECT_TRUE(b->out.Drained());
}

}  // namespace
}  // namespace chorus::internal
