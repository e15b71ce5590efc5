// The traffic counters measured on real runs equal the cost model's bytes, exactly, per rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "model/cost_model.h"
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
  const auto [p, count] = GetParam();
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

INSTANTIATE_TEST_SUITE_P(Ring, TrafficMatchesModel, ::testing::ValuesIn(Params()),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param.ranks) + "_count" +
                                  std::to_string(param_info.param.count);
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
