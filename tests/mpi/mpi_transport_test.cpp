// The MPI transport under mpirun (registered as mpi_transport_np2/3/4): every rank of
// MPI_COMM_WORLD runs every test in the same order, so each test is one collective scenario.
//
//   - the collective matrix (support/matrix.h): every algorithm of the selection table x
//     counts {0, 1, 7, 8, 1000, 1000 in 24-byte segments, 2^20+3} x every dtype and op x in
//     and out of place, exact results, on a fresh communicator per case;
//   - creation: options checked and agreed across ranks, sub-communicators, several
//     communicators over one MPI communicator;
//   - group failure: a rejected call, Abort() (from the driving thread and from another one),
//     ranks that disagree on the call, a rank that never calls.
//
// Only rank 0 prints GoogleTest's report; the other ranks print their failures, prefixed with
// their rank. Any rank's failure fails the job (mpirun's exit status).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algo/select.h"
#include "chorus/chorus.h"
#include "chorus/mpi.h"
#include "support/matrix.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MatrixParam;

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Generous: the ranks are oversubscribed processes on a shared machine.
constexpr std::chrono::milliseconds kTimeout = std::chrono::seconds(120);

Communicator MustCreate(MPI_Comm comm, CommOptions options = {.timeout = kTimeout}) {
  auto created = CreateMpiCommunicator(comm, options);
  if (!created.ok()) {
    ADD_FAILURE() << "rank " << WorldRank() << ": " << created.status();
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks would wait for this one forever
  }
  return std::move(created).value();
}

// ------------------------------------------------------------------ the matrix

class MpiMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(MpiMatrix, ExactResults) {
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  EXPECT_THAT(testing::RunMatrixCase(comm, GetParam()), IsEmpty());
}

// Evaluated when GoogleTest registers the tests, after MPI_Init: the case's rank count is the
// job's.
INSTANTIATE_TEST_SUITE_P(Matrix, MpiMatrix,
                         ::testing::ValuesIn(testing::MatrixParams({WorldSize()})),
                         [](const ::testing::TestParamInfo<MatrixParam>& param_info) {
                           return testing::MatrixName(param_info.param);
                         });

// ------------------------------------------------------------------ creation

TEST(MpiCreate, RankSizeAndTransportComeFromTheCommunicator) {
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  EXPECT_EQ(comm.rank(), WorldRank());
  EXPECT_EQ(comm.size(), WorldSize());
  EXPECT_EQ(comm.transport(), TransportKind::kMpi);
  EXPECT_EQ(TransportKindName(comm.transport()), "mpi");
}

// MPI keeps its own small-message paths underneath: never one-shot, never the direct algorithms
// (they read peers' memory); between the ring and the logarithmic ones the cost model decides.
TEST(MpiCreate, SelectionKeepsToPointToPointAlgorithms) {
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{4} << 10, size_t{64} << 20}) {
      auto picked = internal::SelectAlgorithm({kind, TransportKind::kMpi, WorldSize(), bytes}, "");
      ASSERT_TRUE(picked.ok()) << picked.status();
      const std::string name((*picked)->name);
      EXPECT_TRUE(name == "ring" || name == "rd" || name == "rabenseifner" || name == "bruck")
          << CollectiveKindName(kind) << " " << bytes << " bytes: " << name;
    }
  }
}

// Point-to-point messages over MPI: every rank sends to every other before it receives
// (senders out of room keep going only by taking in what arrives), around a collective, in
// small segments.
TEST(MpiMessages, AllSendFirstThenReceiveAroundACollective) {
  Communicator comm =
      MustCreate(MPI_COMM_WORLD, {.timeout = kTimeout, .segment_bytes = 4096, .pipeline_depth = 2});
  const int p = comm.size();
  const int r = comm.rank();
  auto value = [](int from, int to, size_t i) {
    return static_cast<int32_t>(from * 100003 + to * 1009 + static_cast<int>(i % 997));
  };
  for (size_t count : {size_t{0}, size_t{3}, size_t{20000}}) {
    for (int step = 1; step < p; ++step) {
      const int to = (r + step) % p;
      std::vector<int32_t> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = value(r, to, i);
      ASSERT_TRUE(comm.Send(std::span<const int32_t>(data), to, {.tag = 9}).ok());
    }
    std::vector<float> ones(100, 1.0f);
    ASSERT_TRUE(comm.AllReduce(std::span<float>(ones), ReduceOp::kSum).ok());
    EXPECT_EQ(ones, std::vector<float>(100, static_cast<float>(p)));
    for (int step = 1; step < p; ++step) {
      const int from = (r - step + p) % p;
      std::vector<int32_t> got(count, -1);
      const Status s = comm.Recv(std::span<int32_t>(got), from, {.tag = 9});
      ASSERT_TRUE(s.ok()) << s;
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], value(from, r, i)) << i;
    }
  }
}

TEST(MpiCreate, SubCommunicator) {
  // Two groups, even and odd world ranks, each summing its own world ranks.
  const int world_rank = WorldRank();
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  int half_rank = 0;
  int half_size = 0;
  MPI_Comm_rank(half, &half_rank);
  MPI_Comm_size(half, &half_size);
  {
    Communicator comm = MustCreate(half);
    EXPECT_EQ(comm.rank(), half_rank);
    EXPECT_EQ(comm.size(), half_size);
    std::vector<int64_t> v(1000, world_rank);
    ASSERT_TRUE(comm.AllReduce(std::span<int64_t>(v), ReduceOp::kSum).ok());
    int64_t want = 0;
    for (int r = world_rank % 2; r < WorldSize(); r += 2) want += r;
    EXPECT_EQ(v, std::vector<int64_t>(1000, want));
  }
  MPI_Comm_free(&half);
}

// Communicator::Split over MPI (MPI_Comm_split underneath): keys that reverse the order, the
// last rank with no color, a bad color refused on every rank, and the groups used beside the
// parent and after it is gone.
TEST(MpiCreate, SplitMakesGroupsThroughMpi) {
  const int p = WorldSize();
  std::optional<Communicator> mine;
  {
    Communicator world = MustCreate(MPI_COMM_WORLD);
    const int r = world.rank();
    auto bad = world.Split(r == 0 ? -3 : 0, 0);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
    const bool left_out = r == p - 1 && p > 2;
    auto split = world.Split(left_out ? Communicator::kNoColor : r % 2, -r);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(split->has_value(), !left_out);
    std::vector<int> members;  // world ranks of this group, in new rank order
    for (int q = p - 1; q >= 0; --q) {
      if (q % 2 == r % 2 && !(q == p - 1 && p > 2)) members.push_back(q);
    }
    int32_t sum = r;
    ASSERT_TRUE(world.AllReduce(std::span<int32_t>(&sum, 1), ReduceOp::kSum).ok());
    EXPECT_EQ(sum, p * (p - 1) / 2);
    if (left_out) return;
    mine = std::move(split).value();
    EXPECT_EQ(mine->size(), static_cast<int>(members.size()));
    EXPECT_EQ(mine->rank(),
              static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin()));
    EXPECT_EQ(mine->transport(), TransportKind::kMpi);
  }
  // The parent is gone; the group goes on.
  const int r = WorldRank();
  std::vector<int32_t> all(static_cast<size_t>(mine->size()), -1);
  const int32_t me = r;
  ASSERT_TRUE(mine->AllGather(std::span<const int32_t>(&me, 1), std::span<int32_t>(all)).ok());
  for (size_t i = 0; i + 1 < all.size(); ++i) EXPECT_GT(all[i], all[i + 1]) << i;
  for (int32_t q : all) EXPECT_EQ(q % 2, r % 2);
}

// Communicator::Shrink over MPI (MPI_Comm_create_group underneath): every rank but the last
// makes a communicator without it, while the last goes on alone; the old one stays usable.
TEST(MpiCreate, ShrinkLeavesOutTheLastRank) {
  const int p = WorldSize();
  Communicator world = MustCreate(MPI_COMM_WORLD);
  const int r = world.rank();
  const int exclude[] = {p - 1};
  EXPECT_EQ(world.Shrink(std::span<const int>(&r, 1)).status().code(),
            StatusCode::kInvalidArgument);
  if (r != p - 1) {
    auto rest = world.Shrink(exclude);
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(rest->size(), p - 1);
    EXPECT_EQ(rest->rank(), r);
    int32_t sum = r;
    ASSERT_TRUE(rest->AllReduce(std::span<int32_t>(&sum, 1), ReduceOp::kSum).ok());
    EXPECT_EQ(sum, (p - 1) * (p - 2) / 2);
  }
  int32_t sum = 1;
  ASSERT_TRUE(world.AllReduce(std::span<int32_t>(&sum, 1), ReduceOp::kSum).ok());
  EXPECT_EQ(sum, p);
}

TEST(MpiCreate, CommunicatorsOverOneMpiCommunicatorStayApart) {
  // Interleaved calls on two communicators dup'd from the same MPI communicator: a message of
  // one must never be taken for the other's.
  Communicator a = MustCreate(MPI_COMM_WORLD);
  Communicator b = MustCreate(MPI_COMM_WORLD, {.timeout = kTimeout, .segment_bytes = 256});
  const int p = WorldSize();
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> x(700, 1 + round);
    std::vector<int32_t> y(900, 10 * (a.rank() + 1));
    ASSERT_TRUE(a.AllReduce(std::span<int32_t>(x), ReduceOp::kSum).ok());
    ASSERT_TRUE(b.AllReduce(std::span<int32_t>(y), ReduceOp::kMax).ok());
    EXPECT_EQ(x, std::vector<int32_t>(700, p * (1 + round)));
    EXPECT_EQ(y, std::vector<int32_t>(900, 10 * p));
  }
}

TEST(MpiCreate, NullCommunicatorIsAnInvalidArgument) {
  auto created = CreateMpiCommunicator(MPI_COMM_NULL);
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("MPI_COMM_NULL"));
}

TEST(MpiCreate, BadOptionsOnEveryRank) {
  auto depth = CreateMpiCommunicator(MPI_COMM_WORLD, {.pipeline_depth = 1});
  EXPECT_EQ(depth.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(depth.status().message(), HasSubstr("CreateMpiCommunicator: options.pipeline_depth"));
  auto shm = CreateMpiCommunicator(MPI_COMM_WORLD, {.transport = TransportKind::kShm});
  EXPECT_EQ(shm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(shm.status().message(), HasSubstr("kAuto or kMpi"));
}

TEST(MpiCreate, BadOptionsOnOneRankFailEveryRank) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  CommOptions options{.timeout = kTimeout};
  if (WorldRank() == 1) options.timeout = std::chrono::milliseconds(0);
  auto created = CreateMpiCommunicator(MPI_COMM_WORLD, options);
  ASSERT_FALSE(created.ok());
  if (WorldRank() == 1) {
    EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(created.status().message(), HasSubstr("options.timeout"));
  } else {
    EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(created.status().message(), HasSubstr("rank 1 could not join"));
  }
}

TEST(MpiCreate, RanksMustAgreeOnSegmentBytes) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  CommOptions options{.timeout = kTimeout};
  if (WorldRank() == 0) options.segment_bytes = 4096;
  auto created = CreateMpiCommunicator(MPI_COMM_WORLD, options);
  EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), HasSubstr("ranks disagree on options.segment_bytes"));
}

// Every rank must pick the same algorithm for the same call: one forcing an algorithm
// (CHORUS_ALGO) where another does not is named when the communicator is made.
TEST(MpiCreate, RanksMustAgreeOnTheAlgorithm) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  CommOptions options{.timeout = kTimeout};
  if (WorldRank() == 1) options.algorithm = "ring";
  auto created = CreateMpiCommunicator(MPI_COMM_WORLD, options);
  EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), HasSubstr("ranks disagree on options.algorithm"));
  options.algorithm = "ring";
  EXPECT_TRUE(CreateMpiCommunicator(MPI_COMM_WORLD, options).ok());
}

// ------------------------------------------------------------------ group failure

TEST(MpiFailure, RejectedCallIsAbandonedByThePeersWithTheSameCode) {
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  std::vector<float> send(64, 1.0f);
  std::vector<float> recv(64);
  // Rank 0 gets its counts wrong; the others wait for it until its notice arrives.
  const size_t recv_count = comm.rank() == 0 ? 63 : 64;
  const Status s =
      comm.AllReduce(ConstBuffer{send.data(), 64, DataType::kFloat32},
                     MutableBuffer{recv.data(), recv_count, DataType::kFloat32}, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  if (comm.rank() != 0) {
    EXPECT_THAT(s.message(), HasSubstr("rank 0 rejected this call"));
  }
  // Every rank abandoned the call: the communicator is still usable.
  std::vector<float> v(8, 1.0f);
  const Status next = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
  ASSERT_TRUE(next.ok()) << next;
  EXPECT_EQ(v, std::vector<float>(8, static_cast<float>(comm.size())));
}

TEST(MpiFailure, CallRejectedByEveryRankLeavesTheCommunicatorUsable) {
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  std::vector<float> v(10, 1.0f);
  const Status bad = comm.AllReduce(ConstBuffer{v.data(), 10, DataType::kFloat32},
                                    MutableBuffer{v.data(), 9, DataType::kFloat32}, ReduceOp::kSum);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  // The rejection notices of that call are still arriving; they must not disturb this one.
  const Status good = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
  ASSERT_TRUE(good.ok()) << good;
  EXPECT_EQ(v, std::vector<float>(10, static_cast<float>(comm.size())));
  EXPECT_TRUE(comm.health().ok());
}

TEST(MpiFailure, NoticesOfAFailedCommunicatorDoNotReachTheNextOne) {
  // Rank 0 rejects and never polls again, so the peers' failure notices (and, with more than
  // two ranks, data) are still on their way to it at teardown. Open MPI gives the next
  // duplicate the same context id; unless teardown took them, they would fail it.
  for (int round = 0; round < 5; ++round) {
    {
      Communicator comm = MustCreate(MPI_COMM_WORLD);
      std::vector<float> v(4000, 1.0f);
      const size_t n = comm.rank() == 0 ? 3999 : 4000;  // rank 0's call is invalid
      const Status s =
          comm.AllReduce(ConstBuffer{v.data(), 4000, DataType::kFloat32},
                         MutableBuffer{v.data(), n, DataType::kFloat32}, ReduceOp::kSum);
      EXPECT_FALSE(s.ok());
    }
    Communicator next = MustCreate(MPI_COMM_WORLD);
    std::vector<float> v(4000, 1.0f);
    const Status s = next.AllReduce(std::span<float>(v), ReduceOp::kSum);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s;
    EXPECT_EQ(v, std::vector<float>(4000, static_cast<float>(next.size())));
  }
}

TEST(MpiFailure, AbortOnOneRankReachesEveryRank) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  if (comm.rank() == 0) comm.Abort();
  std::vector<float> v(100000, 1.0f);
  const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum);
  // Not kDeadlineExceeded: the notice, not the 120 s deadline, ended the call.
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("Abort() was called on rank 0"));
  EXPECT_EQ(comm.health().code(), StatusCode::kAborted);
}

TEST(MpiFailure, AbortFromAnotherThreadWhileWaiting) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  std::vector<float> v(1000, 1.0f);
  // The ring: the other ranks cannot finish without rank 0's later steps.
  const CallOptions ring{.algorithm = "ring"};
  if (comm.rank() == 0) {
    // The others are in MPI_Barrier, so this call waits until the watchdog aborts it. Under
    // MPI_THREAD_MULTIPLE the watchdog sends the notice; under SERIALIZED it may not call MPI,
    // and this thread sends it at its next poll.
    std::thread watchdog([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.Abort();
    });
    const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum, ring);
    watchdog.join();
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm.rank() != 0) {
    const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum, ring);
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
    EXPECT_THAT(s.message(), HasSubstr("Abort() was called on rank 0"));
  }
}

TEST(MpiFailure, RanksThatDisagreeOnTheCallFailTheGroup) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  std::vector<int32_t> v(comm.rank() == 0 ? 8 : 16, 1);
  const Status s = comm.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("ranks disagree on the call"));
  EXPECT_EQ(comm.health().code(), StatusCode::kFailedPrecondition);
}

// Two ranks that each think they are a Gather's root wait on each other and no message shows
// it; a wait that lasts asks the group (probe notices) and finds the other root in the call.
TEST(MpiFailure, RanksThatDisagreeOnTheRootFailTheGroupBeforeTheDeadline) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  const auto p = static_cast<size_t>(comm.size());
  std::vector<int32_t> mine(4, comm.rank()), all(4 * p);
  const int root = comm.rank() == 1 ? 1 : 0;
  Status s = comm.Gather(std::span<const int32_t>(mine), std::span<int32_t>(all), root);
  if (s.ok()) s = comm.Barrier();  // a rank that only sent may have returned first
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("ranks disagree on the call"));
  EXPECT_EQ(comm.health().code(), StatusCode::kFailedPrecondition);
}

TEST(MpiFailure, RankThatNeverCallsMeansADeadline) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  Communicator comm = MustCreate(MPI_COMM_WORLD);
  std::vector<float> v(1000, 1.0f);
  const CallOptions quick{.timeout = std::chrono::milliseconds(500), .algorithm = "ring"};
  if (comm.rank() != 1) {
    // Every survivor names rank 1, whichever neighbour it waited on: rank 1 does not answer
    // the census, the others do.
    const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum, quick);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(s.message(), HasSubstr("rank 1 is behind")) << s;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm.rank() == 1) {
    // Too late: the others gave up and said so; this rank learns it while it waits.
    const Status s = comm.AllReduce(std::span<float>(v), ReduceOp::kSum, quick);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(s.message(), HasSubstr("timed out"));
  }
}

// Prints only failed assertions, prefixed with the rank (ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  // MPI_THREAD_SERIALIZED, as most programs ask; CHORUS_TEST_MPI_THREAD=multiple asks for
  // MPI_THREAD_MULTIPLE (and checks that it was granted).
  const char* level = std::getenv("CHORUS_TEST_MPI_THREAD");
  const bool multiple = level != nullptr && std::string(level) == "multiple";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
  if (provided < (multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED)) {
    std::fprintf(stderr, "MPI granted thread level %d only\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  chorus::testing::HugeTestPages() = false;  // see support/test_bytes.h
  const int rank = chorus::WorldRank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new chorus::FailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS();
  MPI_Finalize();
  return failed;
}
