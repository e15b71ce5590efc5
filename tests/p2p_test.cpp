// Point-to-point messages (Communicator::Send, Recv and SendRecv, algo/p2p.h) on thread, shm and
// TCP ranks: exact data at every size, the orders that must not deadlock (all send first, a ring
// shift, a message around a collective), and the errors that must not hang.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"

namespace chorus {
namespace {

// Small slots and a short pipeline, so that a message of a few thousand elements takes many
// segments and a sender runs out of room long before its message is out.
CommOptions SmallSlots() {
  CommOptions o;
  o.segment_bytes = 4096;
  o.pipeline_depth = 2;
  o.wait = testing::TestWaitMode();
  return o;
}

// Element i of the message from `from` to `to` with number `n`: distinct across all of them.
int32_t Value(int from, int to, int n, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + n * 101 + static_cast<int>(i % 9973));
}

std::vector<int32_t> Message(int from, int to, int n, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(from, to, n, i);
  return v;
}

// "" when `got` is the message; else where it differs.
std::string Check(const std::vector<int32_t>& got, int from, int to, int n) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(from, to, n, i)) {
      return "message " + std::to_string(n) + " from rank " + std::to_string(from) + ": element " +
             std::to_string(i) + " is " + std::to_string(got[i]) + "; ";
    }
  }
  return "";
}

// Counts: empty, one element, a few, and many segments (4096-byte slots).
const std::vector<size_t> kCounts = {0, 1, 7, 3 * 1024 + 5, 40000};

class Messages : public ::testing::TestWithParam<TransportKind> {};

// Every rank sends every message to every rank (itself included) before it receives any: the
// senders run out of room, and only take in what arrives meanwhile keeps them going.
TEST_P(Messages, AllSendFirstThenReceiveEveryCount) {
  const int p = 4;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        for (int step = 1; step <= p; ++step) {
          const int to = (r + step) % p;
          for (size_t n = 0; n < kCounts.size(); ++n) {
            const auto data = Message(r, to, static_cast<int>(n), kCounts[n]);
            if (Status s = comm.Send(std::span<const int32_t>(data), to, {.tag = 5}); !s.ok()) {
              return "send: " + s.ToString();
            }
          }
        }
        for (int step = 1; step <= p; ++step) {
          const int from = (r - step + p) % p;
          for (size_t n = 0; n < kCounts.size(); ++n) {
            std::vector<int32_t> got(kCounts[n], -1);
            if (Status s = comm.Recv(std::span<int32_t>(got), from, {.tag = 5}); !s.ok()) {
              return "recv: " + s.ToString();
            }
            e += Check(got, from, r, static_cast<int>(n));
          }
        }
        size_t bytes = 0;
        for (size_t c : kCounts) bytes += c * sizeof(int32_t);
        const TrafficCounters t = comm.traffic();
        // A message to itself goes through no transport.
        if (t.messages.bytes_sent != bytes * (p - 1) || t.messages.bytes_received != bytes * p) {
          e += "traffic: sent " + std::to_string(t.messages.bytes_sent) + ", received " +
               std::to_string(t.messages.bytes_received) + "; ";
        }
        if (t.messages.calls != 2 * p * kCounts.size()) e += "calls; ";
        return e;
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Each rank sends a large message to the next and then receives from the one before.
TEST_P(Messages, RingShift) {
  const int p = 3;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        for (int round = 0; round < 3; ++round) {
          const auto data = Message(r, (r + 1) % p, round, 50000);
          std::vector<int32_t> got(50000);
          Status s = comm.Send(std::span<const int32_t>(data), (r + 1) % p);
          if (s.ok()) s = comm.Recv(std::span<int32_t>(got), (r + p - 1) % p);
          if (!s.ok()) return s.ToString();
          e += Check(got, (r + p - 1) % p, r, round);
        }
        return e;
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// SendRecv shifts every count around a ring of 3, in rounds that mix it with Send and Recv: a
// message sent before the shift (received first), and rank 0 using Send then Recv in odd rounds
// while the others use SendRecv. Data and traffic are exact.
TEST_P(Messages, SendRecvShiftsEveryCountBesideSendAndRecv) {
  const int p = 3;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        const int to = (r + 1) % p;
        const int from = (r + p - 1) % p;
        std::string e;
        size_t bytes = 0;
        int number = 0;  // of the messages between each pair
        for (int round = 0; round < 2; ++round) {
          for (size_t n = 0; n < kCounts.size(); ++n, ++number) {
            const auto data = Message(r, to, number, kCounts[n]);
            std::vector<int32_t> got(kCounts[n], -1);
            Status s;
            if (n == 2) {  // a message first, then the shift of the same count
              s = comm.Send(std::span<const int32_t>(data), to, {.tag = 3});
              if (s.ok()) s = comm.Recv(std::span<int32_t>(got), from, {.tag = 3});
              if (!s.ok()) return "send, recv: " + s.ToString();
              e += Check(got, from, r, number);
              bytes += kCounts[n] * sizeof(int32_t);
              ++number;
            }
            const auto shifted = Message(r, to, number, kCounts[n]);
            if (round == 1 && r == 0) {
              s = comm.Send(std::span<const int32_t>(shifted), to, {.tag = 3});
              if (s.ok()) s = comm.Recv(std::span<int32_t>(got), from, {.tag = 3});
            } else {
              s = comm.SendRecv(std::span<const int32_t>(shifted), to, std::span<int32_t>(got),
                                from, {.tag = 3});
            }
            if (!s.ok()) return "round " + std::to_string(round) + ": " + s.ToString();
            e += Check(got, from, r, number);
            bytes += kCounts[n] * sizeof(int32_t);
          }
        }
        const TrafficCounters t = comm.traffic();
        if (t.messages.bytes_sent != bytes || t.messages.bytes_received != bytes ||
            t.total.bytes_sent != bytes) {
          e += "traffic: sent " + std::to_string(t.messages.bytes_sent) + ", received " +
               std::to_string(t.messages.bytes_received) + " of " + std::to_string(bytes) + "; ";
        }
        return e;
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// SendRecv with one peer both ways, with itself, and with a count that differs by direction.
TEST_P(Messages, SendRecvExchangesAndToItself) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        const int other = 1 - r;
        std::string e;
        const size_t mine = r == 0 ? 9000 : 3;  // rank 0 sends 9000, receives 3
        const auto data = Message(r, other, 0, mine);
        std::vector<int32_t> got(r == 0 ? 3 : 9000, -1);
        Status s = comm.SendRecv(std::span<const int32_t>(data), other, std::span<int32_t>(got),
                                 other);
        if (!s.ok()) return s.ToString();
        e += Check(got, other, r, 0);
        const auto self = Message(r, r, 0, 5000);
        std::vector<int32_t> back(5000, -1);
        s = comm.SendRecv(std::span<const int32_t>(self), r, std::span<int32_t>(back), r);
        if (!s.ok()) return s.ToString();
        e += Check(back, r, r, 0);
        return e;
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A message sent before collectives is received after them, the collectives' results exact;
// large enough that its sender waits for the receiver's collective to take it in.
TEST_P(Messages, SentBeforeCollectivesReceivedAfter) {
  const int p = 3;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        const auto data = Message(r, (r + 1) % p, 0, 20000);
        if (Status s = comm.Send(std::span<const int32_t>(data), (r + 1) % p); !s.ok()) {
          return "send: " + s.ToString();
        }
        std::vector<int64_t> sum(3000, r + 1);
        if (Status s = comm.AllReduce(std::span<int64_t>(sum), ReduceOp::kSum); !s.ok()) {
          return "allreduce: " + s.ToString();
        }
        if (sum != std::vector<int64_t>(3000, p * (p + 1) / 2)) e += "allreduce value; ";
        if (Status s = comm.Barrier(); !s.ok()) return "barrier: " + s.ToString();
        std::vector<int32_t> got(20000);
        if (Status s = comm.Recv(std::span<int32_t>(got), (r + p - 1) % p); !s.ok()) {
          return "recv: " + s.ToString();
        }
        return e + Check(got, (r + p - 1) % p, r, 0);
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A large message to a rank that is not a neighbour in the ring all-reduce that follows: only
// the collective's waits that last take it in.
TEST_P(Messages, SentToANonNeighbourBeforeARingAllReduce) {
  const int p = 4;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        const auto data = Message(r, (r + 2) % p, 0, 100000);
        if (Status s = comm.Send(std::span<const int32_t>(data), (r + 2) % p); !s.ok()) {
          return "send: " + s.ToString();
        }
        std::vector<float> sum(16, 1.0f);
        if (Status s = comm.AllReduce(std::span<float>(sum), ReduceOp::kSum, {.algorithm = "ring"});
            !s.ok()) {
          return "allreduce: " + s.ToString();
        }
        std::string e = sum == std::vector<float>(16, 4.0f) ? "" : "allreduce value; ";
        std::vector<int32_t> got(100000);
        if (Status s = comm.Recv(std::span<int32_t>(got), (r + 2) % p); !s.ok()) {
          return "recv: " + s.ToString();
        }
        return e + Check(got, (r + 2) % p, r, 0);
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A Recv whose count differs from its message's fails, naming both, and fails the group.
TEST_P(Messages, CountMismatchFailsTheGroup) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        std::vector<float> v(9, 1.0f);
        if (comm.rank() == 0) {
          if (Status s = comm.Send(std::span<const float>(v.data(), 8), 1); !s.ok()) {
            return "send: " + s.ToString();
          }
          // The receiver's failure reaches this rank's next call.
          return comm.Barrier().ok() ? "barrier after the failure succeeded" : "";
        }
        const Status s = comm.Recv(std::span<float>(v), 0);
        if (s.code() != StatusCode::kFailedPrecondition ||
            s.message().find("message #0 (count 8, float32, tag 0)") == std::string::npos ||
            s.message().find("message #0 (count 9, float32, tag 0)") == std::string::npos) {
          return "recv: " + s.ToString();
        }
        return comm.health().ok() ? "still healthy" : "";
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A Recv that finds its peer's collective data first fails at once, instead of hanging: the
// peer went into a collective this rank has not reached.
TEST_P(Messages, RecvThatMeetsACollectiveFails) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        std::vector<float> v(4, 1.0f);
        if (comm.rank() == 0) {
          const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
          return s.ok() ? "allreduce succeeded" : "";
        }
        const Status s = comm.Recv(std::span<float>(v), 0);
        if (s.code() != StatusCode::kFailedPrecondition ||
            s.message().find("rank 0 is in allreduce #0 and sent no message before it") ==
                std::string::npos) {
          return "recv: " + s.ToString();
        }
        return "";
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Bad arguments are refused before anything is sent, and the communicator goes on.
TEST_P(Messages, BadArgumentsAreRefusedAndTheGroupGoesOn) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        std::string e;
        std::vector<double> v(5, comm.rank());
        auto refused = [&](const Status& s, const std::string& text) {
          if (s.code() != StatusCode::kInvalidArgument ||
              s.message().find(text) == std::string::npos) {
            e += s.ToString() + "; ";
          }
        };
        refused(comm.Send(std::span<const double>(v), 2), "send: peer (2) is not a rank in [0, 2)");
        refused(comm.Recv(std::span<double>(v), -1), "recv: peer (-1) is not a rank in [0, 2)");
        refused(comm.Send(ConstBuffer{nullptr, 3, DataType::kFloat64}, 1 - comm.rank()),
                "send: data.data is null but data.count is 3");
        refused(comm.Recv(std::span<double>(v), 1 - comm.rank(),
                          {.timeout = std::chrono::milliseconds(0)}),
                "recv: options.timeout (0 ms) must be positive");
        refused(comm.Recv(std::span<double>(v), comm.rank()),
                "receives from itself, but sent itself no message first");
        refused(comm.SendRecv(std::span<const double>(v), 2, std::span<double>(v), 0),
                "sendrecv: to (2) is not a rank in [0, 2)");
        std::vector<double> w(5);
        refused(comm.SendRecv(std::span<const double>(v), 1 - comm.rank(), std::span<double>(w),
                              comm.rank()),
                "sendrecv: rank " + std::to_string(comm.rank()) +
                    " receives from itself, but sent itself no message first");
        refused(comm.SendRecv(std::span<const double>(v), 0, std::span<double>(v), 5),
                "sendrecv: from (5) is not a rank in [0, 2)");
        refused(comm.SendRecv(std::span<const double>(v.data(), 3), 1 - comm.rank(),
                              std::span<double>(v.data() + 2, 3), 1 - comm.rank()),
                "sendrecv: send and recv overlap");
        refused(comm.SendRecv(ConstBuffer{v.data(), 5, DataType::kFloat64}, 1 - comm.rank(),
                              MutableBuffer{nullptr, 1, DataType::kFloat64}, 1 - comm.rank()),
                "sendrecv: recv.data is null but recv.count is 1");
        // A message to itself that the Recv does not fit stays for one that does.
        const std::vector<double> self(5, 3.0);
        if (!comm.Send(std::span<const double>(self), comm.rank()).ok()) e += "send to self; ";
        refused(comm.Recv(std::span<double>(v.data(), 4), comm.rank()),
                "this rank sent itself message #0 (count 5, float64, tag 0), not message #0 "
                "(count 4, float64, tag 0)");
        if (!comm.Recv(std::span<double>(v), comm.rank()).ok() ||
            v != std::vector<double>(5, 3.0)) {
          e += "recv from self; ";
        }
        const int other = 1 - comm.rank();
        const std::vector<double> mine(5, 10.0 + comm.rank());
        Status s = comm.Send(std::span<const double>(mine), other);
        if (s.ok()) s = comm.Recv(std::span<double>(v), other);
        if (!s.ok()) return e + s.ToString();
        if (v != std::vector<double>(5, 10.0 + other)) e += "exchange after the refusals; ";
        return e;
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Two ranks that each receive before they send: the first deadline ends it, naming what it
// waited for, and the other rank stops with the group.
TEST_P(Messages, RecvWithoutASenderTimesOut) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        std::vector<float> v(3);
        if (comm.rank() == 1) {
          const Status s = comm.Recv(std::span<float>(v), 0, {.tag = 7});
          if (s.code() != StatusCode::kDeadlineExceeded ||
              s.message().find("recv: rank 1 stopped: ") == std::string::npos) {
            return s.ToString();
          }
          return "";
        }
        const Status s = comm.Recv(std::span<float>(v), 1,
                                   {.timeout = std::chrono::milliseconds(300), .tag = 7});
        if (s.code() != StatusCode::kDeadlineExceeded ||
            s.message().find("recv: rank 0 timed out after 300 ms waiting for message #0 (count "
                             "3, float32, tag 7) from rank 1") == std::string::npos) {
          return s.ToString();
        }
        return "";
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A SendRecv whose peer takes its message but sends none back times out naming the message it
// waited for, and the peer's next Recv stops with the group.
TEST_P(Messages, SendRecvWithoutAReplyTimesOut) {
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        // Large enough to go by reference on thread ranks.
        std::vector<float> v(20000, 1.0f);
        std::vector<float> w(20000);
        if (comm.rank() == 1) {
          // The first Recv takes rank 0's message, unless rank 0 has timed out already (a
          // slow start under load); the second never gets one.
          Status s = comm.Recv(std::span<float>(w), 0, {.tag = 7});
          if (s.ok()) s = comm.Recv(std::span<float>(w), 0, {.tag = 7});
          if (s.ok() || s.message().find("recv: rank 1 ") == std::string::npos) {
            return s.ToString();
          }
          return "";
        }
        const Status s = comm.SendRecv(std::span<const float>(v), 1, std::span<float>(w), 1,
                                       {.timeout = std::chrono::milliseconds(300), .tag = 7});
        if (s.code() != StatusCode::kDeadlineExceeded ||
            s.message().find("sendrecv: rank 0 timed out after 300 ms waiting for message #0 "
                             "(count 20000, float32, tag 7) from rank 1") == std::string::npos) {
          return s.ToString();
        }
        return "";
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Probe and AwaitMessage: nothing before a message is sent; a message sent before a barrier;
// a wait that ends when the message comes, while it takes in a large message from a
// third rank (whose Send could not end otherwise, and which only then lets the awaited one go);
// and WakeAwaitMessage from another thread.
TEST_P(Messages, ProbeAndAwaitMessage) {
  const int p = 3;
  const auto reports = testing::RunGroup(
      GetParam(), p,
      [&](Communicator& comm) -> std::string {
        const int r = comm.rank();
        std::string e;
        const std::vector<int32_t> go(1, 1);
        std::vector<int32_t> got(1);
        if (r == 0) {
          if (comm.Probe(1) || comm.Probe(2) || comm.Probe(0)) e += "probe; ";
          if (!comm.Probe(7)) e += "probe of no rank: its Recv fails at once; ";
        }
        if (Status s = comm.Barrier(); !s.ok()) return s.ToString();
        if (r == 1) {
          if (Status s = comm.Send(std::span<const int32_t>(go), 0); !s.ok()) return s.ToString();
        }
        if (Status s = comm.Barrier(); !s.ok()) return s.ToString();
        if (r == 0) {
          const int first[] = {1};
          if (!comm.AwaitMessage(first, std::chrono::seconds(60)) || !comm.Probe(1)) {
            e += "await the first; ";
          }
          if (Status s = comm.Recv(std::span<int32_t>(got), 1); !s.ok()) return s.ToString();
          // Rank 2 sends 40,000 elements (many segments); only once they are out does it tell
          // rank 1 to send.
          const int awaited[] = {1};
          if (!comm.AwaitMessage(awaited, std::chrono::seconds(60))) e += "await; ";
          if (!comm.Probe(1) || !comm.Probe(2)) e += "probe after the await; ";
          std::vector<int32_t> big(40000);
          Status s = comm.Recv(std::span<int32_t>(got), 1, {.tag = 1});
          if (s.ok()) s = comm.Recv(std::span<int32_t>(big), 2);
          if (!s.ok()) return s.ToString();
          e += Check(big, 2, 0, 0);
          // Woken from another thread, before or during the wait.
          std::thread waker([&comm] { comm.WakeAwaitMessage(); });
          const auto start = std::chrono::steady_clock::now();
          const bool any = comm.AwaitMessage(awaited, std::chrono::seconds(120));
          waker.join();
          if (any || std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
            e += "woken; ";
          }
        } else if (r == 2) {
          const auto big = Message(2, 0, 0, 40000);
          Status s = comm.Send(std::span<const int32_t>(big), 0);
          if (s.ok()) s = comm.Send(std::span<const int32_t>(go), 1);
          if (!s.ok()) return s.ToString();
        } else {
          Status s = comm.Recv(std::span<int32_t>(got), 2);
          if (s.ok()) s = comm.Send(std::span<const int32_t>(go), 0, {.tag = 1});
          if (!s.ok()) return s.ToString();
        }
        if (Status s = comm.Barrier(); !s.ok()) return s.ToString();
        return e;
      },
      SmallSlots());
  for (int r = 0; r < p; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A rank that closes its communicator: a wait for its message ends, Probe says a Recv from it
// would not wait, and that Recv fails at once naming it.
TEST_P(Messages, AwaitMessageFromARankThatLeftEnds) {
  if (GetParam() == TransportKind::kThread) {
    GTEST_SKIP() << "the harness keeps thread ranks' communicators until every rank is done";
  }
  const auto reports = testing::RunGroup(
      GetParam(), 2,
      [&](Communicator& comm) -> std::string {
        if (Status s = comm.Barrier(); !s.ok()) return s.ToString();
        if (comm.rank() == 1) return "";  // leaves: its communicator closes
        const int peers[] = {1};
        const auto start = std::chrono::steady_clock::now();
        if (!comm.AwaitMessage(peers, std::chrono::seconds(120)) ||
            std::chrono::steady_clock::now() - start > std::chrono::seconds(60) ||
            !comm.Probe(1)) {
          return "the wait did not end";
        }
        std::vector<float> v(3);
        const Status s = comm.Recv(std::span<float>(v), 1);
        if (s.code() != StatusCode::kUnavailable) return s.ToString();
        return "";
      },
      SmallSlots());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// A collective whose rank sent by reference flushes only the peers it sent to in that call: a
// peer it sent a message to earlier, still unreceived, must not hold it up. (Thread ranks, where
// collectives send by reference; the receiver receives only once the sender's collective has
// returned.)
TEST(MessagesOnThreads, AnUnreceivedMessageDoesNotHoldUpTheSendersCollective) {
  auto group = CreateLocalGroup(3, {.timeout = std::chrono::seconds(20)});
  ASSERT_TRUE(group.ok()) << group.status();
  std::atomic<int> reduced{0};
  std::vector<std::string> errors(3);
  testing::RunRanks(*group, [&](Communicator& comm) {
    const int r = comm.rank();
    std::string& e = errors[static_cast<size_t>(r)];
    const std::vector<float> v(8192, 1.0f);
    std::vector<float> out(8192);
    int round = 0;
    for (const char* algorithm : {"direct", "chain", "binomial", "rs_gather"}) {
      const std::vector<int32_t> message = Message(1, 2, round, 10);
      if (r == 1 && !comm.Send(std::span<const int32_t>(message), 2).ok()) e += "send; ";
      const Status s = comm.Reduce(std::span<const float>(v), std::span<float>(out), ReduceOp::kSum,
                                   0, {.algorithm = algorithm});
      if (!s.ok()) e += std::string(algorithm) + ": " + s.ToString() + "; ";
      if (r == 1) reduced.store(round + 1);
      if (r == 2) {
        while (reduced.load() <= round) std::this_thread::yield();
        std::vector<int32_t> got(10);
        if (Status g = comm.Recv(std::span<int32_t>(got), 1); !g.ok()) e += g.ToString();
        e += Check(got, 1, 2, round);
      }
      ++round;
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Transports, Messages,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

}  // namespace
}  // namespace chorus
