// The collective table (base/collectives.h) and everything that must follow it: a collective
// added to the table without an algorithm, a way through the TCP frame check, the
// test matrix or the bench's name lookup fails here, not silently in a user's job.
#include "base/collectives.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "algo/select.h"
#include "model/algorithm_cost.h"
#include "support/matrix.h"
#include "transport/tcp/frame.h"

namespace chorus::internal {
namespace {

TEST(Collectives, EveryKindHasItsRowInOrder) {
  ASSERT_EQ(Collectives().size(), static_cast<size_t>(kNumCollectiveKinds));
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_EQ(Collective(kind).kind, kind);
    EXPECT_EQ(CollectiveKindName(kind), Collective(kind).name);
  }
  EXPECT_FALSE(IsCollective(kNumCollectiveKinds));
  EXPECT_EQ(CollectiveKindName(static_cast<CollectiveKind>(200)), "unknown");
}

TEST(Collectives, NamesAndAliasesFindTheirRowAndNoOther) {
  std::set<std::string> seen;
  for (const CollectiveInfo& c : Collectives()) {
    EXPECT_EQ(FindCollective(c.name), c.kind) << c.name;
    EXPECT_EQ(FindCollective(c.csv_name), c.kind) << c.csv_name;
    EXPECT_TRUE(seen.insert(std::string(c.name)).second) << c.name;
    for (std::string_view alias : c.aliases) {
      if (alias.empty()) continue;
      EXPECT_EQ(FindCollective(alias), c.kind) << alias;
      EXPECT_TRUE(seen.insert(std::string(alias)).second) << alias << " names two collectives";
    }
  }
  EXPECT_EQ(FindCollective("All-Reduce"), CollectiveKind::kAllReduce);
  EXPECT_EQ(FindCollective("reduce_scatter"), CollectiveKind::kReduceScatter);
  EXPECT_EQ(FindCollective("bcast"), CollectiveKind::kBroadcast);
  EXPECT_FALSE(FindCollective("alltoallx"));
  EXPECT_FALSE(FindCollective(""));
}

// Every collective can run: it has algorithms (each row carries its cost terms, or it would not
// compile) with terms and times of at least 0, and the selection finds one on
// every transport.
TEST(Collectives, EveryCollectiveHasAlgorithmsWithCosts) {
  for (const CollectiveInfo& c : Collectives()) {
    int algorithms = 0;
    for (const AlgorithmInfo& a : Algorithms()) {
      if (a.kind != c.kind) continue;
      ++algorithms;
      for (int p : {2, 3, 4, 8}) {
        const model::AlgorithmTerms terms = a.terms(p);
        EXPECT_GE(terms.steps, 0) << c.name << " " << a.name;
        EXPECT_GE(terms.sent, 0) << c.name << " " << a.name;
        EXPECT_GE(
            PredictedSeconds(
                a,
                {.kind = a.kind, .transport = TransportKind::kTcp, .ranks = p, .bytes = 1 << 20}),
            0.0)
            << c.name << " " << a.name;
      }
    }
    EXPECT_GT(algorithms, 0) << c.name << " has no algorithm";
    for (TransportKind t :
         {TransportKind::kThread, TransportKind::kShm, TransportKind::kTcp, TransportKind::kMpi}) {
      for (size_t bytes : {size_t{0}, size_t{32}, size_t{1} << 20, size_t{64} << 20}) {
        auto picked =
            SelectAlgorithm({.kind = c.kind, .transport = t, .ranks = 4, .bytes = bytes}, "");
        ASSERT_TRUE(picked.ok()) << c.name;
        EXPECT_EQ((*picked)->kind, c.kind) << c.name;
      }
    }
  }
}

// The test matrix walks every collective (and every algorithm of it).
TEST(Collectives, TheMatrixCoversEveryAlgorithm) {
  std::set<std::pair<int, std::string>> covered;
  for (const testing::MatrixParam& m : testing::MatrixParams({2, 3})) {
    covered.insert({static_cast<int>(m.kind), m.algorithm});
  }
  for (const AlgorithmInfo& a : Algorithms()) {
    EXPECT_TRUE(covered.count({static_cast<int>(a.kind), std::string(a.name)}))
        << CollectiveKindName(a.kind) << " " << a.name;
  }
}

// What each walk promises (support/matrix.h): the every-walk all dtype x op x placement pairs,
// the diagonal every dtype and every op, the representative one dtype of each element size with
// sum and avg; none an in-place call of a collective without an in-place form (all-to-all-v's
// second placement is displaced blocks).
TEST(Collectives, TheMatrixWalksMakeTheCallsTheyPromise) {
  for (const CollectiveInfo& c : Collectives()) {
    if (c.counts == Counts::kNone) continue;
    const int ops = c.reduces ? kNumReduceOps : 1;
    const bool two_placements = testing::HasInPlace(c) || testing::TakesDispls(c);
    const int placements = two_placements ? 2 : 1;
    for (testing::CountCase count :
         {testing::CountCase::kOne, testing::CountCase::kTinySegments, testing::CountCase::kBig}) {
      for (int p : {2, 7}) {
        const testing::MatrixParam m{c.kind, p, count, ""};
        const std::vector<testing::WalkStep> steps = testing::WalkOf(m);
        std::set<std::tuple<int, int, bool>> calls;
        std::set<int> dtypes, sizes, op_set;
        for (const testing::WalkStep& s : steps) {
          EXPECT_TRUE(two_placements || !s.in_place) << c.name;
          calls.insert(
              {static_cast<int>(s.dtype), c.reduces ? static_cast<int>(s.op) : 0, s.in_place});
          dtypes.insert(static_cast<int>(s.dtype));
          sizes.insert(static_cast<int>(DataTypeSize(s.dtype)));
          op_set.insert(static_cast<int>(s.op));
        }
        EXPECT_EQ(calls.size(), steps.size()) << c.name << ": a call made twice";
        switch (testing::WalkKindOf(m)) {
          case testing::Walk::kEvery:
            EXPECT_EQ(steps.size(), static_cast<size_t>(kNumDataTypes * ops * placements))
                << c.name;
            break;
          case testing::Walk::kDiagonal:
            EXPECT_EQ(dtypes.size(), static_cast<size_t>(kNumDataTypes)) << c.name;
            if (c.reduces) {
              EXPECT_EQ(op_set.size(), static_cast<size_t>(kNumReduceOps)) << c.name;
            }
            break;
          case testing::Walk::kRepresentative:
            EXPECT_EQ(sizes, (std::set<int>{1, 2, 4, 8})) << c.name;
            EXPECT_TRUE(op_set.count(static_cast<int>(ReduceOp::kSum)) &&
                        op_set.count(static_cast<int>(ReduceOp::kAvg)))
                << c.name;
            break;
        }
      }
    }
  }
}

// Every collective crosses the TCP frame check, its root included.
TEST(Collectives, EveryCollectiveAndRootCrossTheFrameCheck) {
  for (const CollectiveInfo& c : Collectives()) {
    tcp::FrameHeader h;
    h.comm_id = 7;
    h.sequence = 3;
    h.tag = CallTag{
        .call_index = 9, .count = 100, .kind = c.kind, .root = 5, .layout = 0xfedcba9876543210};
    h.length = 64;
    uint8_t bytes[tcp::kFrameHeaderBytes];
    tcp::EncodeFrameHeader(h, bytes);
    tcp::FrameHeader back;
    ASSERT_TRUE(
        tcp::DecodeFrameHeader(bytes, {.comm_id = 7, .sequence = 3, .max_data_bytes = 64}, &back)
            .ok())
        << c.name;
    EXPECT_EQ(back.tag, h.tag) << c.name;
  }
  tcp::FrameHeader h;
  h.tag.kind = static_cast<CollectiveKind>(kNumCollectiveKinds);
  uint8_t bytes[tcp::kFrameHeaderBytes];
  tcp::EncodeFrameHeader(h, bytes);
  tcp::FrameHeader back;
  EXPECT_FALSE(tcp::DecodeFrameHeader(bytes, {}, &back).ok());
}

TEST(Collectives, CountsFollowTheRelation) {
  auto counts = [](CollectiveKind kind, size_t send, size_t recv, int p) {
    const CallCounts c = CountsOf(Collective(kind), send, recv, p);
    return std::vector<size_t>{c.block, c.send, c.recv, c.total};
  };
  using V = std::vector<size_t>;
  EXPECT_EQ(counts(CollectiveKind::kAllReduce, 8, 8, 4), (V{8, 8, 8, 8}));
  EXPECT_EQ(counts(CollectiveKind::kReduceScatter, 32, 8, 4), (V{8, 32, 8, 32}));
  EXPECT_EQ(counts(CollectiveKind::kAllGather, 8, 32, 4), (V{8, 8, 32, 32}));
  EXPECT_EQ(counts(CollectiveKind::kBroadcast, 8, 8, 4), (V{8, 8, 8, 8}));
  EXPECT_EQ(counts(CollectiveKind::kBarrier, 0, 0, 4), (V{0, 0, 0, 0}));
  EXPECT_EQ(counts(CollectiveKind::kAllToAll, 32, 32, 4), (V{8, 32, 32, 32}));
  // A root-only buffer does not decide: a non-root rank of gather passes any recv, one of
  // scatter any send, and still derives the root's total.
  EXPECT_EQ(counts(CollectiveKind::kGather, 8, 0, 4), (V{8, 8, 32, 32}));
  EXPECT_EQ(counts(CollectiveKind::kScatter, 0, 8, 4), (V{8, 32, 8, 32}));
  EXPECT_EQ(counts(CollectiveKind::kReduce, 8, 3, 4), (V{8, 8, 8, 8}));
}

}  // namespace
}  // namespace chorus::internal
