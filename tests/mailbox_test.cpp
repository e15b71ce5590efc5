// The mailbox between two ranks (transport/control.h): credits come back through `tail` or,
// when the ranks exchange messages both ways, inside the entries of the reverse mailbox.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

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

// A small message travels inside its entry: the receiver gets a pointer into the entry, which
// holds the bytes until Release, however many bytes (0 to kInlineBytes) and whatever comes
// next; a message in a slot still comes with its `where`.
TEST(Mailbox, SmallMessagesTravelInsideTheirEntry) {
  auto pair = std::make_unique<Pair>();
  uint8_t sent[Mailbox::kInlineBytes];
  for (size_t bytes = 0; bytes <= Mailbox::kInlineBytes; ++bytes) {
    for (size_t i = 0; i < sizeof sent; ++i) sent[i] = static_cast<uint8_t>(bytes * 31 + i);
    CallTag tag;
    tag.call_index = bytes;
    tag.count = 1000 + bytes;
    pair->ab.PostInline(sent, bytes, tag, 0, kDepth);
    std::memset(sent, 0xee, sizeof sent);   // the sender may reuse its memory at once
    pair->ab.Post(Numbered(7), 0, kDepth);  // and a slot message behind it

    WireMessage m;
    uint64_t ack = 0;
    const void* in_entry = nullptr;
    ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth, &in_entry));
    ASSERT_NE(in_entry, nullptr);
    EXPECT_EQ(m.bytes, bytes);
    EXPECT_EQ(m.tag, tag);
    for (size_t i = 0; i < bytes; ++i) {
      EXPECT_EQ(static_cast<const uint8_t*>(in_entry)[i], static_cast<uint8_t>(bytes * 31 + i));
    }
    pair->ab.Release(kDepth);
    ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth, &in_entry));
    EXPECT_EQ(in_entry, nullptr);
    EXPECT_EQ(m.where, 7u);
    EXPECT_EQ(m.bytes, 8u);
    pair->ab.Release(kDepth);
  }
  EXPECT_TRUE(pair->ab.Drained());
}

// The entry carries a tag as its call index and a digest of the rest. A tag that differs from
// the expected one in any single field must still come out whole and exact: the receiver
// reads it from `tags` and can say how the calls differ.
TEST(Mailbox, ATagThatIsNotTheExpectedOneArrivesWhole) {
  CallTag base;
  base.call_index = 41;
  base.count = 1 << 20;
  base.kind = CollectiveKind::kAllGather;
  base.dtype = DataType::kFloat64;
  base.op = ReduceOp::kMax;
  base.algorithm = 3;
  base.root = 2;
  base.layout = 12345;
  std::vector<CallTag> others;
  for (int field = 0; field < 8; ++field) {
    for (uint64_t delta : {uint64_t{1}, uint64_t{2}, uint64_t{1} << 31, ~uint64_t{0}}) {
      CallTag t = base;
      switch (field) {
        case 0:
          t.call_index += delta;
          break;
        case 1:
          t.count += delta;
          break;
        case 2:
          t.kind = static_cast<CollectiveKind>(static_cast<uint8_t>(t.kind) ^ delta);
          break;
        case 3:
          t.dtype = static_cast<DataType>(static_cast<uint8_t>(t.dtype) ^ delta);
          break;
        case 4:
          t.op = static_cast<ReduceOp>(static_cast<uint8_t>(t.op) ^ delta);
          break;
        case 5:
          t.algorithm = static_cast<uint8_t>(t.algorithm ^ delta);
          break;
        case 6:
          t.root = static_cast<uint32_t>(t.root ^ delta);
          break;
        default:
          t.layout += delta;
          break;
      }
      if (t == base) continue;  // a delta that left an 8-bit field as it was
      others.push_back(t);
      if (t.call_index == base.call_index) {
        EXPECT_NE(TagDigest(t), TagDigest(base)) << "field " << field << " delta " << delta;
      }
    }
  }
  auto pair = std::make_unique<Pair>();
  const uint8_t payload[Mailbox::kInlineBytes] = {1, 2, 3};
  for (const CallTag& sent : others) {
    for (const bool in_entry : {true, false}) {
      if (in_entry) {
        pair->ab.PostInline(payload, sizeof payload, sent, 0, kDepth);
      } else {
        pair->ab.Post({8, 16, sent}, 0, kDepth);
      }
      WireMessage m;
      uint64_t ack = 0;
      const void* data = nullptr;
      ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth, &data, &base));
      EXPECT_EQ(m.tag, sent);
      EXPECT_FALSE(m.tag == base);
      EXPECT_EQ(data != nullptr, in_entry);
      pair->ab.Release(kDepth);
    }
  }
  // The expected tag comes back equal, and so does any tag with no expectation given.
  for (const CallTag* expect :
       {static_cast<const CallTag*>(&base), static_cast<const CallTag*>(nullptr)}) {
    pair->ab.PostInline(payload, 0, base, 0, kDepth);
    WireMessage m;
    uint64_t ack = 0;
    const void* data = nullptr;
    ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth, &data, expect));
    EXPECT_EQ(m.tag, base);
    pair->ab.Release(kDepth);
  }
}

// Stamps and acks keep their low 32 bits: past 2^32 messages each way, messages still arrive
// in order and acks still return exactly the credits they stand for.
TEST(Mailbox, StampsAndAcksStayExactPastTwoToThe32Messages) {
  auto pair = std::make_unique<Pair>();
  const uint64_t start = (uint64_t{1} << 32) - 2;  // as if 2^32 - 2 messages had gone each way
  for (Mailbox* box : {&pair->ab, &pair->ba}) {
    box->head.store(start);
    box->tail.store(start);
    box->tail_seen = start;
    for (int i = 0; i < kDepth; ++i) {  // the stamps those messages left
      const uint64_t n = start - kDepth + static_cast<uint64_t>(i);
      box->ring[n % kDepth].stamp.store(static_cast<uint32_t>(n + 1));
    }
  }
  for (uint64_t n = 0; n < 3 * kDepth; ++n) {
    ASSERT_TRUE(pair->ab.HasCredit(kDepth));
    WireMessage m;
    uint64_t ack = 0;
    EXPECT_FALSE(pair->ab.Peek(&m, &ack, kDepth));  // nothing new yet
    pair->ab.Post(Numbered(n), pair->ba.released(), kDepth);
    ASSERT_TRUE(pair->ab.Peek(&m, &ack, kDepth));
    EXPECT_EQ(m.where, n);
    pair->ab.Release(kDepth);
    // B answers; the ack it carries releases exactly A's messages so far.
    pair->ba.Post(Numbered(100 + n), pair->ab.released(), kDepth);
    ASSERT_TRUE(pair->ba.Peek(&m, &ack, kDepth));
    pair->ab.Acked(ack);
    EXPECT_EQ(pair->ab.tail_seen, start + n + 1);
    pair->ba.Release(kDepth);
  }
  // An ack beyond head, after the wrap, is still ignored.
  pair->ab.Acked(pair->ab.next() + 2);
  EXPECT_EQ(pair->ab.tail_seen, pair->ab.next());
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
