// The traffic counters measured on real runs equal the cost model's bytes, exactly, per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/select.h"
#include "base/collectives.h"
#include "chorus/chorus.h"
#include "model/algorithm_cost.h"
#include "model/cost_model.h"
#include "model/rank_bytes.h"
#include "support/spawn.h"

namespace chorus {
namespace {

struct TrafficParam {
  int ranks;
  size_t count;  // total buffer, as in the cost model
};

void PrintTo(const TrafficParam& t, std::ostream* os) {
  *os << "p" << t.ranks << " count " << t.count;
}

class TrafficMatchesModel : public ::testing::TestWithParam<TrafficParam> {};

TEST_P(TrafficMatchesModel, PerRankPerKind) {
  // Plain variables, not structured bindings: lambdas below capture them (clang 14 cannot).
  const int p = GetParam().ranks;
  const size_t count = GetParam().count;
  // A small segment so that segmentation is exercised; it must not change the bytes.
  auto group = CreateLocalGroup(p, {.segment_bytes = 256, .algorithm = "ring"});
  ASSERT_TRUE(group.ok()) << group.status();
  const size_t block = count / static_cast<size_t>(p);  // RS / AG need a multiple of p
  const size_t even = block * static_cast<size_t>(p);
  std::vector<TrafficCounters> counters(static_cast<size_t>(p));
  std::vector<Status> status(static_cast<size_t>(p));
  testing::RunRanks(*group, [&](Communicator& comm) {
    std::vector<float> big(count + 1, 1.0f), out(count + 1, 0.0f);
    Status s = comm.AllReduce({big.data(), count, DataType::kFloat32},
                              {out.data(), count, DataType::kFloat32}, ReduceOp::kSum);
    if (s.ok()) {
      s = comm.ReduceScatter({big.data(), even, DataType::kFloat32},
                             {out.data(), block, DataType::kFloat32}, ReduceOp::kSum);
    }
    if (s.ok()) {
      s = comm.AllGather({big.data(), block, DataType::kFloat32},
                         {out.data(), even, DataType::kFloat32});
    }
    status[static_cast<size_t>(comm.rank())] = s;
    counters[static_cast<size_t>(comm.rank())] = comm.traffic();
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    const TrafficCounters& c = counters[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto ar = model::Ring(CollectiveKind::kAllReduce, p, r, count, DataType::kFloat32);
    const auto rs = model::Ring(CollectiveKind::kReduceScatter, p, r, even, DataType::kFloat32);
    const auto ag = model::Ring(CollectiveKind::kAllGather, p, r, even, DataType::kFloat32);
    EXPECT_EQ(c.of(CollectiveKind::kAllReduce).bytes_sent, ar.bytes_sent);
    EXPECT_EQ(c.of(CollectiveKind::kAllReduce).bytes_received, ar.bytes_received);
    EXPECT_EQ(c.of(CollectiveKind::kReduceScatter).bytes_sent, rs.bytes_sent);
    EXPECT_EQ(c.of(CollectiveKind::kReduceScatter).bytes_received, rs.bytes_received);
    EXPECT_EQ(c.of(CollectiveKind::kAllGather).bytes_sent, ag.bytes_sent);
    EXPECT_EQ(c.of(CollectiveKind::kAllGather).bytes_received, ag.bytes_received);
    EXPECT_EQ(c.total.bytes_sent, ar.bytes_sent + rs.bytes_sent + ag.bytes_sent);
    EXPECT_EQ(c.total.calls, 3u);
  }
}

std::vector<TrafficParam> Params() {
  std::vector<TrafficParam> params;
  for (int p = 1; p <= 8; ++p) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{1000}, size_t{1003}, size_t{65539}}) {
      params.push_back({p, count});
    }
  }
  return params;
}

// "p4_count1003", for either suite's parameters.
template <typename Info>
std::string RanksAndCount(const Info& param_info) {
  // Appended: GCC 12 at -O3 warns -Wrestrict (a false positive, GCC bug 105651) about
  // "p" + std::to_string(...).
  std::string name = "p";
  name += std::to_string(param_info.param.ranks);
  name += "_count";
  name += std::to_string(param_info.param.count);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ring, TrafficMatchesModel, ::testing::ValuesIn(Params()),
                         RanksAndCount<::testing::TestParamInfo<TrafficParam>>);

// The ring all-gather-v and reduce-scatter-v over random uneven blocks, zeros among them: each
// rank moves the total less one block and nothing more (no padding to the largest block).
// All-gather-v: rank r sends every block but r + 1's and receives every block but its own.
// Reduce-scatter-v: it sends every block but its own and receives every block but r - 1's.
TEST(TrafficMatchesModel, RingVCollectivesNeverPad) {
  std::mt19937 random(20261206);
  for (int p = 2; p <= 8; ++p) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<size_t> counts(static_cast<size_t>(p));
      for (size_t& n : counts) n = random() % 3 == 0 ? 0 : random() % 700;
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      SCOPED_TRACE("p " + std::to_string(p) + ", total " + std::to_string(total));
      auto group = CreateLocalGroup(p, {.segment_bytes = 256});
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<Traffic> gathered(static_cast<size_t>(p)), scattered(gathered);
      std::vector<Status> status(static_cast<size_t>(p));
      testing::RunRanks(*group, [&](Communicator& comm) {
        const size_t me = static_cast<size_t>(comm.rank());
        std::vector<float> mine(counts[me], 1.0f), all(total, 1.0f), out(total);
        Status s = comm.AllGatherV(std::span<const float>(mine), std::span<float>(out), counts,
                                   {.algorithm = "ring"});
        if (s.ok()) {
          s = comm.ReduceScatterV(std::span<const float>(all), std::span<float>(mine), counts,
                                  ReduceOp::kSum, {.algorithm = "ring"});
        }
        for (float x : mine) {
          if (s.ok() && x != static_cast<float>(p)) s = Internal("wrong sum");
        }
        status[me] = s;
        gathered[me] = comm.traffic().of(CollectiveKind::kAllGatherV);
        scattered[me] = comm.traffic().of(CollectiveKind::kReduceScatterV);
      });
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(status[r].ok()) << status[r];
        const auto block = [&](int q) { return counts[static_cast<size_t>((q + p) % p)] * 4; };
        const size_t n = total * 4;
        EXPECT_EQ(gathered[r].bytes_sent, n - block(r + 1));
        EXPECT_EQ(gathered[r].bytes_received, n - block(r));
        EXPECT_EQ(scattered[r].bytes_sent, n - block(r));
        EXPECT_EQ(scattered[r].bytes_received, n - block(r - 1));
      }
    }
  }
}

// All-to-all: every rank of every algorithm sends and receives exactly its cost row's share of
// the buffer (the same on every rank), in place and out of place, with segments that split
// Bruck's packed runs.
TEST(TrafficMatchesModel, AllToAllAlgorithmsMoveTheirRowsBytes) {
  for (const internal::AlgorithmInfo& a : internal::Algorithms()) {
    if (a.kind != CollectiveKind::kAllToAll) continue;
    for (int p : {2, 3, 4, 5, 8}) {
      SCOPED_TRACE(std::string(a.name) + " p " + std::to_string(p));
      constexpr size_t kBlock = 7;
      const size_t n = kBlock * static_cast<size_t>(p);
      const double sent = model::TermsFor(a.terms.get(), p).sent * static_cast<double>(n) * 4;
      const auto want = static_cast<uint64_t>(std::llround(sent));
      EXPECT_DOUBLE_EQ(static_cast<double>(want), sent);
      auto group = CreateLocalGroup(p);
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<Traffic> traffic(static_cast<size_t>(p));
      testing::RunRanks(*group, [&](Communicator& comm) {
        std::vector<float> in(n, float(comm.rank())), out(n);
        const CallOptions options{.segment_bytes = 40, .algorithm = std::string(a.name)};
        EXPECT_TRUE(comm.AllToAll(std::span<const float>(in), std::span<float>(out), options).ok());
        EXPECT_TRUE(comm.AllToAll(std::span<float>(in), options).ok());  // in place
        traffic[static_cast<size_t>(comm.rank())] = comm.traffic().of(CollectiveKind::kAllToAll);
      });
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(traffic[r].bytes_sent, 2 * want) << "rank " << r;
        EXPECT_EQ(traffic[r].bytes_received, 2 * want) << "rank " << r;
      }
    }
  }
}

// Every algorithm but the hierarchical all-reduce (its bytes depend on the host layout), on
// every rank, for several roots and counts (random ones with zeros for the v-collectives), with
// segments that split the messages: the counters equal model::RankBytesOf to the byte. So no
// block is padded, and a new algorithm needs its row in model/rank_bytes.cpp.
//
// One test per algorithm (ctest runs them side by side: together they took two minutes under
// TSan), and one group per rank count, whose four trials each add to the counters.
std::vector<size_t> ModelledAlgorithms() {
  std::vector<size_t> picked;
  for (size_t i = 0; i < internal::Algorithms().size(); ++i) {
    if (internal::Algorithms()[i].name != "hierarchical") picked.push_back(i);
  }
  return picked;
}

class EveryAlgorithm : public ::testing::TestWithParam<size_t> {};

TEST_P(EveryAlgorithm, MovesTheModelsBytes) {
  const internal::AlgorithmInfo& a = internal::Algorithms()[GetParam()];
  const internal::CollectiveInfo& c = internal::Collective(a.kind);
  const bool personal = c.counts == internal::Counts::kBothAreP;
  std::mt19937 random(20261206 + static_cast<unsigned>(GetParam()));
  for (int p : {1, 2, 3, 5, 6, 8}) {
    const auto n = static_cast<size_t>(p);
    // The calls' segments are 64 bytes: the group's staging need be no larger than a page.
    auto group = CreateLocalGroup(p, {.segment_bytes = 4096});
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<Traffic> traffic(n);  // each rank's counters after the previous trial
    for (int trial = 0; trial < 4; ++trial) {
      // Even collectives: a block of 0, 1, 7 or 1001 elements. The v-collectives: pair[i][j],
      // what rank i sends rank j (all-to-all-v); the shared counts are pair[0].
      const size_t block = std::array<size_t, 4>{0, 1, 7, 1001}[static_cast<size_t>(trial)];
      std::vector<std::vector<size_t>> pair(n, std::vector<size_t>(n));
      for (auto& row : pair) {
        for (size_t& x : row) x = random() % 3 == 0 ? 0 : random() % 300;
      }
      const std::vector<size_t>& counts = pair[0];
      const int root = std::array<int, 4>{0, p - 1, p / 2, 1 % p}[static_cast<size_t>(trial)];
      const internal::CallCounts even = internal::CountsFor(c, block, p);
      const std::string what = std::string(c.name) + " " + std::string(a.name) + " p " +
                               std::to_string(p) + " trial " + std::to_string(trial) + " root " +
                               std::to_string(root);
      SCOPED_TRACE(what);
      const std::vector<Traffic> before = traffic;
      std::vector<Status> status(n);
      const auto counts_of = [&](size_t r, bool send) {
        std::vector<size_t> v(n);
        for (size_t q = 0; q < n; ++q) v[q] = send ? pair[r][q] : pair[q][r];
        return v;
      };
      testing::RunRanks(*group, [&](Communicator& comm) {
        const auto r = static_cast<size_t>(comm.rank());
        const std::vector<size_t> send_counts = counts_of(r, true);
        const std::vector<size_t> recv_counts = counts_of(r, false);
        // The root's buffers on every rank (a root-only buffer is ignored elsewhere); a buffer
        // of one v-block holds the rank's own.
        internal::CallArgs args{a.kind,
                                {nullptr, c.varied ? counts[r] : even.send, DataType::kFloat32},
                                {nullptr, c.varied ? counts[r] : even.recv, DataType::kFloat32},
                                ReduceOp::kSum,
                                root,
                                {},
                                {}};
        if (c.varied && internal::SendIsPerRank(c.counts)) {
          args.send_counts = personal ? send_counts : counts;
        }
        if (c.varied && internal::RecvIsPerRank(c.counts)) {
          args.recv_counts = personal ? recv_counts : counts;
        }
        const internal::CallCounts sizes =
            c.varied ? internal::VariedCountsOf(c, args, comm.rank()) : even;
        std::vector<float> in(sizes.send, 1.0f), out(sizes.recv, 0.0f);
        args.send.data = in.data();
        args.send.count = in.size();
        args.recv.data = out.data();
        args.recv.count = out.size();
        status[r] = internal::RunCollective(
            comm, args, {.segment_bytes = 64, .algorithm = std::string(a.name)});
        traffic[r] = comm.traffic().of(a.kind);
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
        const std::vector<size_t> send_counts = counts_of(static_cast<size_t>(r), true);
        const std::vector<size_t> recv_counts = counts_of(static_cast<size_t>(r), false);
        model::RankCall call{
            .kind = a.kind, .ranks = p, .rank = r, .root = root, .count = even.total, .elem = 4};
        if (c.varied) {
          call.count = 0;
          call.send_counts = personal ? send_counts : counts;
          call.recv_counts = recv_counts;
        }
        const std::optional<model::RankBytes> want = model::RankBytesOf(a.name, call);
        ASSERT_TRUE(want.has_value()) << "model/rank_bytes.cpp has no row for " << what;
        EXPECT_EQ(traffic[r].bytes_sent - before[r].bytes_sent, want->sent) << "rank " << r;
        EXPECT_EQ(traffic[r].bytes_received - before[r].bytes_received, want->received)
            << "rank " << r;
        EXPECT_EQ(traffic[r].calls - before[r].calls, 1u) << "rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TrafficMatchesModel, EveryAlgorithm,
                         ::testing::ValuesIn(ModelledAlgorithms()), [](const auto& param_info) {
                           const internal::AlgorithmInfo& a =
                               internal::Algorithms()[param_info.param];
                           return std::string(CollectiveKindName(a.kind)) + "_" +
                                  std::string(a.name);
                         });

TEST(TrafficMatchesModel, TheSeedsFigures) {
  auto group = CreateLocalGroup(4, {.algorithm = "ring"});
  ASSERT_TRUE(group.ok());
  testing::RunRanks(*group, [](Communicator& comm) {
    std::vector<float> grad(8, 1.0f), shard(2);
    ASSERT_TRUE(comm.AllReduce(std::span<float>(grad), ReduceOp::kAvg).ok());
    ASSERT_TRUE(
        comm.ReduceScatter(std::span<const float>(grad), std::span<float>(shard), ReduceOp::kSum)
            .ok());
    EXPECT_EQ(comm.traffic().of(CollectiveKind::kAllReduce).bytes_sent, 48u);
    EXPECT_EQ(comm.traffic().of(CollectiveKind::kReduceScatter).bytes_sent, 24u);
  });
}

}  // namespace
}  // namespace chorus
