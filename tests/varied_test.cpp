// The v-collectives beyond the matrix (which checks their results on every transport): the
// bytes each rank moves are exactly its blocks for the others, the counts are checked on every
// rank that uses them, a rank off the root may pass no counts, and ranks that disagree on the
// counts fail the call on every rank, naming what each passed, on every transport. And shapes
// the matrix lacks: an all-to-all-v rank that sends nothing and receives everything, and a
// barrier that no rank leaves before the last has entered.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;
using testing::RunGroup;

std::string Join(const std::vector<std::string>& reports) {
  std::string all;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (!reports[r].empty()) all += "rank " + std::to_string(r) + ": " + reports[r] + "\n";
  }
  return all;
}

std::string Check(const Status& s, StatusCode code, const std::string& needle) {
  if (s.code() == code && s.message().find(needle) != std::string::npos) return "";
  return "expected " + std::string(StatusCodeName(code)) + " with \"" + needle + "\", got " +
         s.ToString() + "\n";
}

// A disagreement: over TCP the failure floods along the links that are up, and a rank whose
// peer already left may instead find it gone, which it names (as tests/misuse_test.cpp).
std::string CheckDisagreement(TransportKind kind, const Status& s, const std::string& needle) {
  if (kind == TransportKind::kTcp && s.code() == StatusCode::kUnavailable &&
      s.message().find("closed its connection") != std::string::npos) {
    return "";
  }
  return Check(s, StatusCode::kFailedPrecondition, needle);
}

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// What rank `from` sends rank `to` in these tests: uneven, zero for some pairs.
size_t Pair(int from, int to) { return (from * 3 + to) % 4 == 1 ? 0 : size_t(100 + 37 * from + to); }

// Every rank's traffic is its blocks for the others (sent) and theirs for it (received), to
// the byte, whatever the segment size.
TEST(VariedTraffic, EachRankMovesExactlyItsBlocks) {
  constexpr int p = 5;
  auto group = CreateLocalGroup(p, {.segment_bytes = 256});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<size_t> counts(p);
  for (int q = 0; q < p; ++q) counts[q] = Pair(q, q);
  const size_t total = Sum(counts);
  constexpr int root = 3;
  std::vector<TrafficCounters> traffic(p);
  std::vector<std::string> errors(p);
  testing::RunRanks(*group, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> in(4 * total + 1, 1.0f), out(4 * total + 1, 0.0f);
    std::vector<size_t> send_counts(p), recv_counts(p);
    for (int q = 0; q < p; ++q) {
      send_counts[q] = Pair(r, q);
      recv_counts[q] = Pair(q, r);
    }
    const size_t mine = counts[r];
    Status s = comm.AllGatherV({in.data(), mine, DataType::kFloat32},
                               {out.data(), total, DataType::kFloat32}, counts);
    if (s.ok()) {
      s = comm.ReduceScatterV({in.data(), total, DataType::kFloat32},
                              {out.data(), mine, DataType::kFloat32}, counts, ReduceOp::kSum);
    }
    if (s.ok()) {
      s = comm.AllToAllV({in.data(), Sum(send_counts), DataType::kFloat32}, send_counts,
                         {out.data(), Sum(recv_counts), DataType::kFloat32}, recv_counts);
    }
    if (s.ok()) {
      s = comm.GatherV({in.data(), mine, DataType::kFloat32},
                       {out.data(), r == root ? total : size_t{0}, DataType::kFloat32},
                       r == root ? std::span<const size_t>(counts) : std::span<const size_t>(),
                       root);
    }
    if (s.ok()) {
      s = comm.ScatterV({in.data(), r == root ? total : size_t{0}, DataType::kFloat32},
                        r == root ? std::span<const size_t>(counts) : std::span<const size_t>(),
                        {out.data(), mine, DataType::kFloat32}, root);
    }
    errors[r] = s.ok() ? "" : s.ToString();
    traffic[r] = comm.traffic();
  });
  ASSERT_EQ(Join(errors), "");
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const TrafficCounters& t = traffic[r];
    const uint64_t mine = 4 * counts[r];
    const uint64_t others = 4 * total - mine;
    EXPECT_EQ(t.of(CollectiveKind::kAllGatherV).bytes_sent, (p - 1) * mine);
    EXPECT_EQ(t.of(CollectiveKind::kAllGatherV).bytes_received, others);
    EXPECT_EQ(t.of(CollectiveKind::kReduceScatterV).bytes_sent, others);
    EXPECT_EQ(t.of(CollectiveKind::kReduceScatterV).bytes_received, (p - 1) * mine);
    uint64_t sent = 0, received = 0;
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      sent += 4 * Pair(r, q);
      received += 4 * Pair(q, r);
    }
    EXPECT_EQ(t.of(CollectiveKind::kAllToAllV).bytes_sent, sent);
    EXPECT_EQ(t.of(CollectiveKind::kAllToAllV).bytes_received, received);
    EXPECT_EQ(t.of(CollectiveKind::kGatherV).bytes_sent, r == root ? 0 : mine);
    EXPECT_EQ(t.of(CollectiveKind::kGatherV).bytes_received, r == root ? others : 0);
    EXPECT_EQ(t.of(CollectiveKind::kScatterV).bytes_sent, r == root ? others : 0);
    EXPECT_EQ(t.of(CollectiveKind::kScatterV).bytes_received, r == root ? 0 : mine);
    EXPECT_EQ(t.total.calls, 5u);
  }
}

// Arguments a rank can check alone: rejected there with nothing sent, the others abandon the
// call, and the communicator stays usable (the next call runs).
TEST(VariedArguments, BadCountsAreRejectedAndTheNextCallWorks) {
  constexpr int p = 3;
  auto group = CreateLocalGroup(p);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::string> reports(p);
  testing::RunRanks(*group, [&](Communicator& comm) {
    const int r = comm.rank();
    std::string& report = reports[r];
    std::vector<float> in(64, 1.0f), out(64, 0.0f);
    const std::vector<size_t> counts{1, 2, 3};
    const std::vector<size_t> short_counts{1, 2};
    // Rank 1 passes two counts for three ranks.
    Status s = comm.AllGatherV(
        {in.data(), counts[r], DataType::kFloat32}, {out.data(), 6, DataType::kFloat32},
        r == 1 ? std::span<const size_t>(short_counts) : std::span<const size_t>(counts));
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 1 ? "allgatherv: counts has 2 entries, not size (3)" : "rank 1");
    // Rank 2's send does not hold its count.
    s = comm.AllGatherV({in.data(), r == 2 ? 2 : counts[r], DataType::kFloat32},
                        {out.data(), 6, DataType::kFloat32}, counts);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 2 ? "send.count (2) != counts[2] (3)" : "rank 2");
    // A reduce-scatter-v whose recv is not its block.
    s = comm.ReduceScatterV({in.data(), 6, DataType::kFloat32},
                            {out.data(), r == 0 ? 5 : counts[r], DataType::kFloat32}, counts,
                            ReduceOp::kSum);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 0 ? "recv.count (5) != counts[0] (1)" : "rank 0");
    // All-to-all-v: what a rank sends itself must be what it gets, and it has no in-place form.
    std::vector<size_t> send_counts{2, 2, 2}, recv_counts{2, 2, 2};
    if (r == 1) recv_counts[1] = 3;
    s = comm.AllToAllV({in.data(), Sum(send_counts), DataType::kFloat32}, send_counts,
                       {out.data(), Sum(recv_counts), DataType::kFloat32}, recv_counts);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 1 ? "send_counts[1] (2) != recv_counts[1] (3)" : "rank 1");
    const std::vector<size_t> even{2, 2, 2};
    s = comm.AllToAllV({in.data(), 6, DataType::kFloat32}, even,
                       {r == 0 ? in.data() : out.data(), 6, DataType::kFloat32}, even);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 0 ? "alltoallv has no in-place form" : "rank 0");
    // The root's counts must be there; elsewhere they are ignored.
    s = comm.GatherV({in.data(), counts[r], DataType::kFloat32},
                     {out.data(), 6, DataType::kFloat32},
                     r == 2 ? std::span<const size_t>() : std::span<const size_t>(counts), 2);
    // A sender that has sent all it had may return before the root's refusal reaches it; the
    // root then drops what it sent when it meets it in its next call.
    if (r == 2 || !s.ok()) {
      report += Check(s, StatusCode::kInvalidArgument,
                      r == 2 ? "gatherv: counts has 0 entries" : "rank 2");
    }
    // And now a good call, with counts only on the root.
    for (float& x : in) x = float(r + 1);
    s = comm.GatherV({in.data(), counts[r], DataType::kFloat32},
                     {out.data(), r == 0 ? size_t{6} : size_t{0}, DataType::kFloat32},
                     r == 0 ? std::span<const size_t>(counts) : std::span<const size_t>(), 0);
    if (!s.ok()) report += "the good gatherv: " + s.ToString() + "\n";
    if (r == 0 && s.ok()) {
      const std::vector<float> want{1, 2, 2, 3, 3, 3};
      if (std::vector<float>(out.begin(), out.begin() + 6) != want) report += "wrong gatherv\n";
    }
  });
  EXPECT_EQ(Join(reports), "");
}

// All-to-all-v displacements a rank can check alone: one entry per rank, each block inside its
// buffer, no two recv blocks on one element. Rejected there with nothing sent; the next call
// (with displacements) runs.
TEST(VariedArguments, BadDisplacementsAreRejectedAndTheNextCallWorks) {
  constexpr int p = 3;
  const auto reports = RunGroup(TransportKind::kThread, p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::string report;
    std::vector<float> in(16, float(r)), out(16, -1.0f);
    const std::vector<size_t> counts{2, 2, 2};
    const std::vector<size_t> packed{0, 2, 4};
    const std::vector<size_t> two{0, 2};
    const auto call = [&](std::span<const size_t> send_displs, size_t send_count,
                          std::span<const size_t> recv_displs, size_t recv_count) {
      return comm.AllToAllV({in.data(), send_count, DataType::kFloat32}, counts, send_displs,
                            {out.data(), recv_count, DataType::kFloat32}, counts, recv_displs);
    };
    Status s =
        call(r == 1 ? std::span<const size_t>(two) : std::span<const size_t>(packed), 6, packed, 6);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 1 ? "alltoallv: send_displs has 2 entries, not size (3)" : "rank 1");
    // Rank 2's recv block 1 would end at element 7 of a recv of 6.
    const std::vector<size_t> past{0, 5, 2};
    s = call(packed, 6, r == 2 ? std::span<const size_t>(past) : std::span<const size_t>(packed),
             6);
    report += Check(
        s, StatusCode::kInvalidArgument,
        r == 2 ? "recv_displs[1] (5) + recv_counts[1] (2) runs past recv.count (6)" : "rank 2");
    // Rank 0's recv blocks 2 and 0 share element 3 (out of order, so the sorted check finds it).
    const std::vector<size_t> shared{3, 8, 2};
    s = call(packed, 6, r == 0 ? std::span<const size_t>(shared) : std::span<const size_t>(packed),
             10);
    report += Check(s, StatusCode::kInvalidArgument,
                    r == 0 ? "recv blocks 2 [2, 4) and 0 [3, 5) overlap" : "rank 0");
    // Send blocks may share elements: every peer gets the same two.
    const std::vector<size_t> same{0, 0, 0};
    const std::vector<size_t> spaced{9, 5, 1};  // reverse order with gaps
    for (size_t i = 0; i < 2; ++i) in[i] = float(10 * r + i);
    std::fill(out.begin(), out.end(), -1.0f);  // a refused call's peers may have begun theirs
    s = call(same, 2, spaced, 11);
    if (!s.ok()) report += "the good alltoallv: " + s.ToString() + "\n";
    for (int q = 0; q < p && s.ok(); ++q) {
      for (size_t i = 0; i < 2; ++i) {
        if (out[spaced[q] + i] != float(10 * q + i)) {
          report += "block from rank " + std::to_string(q) + " element " + std::to_string(i) +
                    " is " + std::to_string(out[spaced[q] + i]) + "\n";
        }
      }
    }
    for (size_t i : {0, 3, 4, 7, 8, 11}) {
      if (s.ok() && out[i] != -1.0f) report += "gap element " + std::to_string(i) + " written\n";
    }
    return report;
  });
  EXPECT_EQ(Join(reports), "");
}

// A v-call repeated with the same buffers and arrays takes the remembered plan; one whose
// counts or displacements the caller changed in place (same span, same sums) must not: each
// call's result follows the arrays as they are at that call.
TEST(VariedArguments, CallsFollowArraysChangedInPlace) {
  constexpr int p = 3;
  const auto reports = RunGroup(TransportKind::kThread, p, [&](Communicator& comm) {
    const int r = comm.rank();
    std::string report;
    std::vector<size_t> counts{1, 2, 3};
    std::vector<int32_t> mine(6), all(6);
    for (const std::vector<size_t>& now :
         {std::vector<size_t>{1, 2, 3}, {1, 2, 3}, {3, 2, 1}, {3, 2, 1}, {0, 6, 0}}) {
      counts = now;  // the same vector, so the same span: contents change in place
      std::fill(mine.begin(), mine.end(), 10 * r);
      std::fill(all.begin(), all.end(), -1);
      const Status s = comm.AllGatherV({mine.data(), counts[r], DataType::kInt32},
                                       {all.data(), 6, DataType::kInt32}, counts);
      if (!s.ok()) {
        report += s.ToString() + "\n";
        return report;
      }
      size_t at = 0;
      for (int q = 0; q < p; ++q) {
        for (size_t i = 0; i < counts[q]; ++i, ++at) {
          if (all[at] != 10 * q) report += "element " + std::to_string(at) + " wrong\n";
        }
      }
    }
    // All-to-all-v whose displacements move in place: reversed, then packed again.
    const std::vector<size_t> two{2, 2, 2};
    std::vector<size_t> displs{0, 2, 4};
    std::vector<int32_t> in(6), out(6);
    for (int q = 0; q < p; ++q) in[2 * q] = in[2 * q + 1] = 100 * r + q;
    for (const std::vector<size_t>& now :
         {std::vector<size_t>{0, 2, 4}, {4, 2, 0}, {4, 2, 0}, {0, 2, 4}}) {
      displs = now;
      const Status s = comm.AllToAllV({in.data(), 6, DataType::kInt32}, two, {},
                                      {out.data(), 6, DataType::kInt32}, two, displs);
      if (!s.ok()) {
        report += s.ToString() + "\n";
        return report;
      }
      for (int q = 0; q < p; ++q) {
        if (out[displs[q]] != 100 * q + r || out[displs[q] + 1] != 100 * q + r) {
          report += "block from rank " + std::to_string(q) + " not at its displacement\n";
        }
      }
    }
    return report;
  });
  EXPECT_EQ(Join(reports), "");
}

// Disagreements only the peers can see, on every transport: every rank fails the call with
// kFailedPrecondition (a rank that had nothing left to do may learn it at its next call),
// and the message names what each side passed.
class VariedDisagreement : public ::testing::TestWithParam<TransportKind> {};

// Makes every link of the group first. A TCP rank that fails while a peer's link to it is in
// its handshake now finishes the handshake and sends its failure (tcp_transport.cpp,
// FinishHandshakes), but one that fails before any link to a peer exists reaches that peer only
// through the others, and in a rooted call there may be none: the peer waits for its deadline
// (a known gap, named in issue 12's note). These tests are about the counts.
Status MakeEveryLink(Communicator& comm) {
  const size_t p = static_cast<size_t>(comm.size());
  std::vector<float> in(p, 1.0f), out(p, 0.0f);
  return comm.AllToAll({in.data(), p, DataType::kFloat32}, {out.data(), p, DataType::kFloat32});
}

TEST_P(VariedDisagreement, SharedCountsThatDifferFailOnEveryRank) {
  const auto reports = RunGroup(GetParam(), 3, [](Communicator& comm) -> std::string {
    const int r = comm.rank();
    // Same sums, different arrays: rank 2 thinks the blocks are {2, 2, 2}.
    const std::vector<size_t> counts = r == 2 ? std::vector<size_t>{2, 2, 2}
                                              : std::vector<size_t>{1, 2, 3};
    std::vector<float> in(8, 1.0f), out(8, 0.0f);
    Status s = MakeEveryLink(comm);
    if (s.ok()) {
      s = comm.AllGatherV({in.data(), counts[r], DataType::kFloat32},
                          {out.data(), 6, DataType::kFloat32}, counts);
    }
    if (s.ok()) s = comm.Barrier();
    return CheckDisagreement(GetParam(), s, "disagree on the counts");
  }, {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
  EXPECT_EQ(Join(reports), "");
}

TEST_P(VariedDisagreement, APairThatDisagreesIsNamedOnBothSides) {
  const auto reports = RunGroup(GetParam(), 3, [](Communicator& comm) -> std::string {
    const int r = comm.rank();
    // Rank 0 sends rank 2 five elements; rank 2 expects four (and the segments are small, so
    // the longer side has more messages than the shorter expects).
    std::vector<size_t> send_counts{3, 3, 3}, recv_counts{3, 3, 3};
    if (r == 0) send_counts[2] = 5;
    std::vector<float> in(16, 1.0f), out(16, 0.0f);
    Status s = MakeEveryLink(comm);
    if (s.ok()) {
      s = comm.AllToAllV({in.data(), Sum(send_counts), DataType::kFloat32}, send_counts,
                         {out.data(), Sum(recv_counts), DataType::kFloat32}, recv_counts,
                         {.segment_bytes = 8});
    }
    if (s.ok()) s = comm.Barrier();
    const std::string needle = "rank 0 sends 5 elements to rank 2, which expects 3 from it";
    if (r == 2) return Check(s, StatusCode::kFailedPrecondition, needle);
    return CheckDisagreement(GetParam(), s, "disagree on the counts");
  }, {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
  EXPECT_EQ(Join(reports), "");
}

TEST_P(VariedDisagreement, ARootWhoseCountsDifferFromASendersFails) {
  const auto reports = RunGroup(GetParam(), 3, [](Communicator& comm) -> std::string {
    const int r = comm.rank();
    const std::vector<size_t> counts{2, 0, 4};  // the root's view
    std::vector<float> in(8, float(r)), out(8, 0.0f);
    // Rank 1 sends one element where the root expects none.
    const size_t mine = r == 1 ? 1 : counts[r];
    Status s = MakeEveryLink(comm);
    if (s.ok()) {
      s = comm.GatherV({in.data(), mine, DataType::kFloat32},
                       {out.data(), r == 0 ? size_t{6} : size_t{0}, DataType::kFloat32},
                       r == 0 ? std::span<const size_t>(counts) : std::span<const size_t>(), 0);
    }
    if (s.ok()) s = comm.Barrier();
    if (r == 0) {
      return Check(s, StatusCode::kFailedPrecondition,
                   "rank 1 sends 1 elements to rank 0, which expects 0 from it");
    }
    return CheckDisagreement(GetParam(), s, "disagree on the counts");
  }, {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
  EXPECT_EQ(Join(reports), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, VariedDisagreement,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

// Shapes beyond the matrix's on every transport: a rank of an all-to-all-v that sends nothing
// and receives everything (and one that does the opposite), and a barrier that no rank leaves
// before the last has entered.
class Shapes : public ::testing::TestWithParam<TransportKind> {};

// Rank 0 sends nothing and gets every other rank's whole send; rank p-1 gets nothing and sends
// to everyone; the others send rank 0 and rank p-1 their blocks. Every element exact.
TEST_P(Shapes, AllToAllVWithARankThatSendsNothingAndReceivesEverything) {
  for (int p : {2, 3, 5}) {
    const auto reports =
        RunGroup(GetParam(), p,
                 [p](Communicator& comm) -> std::string {
                   const int r = comm.rank();
                   const auto n = static_cast<size_t>(p);
                   // send[r][q]: what rank r sends rank q.
                   auto sent = [&](int from, int to) -> size_t {
                     if (from == 0 || to == p - 1) return 0;  // rank 0 sends, p-1 gets nothing
                     if (to == 0)
                       return 3 + static_cast<size_t>(from);  // rank 0 receives everything
                     return from == p - 1 ? 2 : 1;            // rank p-1 sends everyone
                   };
                   std::vector<size_t> send_counts(n), recv_counts(n);
                   for (int q = 0; q < p; ++q) {
                     send_counts[static_cast<size_t>(q)] = sent(r, q);
                     recv_counts[static_cast<size_t>(q)] = sent(q, r);
                   }
                   std::vector<int32_t> in(Sum(send_counts)), out(Sum(recv_counts) + 1, -1);
                   size_t at = 0;
                   for (int q = 0; q < p; ++q) {
                     for (size_t i = 0; i < send_counts[static_cast<size_t>(q)]; ++i) {
                       in[at++] = 1000 * r + 100 * q + static_cast<int32_t>(i);
                     }
                   }
                   const Status s =
                       comm.AllToAllV({in.data(), in.size(), DataType::kInt32}, send_counts,
                                      {out.data(), out.size() - 1, DataType::kInt32}, recv_counts);
                   if (!s.ok()) return s.ToString();
                   at = 0;
                   for (int q = 0; q < p; ++q) {
                     for (size_t i = 0; i < recv_counts[static_cast<size_t>(q)]; ++i, ++at) {
                       const int32_t want = 1000 * q + 100 * r + static_cast<int32_t>(i);
                       if (out[at] != want) {
                         return "p " + std::to_string(p) + ": element " + std::to_string(i) +
                                " from rank " + std::to_string(q) + " is " +
                                std::to_string(out[at]) + ", want " + std::to_string(want);
                       }
                     }
                   }
                   if (out.back() != -1) return "wrote past the receive buffer";
                   return "";
                 },
                 {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
    EXPECT_EQ(Join(reports), "") << "p " << p;
  }
}

// All-to-all-v with displacements, through the typed overload: rank r's send holds one run of
// values that every block reads a prefix of (send blocks overlap), and its recv takes block q
// at a place of its own, in an order that is not rank order, with gaps left alone. Uneven
// counts with zeros; every element exact.
TEST_P(Shapes, AllToAllVWithDisplacements) {
  for (int p : {1, 2, 3, 5}) {
    const auto reports = RunGroup(
        GetParam(), p,
        [p](Communicator& comm) -> std::string {
          const int r = comm.rank();
          const auto n = static_cast<size_t>(p);
          const auto count = [](int from, int to) -> size_t {
            return (from + 2 * to) % 4 == 3 ? 0 : static_cast<size_t>(1 + (from * 5 + to) % 7);
          };
          std::vector<size_t> send_counts(n), recv_counts(n), send_displs(n, 0), recv_displs(n);
          for (int q = 0; q < p; ++q) {
            send_counts[q] = count(r, q);
            recv_counts[q] = count(q, r);
          }
          // Recv block q at a rotated place, a gap of two before each.
          size_t at = 2;
          for (int i = 0; i < p; ++i) {
            const auto q = static_cast<size_t>((r + i) % p);
            recv_displs[q] = at;
            at += recv_counts[q] + 2;
          }
          std::vector<int32_t> in(8), out(at, -7);
          for (size_t i = 0; i < in.size(); ++i) in[i] = 100 * r + static_cast<int32_t>(i);
          const Status s = comm.AllToAllV(std::span<const int32_t>(in), send_counts, send_displs,
                                          std::span<int32_t>(out), recv_counts, recv_displs);
          if (!s.ok()) return s.ToString();
          std::vector<int32_t> want(at, -7);
          for (int q = 0; q < p; ++q) {
            for (size_t i = 0; i < recv_counts[q]; ++i) {
              want[recv_displs[q] + i] = 100 * q + static_cast<int32_t>(i);
            }
          }
          for (size_t i = 0; i < at; ++i) {
            if (out[i] != want[i]) {
              return "p " + std::to_string(p) + ": recv[" + std::to_string(i) + "] is " +
                     std::to_string(out[i]) + ", want " + std::to_string(want[i]);
            }
          }
          return "";
        },
        {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
    EXPECT_EQ(Join(reports), "") << "p " << p;
  }
}

// Each rank in turn enters the barrier 30 ms after the others; every rank's return comes after
// the late rank's entry (steady_clock is one clock for every process of this host), for every
// barrier algorithm (the flag barrier is the direct one over TCP). The times travel by an
// all-gather, so nothing here depends on speed.
TEST_P(Shapes, NoRankLeavesABarrierBeforeTheLastHasEntered) {
  constexpr int kRanks = 4;
  const auto reports = RunGroup(
      GetParam(), kRanks,
      [](Communicator& comm) -> std::string {
        const auto now = [] {
          return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
        };
        std::string problems;
        for (const char* algorithm : {"flag", "direct", "dissemination"}) {
          for (int late = 0; late < kRanks; ++late) {
            if (comm.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(30));
            int64_t times[2] = {now(), 0};  // entered, returned
            const Status s = comm.Barrier({.algorithm = algorithm});
            times[1] = now();
            if (!s.ok()) return s.ToString();
            std::vector<int64_t> all(2 * kRanks);
            if (Status g =
                    comm.AllGather(std::span<const int64_t>(times, 2), std::span<int64_t>(all));
                !g.ok()) {
              return g.ToString();
            }
            int64_t last_entry = 0;
            for (int q = 0; q < kRanks; ++q) last_entry = std::max(last_entry, all[2 * q]);
            if (times[1] < last_entry) {
              problems += std::string(algorithm) + ", rank " + std::to_string(late) +
                          " late: left " + std::to_string(last_entry - times[1]) +
                          " ns before the last rank entered\n";
            }
          }
        }
        return problems;
      },
      {.timeout = std::chrono::seconds(20), .wait = testing::TestWaitMode()});
  EXPECT_EQ(Join(reports), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, Shapes,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

}  // namespace
}  // namespace chorus
