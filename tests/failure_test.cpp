// Failure paths: deadlines, bad arguments, aborts and mismatched calls. None may hang, every
// error names the operation and the argument or rank, and failures are sticky.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "support/spawn.h"
#include "support/timing.h"

namespace chorus {
namespace {

using chorus::testing::kPrompt;
using chorus::testing::kPromptSeconds;
using chorus::testing::kWrongPathWait;
using chorus::testing::RunRanks;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using ::testing::HasSubstr;

std::vector<Communicator> Group(int n, milliseconds timeout = std::chrono::seconds(10)) {
  auto group = CreateLocalGroup(n, {.timeout = timeout});
  EXPECT_TRUE(group.ok()) << group.status();
  return std::move(group).value();
}

TEST(Deadline, RankThatNeverCallsTimesOutTheOthersAndFailureIsSticky) {
  constexpr milliseconds kTimeout(300);
  auto comms = Group(4, kTimeout);
  std::vector<Status> result(4);
  std::vector<double> seconds(4);
  RunRanks(comms, [&](Communicator& comm) {
    if (comm.rank() == 2) return;  // rank 2 never joins
    std::vector<float> data(1000, 1.0f);
    const auto start = Clock::now();
    result[comm.rank()] = comm.AllReduce(std::span<float>(data), ReduceOp::kSum);
    seconds[comm.rank()] = std::chrono::duration<double>(Clock::now() - start).count();
  });
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(result[r].code(), StatusCode::kDeadlineExceeded) << result[r];
    // The deadline fires, and not long after its time (kPrompt is the margin that holds on a
    // loaded machine; a hang would be caught by ctest's timeout).
    EXPECT_LT(seconds[r], 0.3 + kPromptSeconds) << "rank " << r;
    EXPECT_THAT(result[r].message(), HasSubstr("allreduce")) << result[r];
    EXPECT_EQ(comms[r].health().code(), StatusCode::kDeadlineExceeded);
  }
  // Not before its time: the first rank to time out waited the whole 300 ms (the others may
  // learn of its failure, and stop, a little sooner than their own call's deadline).
  EXPECT_GE(std::max({seconds[0], seconds[1], seconds[3]}), 0.3);
  // Rank 3 waits on rank 2 directly: its message says so.
  EXPECT_THAT(result[3].message(), HasSubstr("rank 2")) << result[3];
  // Later calls fail fast on every rank, the one that never called included: with a per-call
  // timeout of kWrongPathWait, a call that waited for rank 2 could not return within kPrompt.
  for (Communicator& comm : comms) {
    std::vector<float> data(8, 1.0f);
    const auto start = Clock::now();
    const Status s =
        comm.AllReduce(std::span<float>(data), ReduceOp::kSum, {.timeout = kWrongPathWait});
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_LT(Clock::now() - start, kPrompt);
  }
}

TEST(Deadline, PerCallTimeoutOverridesTheCommunicatorsOne) {
  auto comms = Group(2, 3 * kWrongPathWait);
  std::vector<float> data(4, 1.0f);
  const auto start = Clock::now();
  const Status s =
      comms[0].AllReduce(std::span<float>(data), ReduceOp::kSum, {.timeout = milliseconds(100)});
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(Clock::now() - start, milliseconds(100));
  EXPECT_LT(Clock::now() - start, milliseconds(100) + kPrompt);
  EXPECT_THAT(s.message(), HasSubstr("waiting for data from rank 1")) << s;
}

TEST(Abort, WakesWaitingRanksAndIsSticky) {
  auto comms = Group(3, std::chrono::seconds(30));
  std::vector<Status> result(3);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    comms[0].Abort();
  });
  RunRanks(comms, [&](Communicator& comm) {
    if (comm.rank() == 0) return;
    std::vector<int32_t> data(16, 1);
    result[comm.rank()] = comm.AllReduce(std::span<int32_t>(data), ReduceOp::kSum);
  });
  aborter.join();
  for (int r : {1, 2}) {
    EXPECT_EQ(result[r].code(), StatusCode::kAborted) << result[r];
    EXPECT_THAT(result[r].message(), HasSubstr("Abort() was called on rank 0"));
  }
  EXPECT_EQ(comms[0].health().code(), StatusCode::kAborted);
}

// Every rank passes the same bad arguments: each gets kInvalidArgument naming the operation
// and the argument, nothing waits, and the communicator stays usable.
struct BadCall {
  std::string name;
  std::function<Status(Communicator&, std::vector<float>&, std::vector<float>&)> call;
  std::string message;
};

void PrintTo(const BadCall& bad, std::ostream* os) { *os << bad.name; }

class BadArguments : public ::testing::TestWithParam<BadCall> {};

TEST_P(BadArguments, AreRejectedOnEveryRankAndTheGroupStaysUsable) {
  const BadCall& bad = GetParam();
  auto comms = Group(4);
  std::vector<Status> result(4), after(4);
  std::vector<std::vector<float>> out(4);
  RunRanks(comms, [&](Communicator& comm) {
    std::vector<float> a(64, 1.0f), b(64, 0.0f);
    result[comm.rank()] = bad.call(comm, a, b);
    std::vector<float> ok(8, float(comm.rank()));
    after[comm.rank()] = comm.AllReduce(std::span<float>(ok), ReduceOp::kSum);
    out[comm.rank()] = ok;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(result[r].code(), StatusCode::kInvalidArgument) << result[r];
    EXPECT_THAT(result[r].message(), HasSubstr(bad.message)) << result[r];
    EXPECT_TRUE(after[r].ok()) << after[r];
    EXPECT_EQ(out[r], std::vector<float>(8, 6.0f));
  }
}

std::vector<BadCall> BadCalls() {
  using V = std::vector<float>;
  return {
      {"NullSend",
       [](Communicator& c, V&, V& b) {
         return c.AllReduce({nullptr, 8, DataType::kFloat32}, {b.data(), 8, DataType::kFloat32},
                            ReduceOp::kSum);
       },
       "allreduce: send.data is null but send.count is 8"},
      {"NullRecv",
       [](Communicator& c, V& a, V&) {
         return c.AllGather({a.data(), 2, DataType::kFloat32}, {nullptr, 8, DataType::kFloat32});
       },
       "allgather: recv.data is null but recv.count is 8"},
      {"NullRecvOfScatter",
       [](Communicator& c, V& a, V&) {
         // Off the root, only recv is used: its name, not send's, is in the error.
         return c.Scatter({a.data(), 8, DataType::kFloat32}, {nullptr, 2, DataType::kFloat32}, 0);
       },
       "scatter: recv.data is null but recv.count is 2"},
      {"NullSendOfGather",
       [](Communicator& c, V&, V& b) {
         return c.Gather({nullptr, 2, DataType::kFloat32}, {b.data(), 8, DataType::kFloat32}, 3);
       },
       "gather: send.data is null but send.count is 2"},
      {"AllReduceCounts",
       [](Communicator& c, V& a, V& b) {
         return c.AllReduce({a.data(), 12, DataType::kFloat32}, {b.data(), 10, DataType::kFloat32},
                            ReduceOp::kSum);
       },
       "allreduce: recv.count (10) != send.count (12)"},
      {"ReduceScatterCounts",
       [](Communicator& c, V& a, V& b) {
         return c.ReduceScatter({a.data(), 10, DataType::kFloat32},
                                {b.data(), 3, DataType::kFloat32}, ReduceOp::kSum);
       },
       "reducescatter: send.count (10) != size (4) * recv.count (3)"},
      {"AllGatherCounts",
       [](Communicator& c, V& a, V& b) {
         return c.AllGather({a.data(), 3, DataType::kFloat32}, {b.data(), 10, DataType::kFloat32});
       },
       "allgather: recv.count (10) != size (4) * send.count (3)"},
      {"DtypeMismatch",
       [](Communicator& c, V& a, V& b) {
         return c.AllReduce({a.data(), 8, DataType::kFloat32}, {b.data(), 8, DataType::kInt32},
                            ReduceOp::kSum);
       },
       "allreduce: recv.dtype (int32) != send.dtype (float32)"},
      {"UnknownOp",
       [](Communicator& c, V& a, V& b) {
         return c.AllReduce({a.data(), 8, DataType::kFloat32}, {b.data(), 8, DataType::kFloat32},
                            static_cast<ReduceOp>(42));
       },
       "allreduce: op (42) is not a chorus::ReduceOp"},
      {"UnknownDtype",
       [](Communicator& c, V& a, V& b) {
         return c.AllReduce({a.data(), 8, static_cast<DataType>(77)},
                            {b.data(), 8, static_cast<DataType>(77)}, ReduceOp::kSum);
       },
       "allreduce: send.dtype (77) is not a chorus::DataType"},
      {"PartialOverlapAllReduce",
       [](Communicator& c, V& a, V&) {
         return c.AllReduce({a.data(), 8, DataType::kFloat32},
                            {a.data() + 1, 8, DataType::kFloat32}, ReduceOp::kSum);
       },
       "allreduce: send and recv overlap but the call is not in place"},
      {"WrongInPlaceOffsetReduceScatter",
       [](Communicator& c, V& a, V&) {
         // In place would be recv == send + rank * 2; rank 0's block is used by every rank.
         return c.ReduceScatter({a.data(), 8, DataType::kFloat32},
                                {a.data() + (c.rank() == 0 ? 1 : 0), 2, DataType::kFloat32},
                                ReduceOp::kSum);
       },
       "reducescatter: send and recv overlap but the call is not in place"},
      {"SegmentTooSmall",
       [](Communicator& c, V& a, V& b) {
         return c.AllReduce({a.data(), 8, DataType::kFloat32}, {b.data(), 8, DataType::kFloat32},
                            ReduceOp::kSum, {.segment_bytes = 2});
       },
       "allreduce: options.segment_bytes (2) must be between one float32 element (4)"},
  };
}

INSTANTIATE_TEST_SUITE_P(All, BadArguments, ::testing::ValuesIn(BadCalls()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(BadArguments, OneRankRejectingStopsThePeersPromptly) {
  auto comms = Group(4, std::chrono::seconds(30));
  std::vector<Status> result(4);
  const auto start = Clock::now();
  RunRanks(comms, [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f);
    const size_t count = comm.rank() == 1 ? 0 : 8;  // rank 1 passes mismatched counts
    result[comm.rank()] = comm.AllReduce({a.data(), 8, DataType::kFloat32},
                                         {a.data(), count, DataType::kFloat32}, ReduceOp::kSum);
  });
  EXPECT_LT(Clock::now() - start, kPrompt);  // far below the 30 s timeout
  EXPECT_EQ(result[1].code(), StatusCode::kInvalidArgument) << result[1];
  // One mistake, one answer: the peers abandon the call with the same code, and the
  // communicator stays usable on every rank.
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(result[r].code(), StatusCode::kInvalidArgument) << result[r];
    EXPECT_THAT(result[r].message(), HasSubstr("rank 1 rejected this call")) << result[r];
    EXPECT_THAT(result[r].message(), HasSubstr("recv.count (0) != send.count (8)")) << result[r];
  }
  for (Communicator& comm : comms) EXPECT_TRUE(comm.health().ok()) << comm.health();
}

TEST(Mismatch, DifferentCountsOnDifferentRanksFailInsteadOfCorrupting) {
  auto comms = Group(2);
  std::vector<Status> result(2);
  RunRanks(comms, [&](Communicator& comm) {
    std::vector<float> a(comm.rank() == 0 ? 16 : 8, 1.0f);
    result[comm.rank()] = comm.AllReduce(std::span<float>(a), ReduceOp::kSum);
  });
  for (const Status& s : result) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("ranks disagree on the call")) << s;
  }
  for (Communicator& comm : comms) {
    EXPECT_EQ(comm.health().code(), StatusCode::kFailedPrecondition) << comm.health();
  }
}

TEST(Mismatch, DifferentCollectivesFail) {
  auto comms = Group(2);
  std::vector<Status> result(2);
  RunRanks(comms, [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f), b(16, 0.0f);
    result[comm.rank()] = comm.rank() == 0
                              ? comm.AllReduce(std::span<float>(a), ReduceOp::kSum)
                              : comm.AllGather(std::span<const float>(a), std::span<float>(b));
  });
  for (const Status& s : result) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("disagree")) << s;
  }
}

// A rank whose call fails may free its buffers at once: peers still reading them through
// zero-copy messages must have let go first. ASan turns a violation into a failure.
TEST(FailureSafety, BuffersMayBeFreedAsSoonAsAFailedCallReturns) {
  // Large enough that rank 0's 1-5 ms deadline falls mid-call. TSan runs the call 5-15 times
  // slower, so a quarter of it does there, and spares some 900K first touches of TSan's shadow.
#if defined(__SANITIZE_THREAD__)
  constexpr size_t kCount = size_t{3} << 18;
#else
  constexpr size_t kCount = size_t{3} << 20;
#endif
  for (const char* algorithm : {"ring", "direct"}) {
    for (int round = 0; round < 5; ++round) {
      auto comms = Group(3, std::chrono::seconds(10));
      RunRanks(comms, [&](Communicator& comm) {
        auto buffer = std::make_unique<float[]>(kCount);
        std::fill_n(buffer.get(), kCount, 1.0f);
        CallOptions call{.algorithm = algorithm};
        if (comm.rank() == 0) call.timeout = milliseconds(1 + round);  // fails mid-call
        const Status s =
            comm.AllReduce({buffer.get(), kCount, DataType::kFloat32},
                           {buffer.get(), kCount, DataType::kFloat32}, ReduceOp::kSum, call);
        buffer.reset();  // the caller owns its memory again the moment the call returns
        static_cast<void>(s);
      });
    }
  }
}

TEST(BadArguments, TwoRejectionsInARowBothReachThePeers) {
  auto comms = Group(2, std::chrono::seconds(30));
  Status peer;
  const auto start = Clock::now();
  RunRanks(comms, [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f);
    if (comm.rank() == 0) {  // rejects call #0 and call #1
      comm.AllReduce({a.data(), 8, DataType::kFloat32}, {a.data(), 4, DataType::kFloat32},
                     ReduceOp::kSum)
          .IgnoreError();
      comm.AllReduce({nullptr, 8, DataType::kFloat32}, {a.data(), 8, DataType::kFloat32},
                     ReduceOp::kSum)
          .IgnoreError();
    } else {
      std::this_thread::sleep_for(milliseconds(50));  // enters call #0 after both rejections
      peer = comm.AllReduce(std::span<float>(a), ReduceOp::kSum);
    }
  });
  EXPECT_LT(Clock::now() - start, kPrompt);  // far below the 30 s timeout
  EXPECT_EQ(peer.code(), StatusCode::kInvalidArgument) << peer;
  EXPECT_THAT(peer.message(), HasSubstr("recv.count (4) != send.count (8)")) << peer;
}

// A rank that rejects a call and then destroys its communicator: its peer in that call (before
// or after the departure) is answered by the rejection, not told the rank is gone.
TEST(BadArguments, ARankThatRejectsAndLeavesIsAnsweredByItsRejection) {
  for (int round = 0; round < 20; ++round) {
    auto comms = Group(2, std::chrono::seconds(30));
    Status peer;
    RunRanks(comms, [&](Communicator& comm) {
      std::vector<float> a(8, 1.0f);
      if (comm.rank() == 0) {
        comm.AllReduce({a.data(), 8, DataType::kFloat32}, {a.data(), 4, DataType::kFloat32},
                       ReduceOp::kSum)
            .IgnoreError();
        Communicator gone = std::move(comm);
      } else {
        peer = comm.AllReduce(std::span<float>(a), ReduceOp::kSum);
      }
    });
    ASSERT_EQ(peer.code(), StatusCode::kInvalidArgument) << "round " << round << ": " << peer;
    EXPECT_THAT(peer.message(), HasSubstr("recv.count (4) != send.count (8)")) << peer;
  }
}

TEST(Deadline, AnEnormousTimeoutMeansNoDeadlineNotAnOverflow) {
  auto comms = Group(2, milliseconds::max());
  RunRanks(comms, [](Communicator& comm) {
    std::vector<float> a(8, 1.0f);
    EXPECT_TRUE(comm.AllReduce(std::span<float>(a), ReduceOp::kSum).ok());
  });
}

TEST(CreateLocalGroup, RejectsBadOptions) {
  EXPECT_THAT(CreateLocalGroup(2, {.pipeline_depth = 1}).status().message(),
              HasSubstr("options.pipeline_depth (1) must be in [2, 16]"));
  EXPECT_EQ(CreateLocalGroup(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(CreateLocalGroup(0).status().message(), HasSubstr("CreateLocalGroup: n (0)"));
  EXPECT_EQ(CreateLocalGroup(2, {.timeout = milliseconds(0)}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateLocalGroup(2, {.segment_bytes = 1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateLocalGroup(2, {.pipeline_depth = 0}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Communicator, SingleRankCopiesAndCounts) {
  auto comms = Group(1);
  std::vector<int64_t> in(5), out(5, 0);
  std::iota(in.begin(), in.end(), 3);
  ASSERT_TRUE(comms[0]
                  .AllReduce(std::span<const int64_t>(in), std::span<int64_t>(out), ReduceOp::kAvg)
                  .ok());
  EXPECT_EQ(out, in);
  EXPECT_EQ(comms[0].traffic().total.bytes_sent, 0u);
  EXPECT_EQ(comms[0].traffic().total.calls, 1u);
}

}  // namespace
}  // namespace chorus
