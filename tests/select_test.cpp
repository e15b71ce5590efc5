// Tests for algorithm selection (src/algo/select.h): names, rules, the cost model's choice
// among the allowed algorithms, the per-communicator cache, and that a tuning file reaches
// the choice a communicator makes.
#include "algo/select.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "model/algorithm_cost.h"
#include "model/tuning.h"
#include "support/spawn.h"
#include "support/temp_dir.h"

namespace chorus::internal {
namespace {

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllGather};
constexpr TransportKind kTransports[] = {TransportKind::kThread, TransportKind::kShm,
                                         TransportKind::kTcp, TransportKind::kMpi};

std::string Pick(CallShapeForSelection shape) {
  auto info = SelectAlgorithm(shape, "");
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? std::string((*info)->name) : "";
}

CallShapeForSelection Shape(CollectiveKind kind, TransportKind transport, int ranks, size_t bytes,
                            int cores = 2) {
  return {.kind = kind, .transport = transport, .ranks = ranks, .bytes = bytes, .cores = cores};
}

TEST(Select, EveryShapeHasAnAllowedAlgorithmAndItIsTheCheapestAllowed) {
  for (CollectiveKind kind : kKinds) {
    for (TransportKind transport : kTransports) {
      for (int ranks : {1, 2, 3, 4, 5, 8, 9, 64}) {
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{32}, size_t{16} << 10, size_t{1} << 20,
                             size_t{64} << 20, size_t{1} << 32}) {
          for (bool multi_host : {false, true}) {
            CallShapeForSelection shape = Shape(kind, transport, ranks, bytes);
            shape.multi_host = multi_host;
            auto picked = SelectAlgorithm(shape, "");
            ASSERT_TRUE(picked.ok()) << picked.status();
            const AlgorithmInfo& info = **picked;
            EXPECT_EQ(info.kind, kind);
            EXPECT_TRUE(info.allowed(shape)) << info.name;
            for (const AlgorithmInfo& other : Algorithms()) {
              if (other.kind != kind || !other.allowed(shape)) continue;
              EXPECT_LE(PredictedSeconds(info, shape), PredictedSeconds(other, shape))
                  << info.name << " picked over " << other.name;
            }
          }
        }
      }
    }
  }
}

TEST(Select, RulesKeepAlgorithmsWhereTheyRun) {
  for (size_t bytes : {size_t{32}, size_t{1} << 20, size_t{64} << 20}) {
    // MPI keeps its own small-message paths: never one-shot.
    EXPECT_NE(Pick(Shape(CollectiveKind::kAllReduce, TransportKind::kMpi, 4, bytes)), "oneshot");
    // Reading peers' buffers in place needs thread ranks (or small shm buffers).
    EXPECT_NE(Pick(Shape(CollectiveKind::kAllReduce, TransportKind::kTcp, 4, bytes)), "direct");
    EXPECT_NE(Pick(Shape(CollectiveKind::kAllGather, TransportKind::kTcp, 4, bytes)), "direct");
  }
  EXPECT_NE(Pick(Shape(CollectiveKind::kReduceScatter, TransportKind::kShm, 4, size_t{1} << 20)),
            "direct");
  // Across hosts the large all-reduce is hierarchical, never a flat recursive algorithm.
  CallShapeForSelection across =
      Shape(CollectiveKind::kAllReduce, TransportKind::kTcp, 4, size_t{64} << 20, /*cores=*/4);
  across.multi_host = true;
  EXPECT_EQ(Pick(across), "hierarchical");
}

TEST(Select, ThreadRanksReadInPlaceForLargeBuffers) {
  for (int ranks : {2, 3, 4, 8}) {
    for (CollectiveKind kind : kKinds) {
      EXPECT_EQ(Pick(Shape(kind, TransportKind::kThread, ranks, size_t{64} << 20)), "direct")
          << CollectiveKindName(kind) << " p=" << ranks;
    }
  }
}

TEST(Select, SmallAllReducesTakeOneStep) {
  for (TransportKind transport :
       {TransportKind::kThread, TransportKind::kShm, TransportKind::kTcp}) {
    for (int ranks : {2, 3, 4}) {
      EXPECT_EQ(Pick(Shape(CollectiveKind::kAllReduce, transport, ranks, 32)), "oneshot")
          << TransportKindName(transport) << " p=" << ranks;
    }
  }
}

TEST(Select, TheParametersMoveTheChoice) {
  model::MachineParams slow_messages{
      .alpha_s = 1.0, .beta_s_per_byte = 1e-12, .gamma_s_per_byte = 1e-12};
  model::MachineParams free_messages{
      .alpha_s = 0.0, .beta_s_per_byte = 1e-9, .gamma_s_per_byte = 1e-9};
  CallShapeForSelection shape =
      Shape(CollectiveKind::kAllReduce, TransportKind::kTcp, 4, size_t{64} << 20);
  shape.params = &slow_messages;
  EXPECT_EQ(Pick(shape), "oneshot");  // one step beats any number of bytes
  shape.params = &free_messages;
  const std::string bandwidth_bound = Pick(shape);
  EXPECT_NE(bandwidth_bound, "oneshot");
  EXPECT_NE(bandwidth_bound, "rd");  // both move the whole buffer per step
  shape.kind = CollectiveKind::kAllGather;
  shape.params = &slow_messages;
  EXPECT_EQ(Pick(shape), "bruck");  // 2 steps against the ring's 3
}

// Where the model is not trusted (thread and shm ranks, see select.cpp), the measured size
// ranges leave exactly one algorithm, whatever the parameters.
TEST(Select, MeasuredRangesOnThreadAndShmRanks) {
  const model::MachineParams extremes[] = {
      {.alpha_s = 1.0, .beta_s_per_byte = 1e-12, .gamma_s_per_byte = 1e-12},
      {.alpha_s = 0.0, .beta_s_per_byte = 1e-6, .gamma_s_per_byte = 1e-6}};
  struct Case {
    TransportKind transport;
    CollectiveKind kind;
    size_t bytes;
    const char* want;
  };
  const Case cases[] = {
      {TransportKind::kThread, CollectiveKind::kAllReduce, 16 << 10, "oneshot"},
      {TransportKind::kThread, CollectiveKind::kAllReduce, (16 << 10) + 4, "direct"},
      {TransportKind::kShm, CollectiveKind::kAllReduce, 64 << 10, "oneshot"},
      {TransportKind::kShm, CollectiveKind::kAllReduce, (64 << 10) + 4, "ring"},
      {TransportKind::kShm, CollectiveKind::kReduceScatter, 256 << 10, "direct"},
      {TransportKind::kShm, CollectiveKind::kReduceScatter, (256 << 10) + 4, "ring"},
      {TransportKind::kShm, CollectiveKind::kAllGather, (256 << 10) + 4, "ring"},
      {TransportKind::kThread, CollectiveKind::kAllGather, size_t{1} << 30, "direct"},
  };
  for (const Case& c : cases) {
    for (const model::MachineParams& params : extremes) {
      for (int ranks : {2, 4}) {
        CallShapeForSelection shape = Shape(c.kind, c.transport, ranks, c.bytes);
        shape.params = &params;
        EXPECT_EQ(Pick(shape), c.want) << TransportKindName(c.transport) << " "
                                       << CollectiveKindName(c.kind) << " " << c.bytes;
      }
    }
  }
  // Large shm all-gathers broadcast each block from one staging slot from 3 ranks on.
  for (const model::MachineParams& params : extremes) {
    CallShapeForSelection shape =
        Shape(CollectiveKind::kAllGather, TransportKind::kShm, 2, size_t{64} << 20);
    shape.params = &params;
    EXPECT_EQ(Pick(shape), "ring");
    shape.ranks = 4;
    EXPECT_EQ(Pick(shape), "direct");
    shape.bytes = size_t{1} << 20;
    EXPECT_EQ(Pick(shape), "ring");
  }
}

TEST(Select, RequestedByNameOrAClearError) {
  const CallShapeForSelection shape = Shape(CollectiveKind::kAllGather, TransportKind::kShm, 3, 96);
  auto bruck = SelectAlgorithm(shape, "bruck");
  ASSERT_TRUE(bruck.ok()) << bruck.status();
  EXPECT_EQ((*bruck)->name, "bruck");
  // A name the rules would not pick is still honoured: the caller asked for it.
  auto ring =
      SelectAlgorithm(Shape(CollectiveKind::kAllReduce, TransportKind::kThread, 2, 32), "ring");
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ((*ring)->name, "ring");
  for (const char* wrong : {"rd", "tree", "RING", " ring"}) {  // rd is an all-reduce
    auto bad = SelectAlgorithm(shape, wrong);
    ASSERT_FALSE(bad.ok()) << wrong;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(), std::string("allgather: algorithm \"") + wrong +
                                          "\" is not one of: direct, ring, bruck");
  }
}

TEST(Select, SelectorRemembersOnlyWhatStillHolds) {
  const model::Tuning tuning = model::DefaultTuning();
  for (TransportKind transport :
       {TransportKind::kThread, TransportKind::kShm, TransportKind::kTcp}) {
    const CallShapeForSelection base = Shape(CollectiveKind::kAllReduce, transport, 4, 0);
    Selector selector(base, tuning.For(transport));
    // Sizes that cross every crossover, repeated and interleaved across kinds.
    const std::vector<size_t> sizes = {32,      32,      1 << 14, 1 << 20, 32,      1 << 26,
                                       1 << 26, 1 << 10, 1 << 18, 1 << 18, 1 << 14, 0};
    for (size_t bytes : sizes) {
      for (CollectiveKind kind : kKinds) {
        CallShapeForSelection shape = base;
        shape.kind = kind;
        shape.bytes = bytes;
        shape.params = &tuning.For(transport);
        auto want = SelectAlgorithm(shape, "");
        auto got = selector.Pick(kind, bytes, "");
        ASSERT_TRUE(want.ok() && got.ok());
        EXPECT_EQ((*got)->name, (*want)->name) << bytes << " bytes";
        auto forced = selector.Pick(kind, bytes, "ring");
        ASSERT_TRUE(forced.ok());
        EXPECT_EQ((*forced)->name, "ring");
      }
    }
  }
}

// A tuning file reaches the choice TCP ranks make: with messages made to cost a second, a
// 64 KiB all-reduce on 4 ranks goes one-shot, which sends each of 3 peers the whole buffer;
// with the built-in parameters it does not. A malformed file stops Create before anything is
// sent, naming the file and line.
class SelectTuning : public ::testing::Test {
 protected:
  // Bytes rank 0 sent for one 64 KiB all-reduce of 4 TCP ranks (forked, so each reads the
  // file as a separate job would), or a description of what went wrong.
  std::string SentBy4TcpRanks(const std::string& run, const std::string& tuning_file) {
    const std::string store = "file://" + (dir_ / run).string();
    std::filesystem::create_directories(dir_ / run);
    const auto exits = testing::ForkRanks(4, [&](int rank) -> std::string {
      CommOptions o;
      o.rank = rank;
      o.size = 4;
      o.store_url = store;
      o.transport = TransportKind::kTcp;
      o.secret = "select-test-secret";
      o.tuning_file = tuning_file;
      auto comm = Communicator::Create(o);
      if (!comm.ok()) return comm.status().ToString();
      std::vector<float> data(16384, 1.0f);
      if (Status s = comm->AllReduce(std::span<float>(data), ReduceOp::kSum); !s.ok()) {
        return s.ToString();
      }
      if (data[777] != 4.0f) return "wrong sum";
      if (rank != 0) return "";
      return "sent " + std::to_string(comm->traffic().total.bytes_sent);
    });
    std::string report;
    for (const auto& e : exits) report += e.report;
    return report;
  }

  const testing::TempDir tmp_{"chorus-select-test"};
  const std::filesystem::path dir_ = tmp_.path();
};

TEST_F(SelectTuning, TcpRanksFollowTheTuningFile) {
  const std::filesystem::path file = dir_ / "tuning.conf";
  std::ofstream(file) << "# messages cost a second\n"
                         "tcp alpha_us=1000000 beta_gbps=1000 gamma_gbps=1000\n";
  EXPECT_EQ(SentBy4TcpRanks("slow", file.string()), "sent " + std::to_string(3 * 65536));
  const std::string defaults = SentBy4TcpRanks("defaults", "");  // the built-in parameters
  EXPECT_EQ(defaults.rfind("sent ", 0), 0u) << defaults;
  EXPECT_NE(defaults, "sent " + std::to_string(3 * 65536));
}

// Hosts tuned apart: every rank takes rank 0's file, so all choose alike. Ranks 1-3 name a
// file that would steer them to one-shot (and one that does not exist): rank 0's defaults win,
// and the call runs.
TEST_F(SelectTuning, EveryRankUsesRankZerosTuning) {
  const std::filesystem::path file = dir_ / "other-host.conf";
  std::ofstream(file) << "tcp alpha_us=1000000 beta_gbps=1000 gamma_gbps=1000\n";
  const std::string store = "file://" + (dir_ / "mixed").string();
  std::filesystem::create_directories(dir_ / "mixed");
  const auto exits = testing::ForkRanks(4, [&](int rank) -> std::string {
    CommOptions o;
    o.rank = rank;
    o.size = 4;
    o.store_url = store;
    o.transport = TransportKind::kTcp;
    o.secret = "select-test-secret";
    o.tuning_file = rank == 0 ? "" : rank == 1 ? (dir_ / "absent.conf").string() : file.string();
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::vector<float> data(16384, 1.0f);
    if (Status s = comm->AllReduce(std::span<float>(data), ReduceOp::kSum); !s.ok()) {
      return s.ToString();
    }
    return data[777] == 4.0f ? "" : "wrong sum";
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.report;
}

TEST_F(SelectTuning, AMalformedFileStopsCreate) {
  const std::filesystem::path file = dir_ / "tuning.conf";
  std::ofstream(file) << "thread alpha_us=fast beta_gbps=1 gamma_gbps=1\n";
  auto group = CreateLocalGroup(2, {.tuning_file = file.string()});
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), StatusCode::kInvalidArgument) << group.status();
  EXPECT_NE(group.status().message().find("CreateLocalGroup: "), std::string::npos);
  EXPECT_NE(group.status().message().find(file.string() + ":1"), std::string::npos)
      << group.status();
  // Under Create, rank 0's bad file stops every rank, with rank 0's reason.
  const std::string store = "file://" + (dir_ / "bad").string();
  std::filesystem::create_directories(dir_ / "bad");
  const auto exits = testing::ForkRanks(2, [&](int rank) -> std::string {
    CommOptions o;
    o.rank = rank;
    o.size = 2;
    o.store_url = store;
    o.tuning_file = rank == 0 ? file.string() : "";
    o.timeout = std::chrono::seconds(20);
    auto comm = Communicator::Create(o);
    if (comm.ok()) return "Create succeeded";
    return comm.status().message().find(file.string() + ":1") == std::string::npos
               ? comm.status().ToString()
               : "";
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.report;
}

}  // namespace
}  // namespace chorus::internal
