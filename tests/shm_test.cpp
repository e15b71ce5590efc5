// Ranks as processes on one host: the collective matrix over the shm transport, setup through
// stores, a peer killed mid-collective, and nothing left behind in /dev/shm.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/wait.h"
#include "chorus/chorus.h"
#include "support/fork_checks.h"
#include "support/group.h"
#include "support/matrix.h"
#include "support/reserved_port.h"
#include "support/spawn.h"
#include "support/temp_dir.h"

namespace chorus {
namespace {

using testing::ExpectAllOk;
using testing::ForkRanks;
using ::testing::HasSubstr;
using testing::RankExit;
using testing::TempDir;
namespace fs = std::filesystem;

// Segments rank 0 (process `rank0`) created and left behind; their names carry its pid.
std::vector<std::string> LeftoverSegments(pid_t rank0) {
  const std::string prefix =
      "chorus-" + std::to_string(getuid()) + "-" + std::to_string(rank0) + "-";
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

CommOptions ShmOptions(int rank, int size, const std::string& store_url) {
  CommOptions o;
  o.rank = rank;
  o.size = size;
  o.store_url = store_url;
  o.transport = TransportKind::kShm;
  o.timeout = std::chrono::seconds(60);
  o.wait = testing::TestWaitMode();
  o.slot_stores = testing::TestSlotStores();
  return o;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) s += line + "\n";
  return s;
}

class ShmMatrix : public ::testing::TestWithParam<testing::MatrixGroupParam> {};

TEST_P(ShmMatrix, ExactResults) {
  const testing::MatrixGroupParam m = GetParam();
  const TempDir dir;
  const auto exits = ForkRanks(m.ranks, [&](int rank) -> std::string {
    CommOptions o = ShmOptions(rank, m.ranks, dir.url());
    o.segment_bytes = testing::MatrixSegmentBytes();
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    if (comm->transport() != TransportKind::kShm) return "transport is not shm";
    return Join(testing::RunMatrixGroup(*comm, m));
  });
  ExpectAllOk(exits);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, ShmMatrix,
    ::testing::ValuesIn(testing::MatrixGroupParams({1, 2, 3, 4, 5, 7, 8},
                                                   testing::Grouping::kSmallAndBig)),
    [](const auto& param_info) { return testing::MatrixGroupName(param_info.param); });

// The direct all-gather posts one staging slot to every peer (Channel::SendToAll) and flushes
// before it returns; calls with other algorithms on the same links then reuse those slots.
// Alternating them, with every rank's data distinct per call, catches a slot overwritten while
// a slow peer still reads it.
TEST(ShmSharedSlots, BroadcastsAndRingsAlternateOnOneCommunicator) {
  const TempDir dir;
  for (int p : {3, 4}) {
    const auto exits = ForkRanks(p, [&](int rank) -> std::string {
      CommOptions o = ShmOptions(rank, p, dir.url());
      o.name = "alternate" + std::to_string(p);
      o.segment_bytes = 64 << 10;  // several segments per block, more slot reuse
      auto comm = Communicator::Create(o);
      if (!comm.ok()) return comm.status().ToString();
      const size_t block = (300 << 10) / sizeof(float);
      std::vector<float> mine(block);
      std::vector<float> all(block * static_cast<size_t>(p));
      for (int call = 0; call < 12; ++call) {
        for (size_t i = 0; i < block; ++i) {
          mine[i] = static_cast<float>((call * 7 + rank * 131 + static_cast<int>(i)) % 4096);
        }
        CallOptions options;
        options.algorithm = call % 3 == 2 ? "ring" : "direct";
        if (Status s =
                comm->AllGather(std::span<const float>(mine), std::span<float>(all), options);
            !s.ok()) {
          return s.ToString();
        }
        for (int q = 0; q < p; ++q) {
          for (size_t i = 0; i < block; i += 97) {
            const float want =
                static_cast<float>((call * 7 + q * 131 + static_cast<int>(i)) % 4096);
            if (all[static_cast<size_t>(q) * block + i] != want) {
              return "call " + std::to_string(call) + " (" + options.algorithm + "): block " +
                     std::to_string(q) + " element " + std::to_string(i) + " is " +
                     std::to_string(all[static_cast<size_t>(q) * block + i]) + ", want " +
                     std::to_string(want);
            }
          }
        }
      }
      return "";
    });
    ExpectAllOk(exits);
  }
}

TEST(ShmCreate, AutoPicksShmOnOneHostAndLeavesNothingInDevShm) {
  const TempDir dir;
  const auto exits = ForkRanks(3, [&](int rank) -> std::string {
    CommOptions o = ShmOptions(rank, 3, dir.url());
    o.transport = TransportKind::kAuto;
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    if (comm->transport() != TransportKind::kShm) return "kAuto did not pick shm";
    std::vector<int32_t> v(5, rank + 1);
    if (Status s = comm->AllReduce(std::span<int32_t>(v), ReduceOp::kSum); !s.ok()) {
      return s.ToString();
    }
    return v == std::vector<int32_t>(5, 6) ? "" : "wrong sum";
  });
  ExpectAllOk(exits);
  EXPECT_THAT(LeftoverSegments(exits[0].pid), ::testing::IsEmpty());
}

// A rank that posted its last message and then left is not a dead peer to a rank that has not
// read that message yet. The interleaving is forced every time, not left to the scheduler: the
// waiting rank's first unmet wait (base/wait.h's test hook) lets the root start, and returns
// only once the root's leaving is observable; only then does the wait ask whether it was
// interrupted. The root leaves in two ways: by exiting without closing its communicator (seen
// through its pidfd), and by closing it and living on (seen through its departure flag).
namespace finished_peer {
std::string g_dir;         // the test's directory, for the files the ranks meet through
bool g_root_exits = true;  // true: the root _exits; false: it closes its communicator
bool g_hooked = false;     // the hook ran its course (once)
std::string g_hook_error;

bool Exists(const std::string& name) { return fs::exists(g_dir + "/" + name); }
void Touch(const std::string& name) { std::ofstream(g_dir + "/" + name) << "\n"; }

// Runs in the waiting rank (0), inside its wait for the root's data.
void BeforeInterruptCheck() {
  internal::g_before_interrupt_check.store(nullptr);
  g_hooked = true;
  Touch("go");  // the root may post now
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  if (g_root_exits) {
    // The root wrote its pid before posting; wait until its pidfd says it has exited.
    while (!Exists("pid") && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::ifstream in(g_dir + "/pid");
    pid_t pid = 0;
    in >> pid;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      g_hook_error = "pidfd_open(" + std::to_string(pid) + ") failed";
      return;
    }
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 100) == 0 && std::chrono::steady_clock::now() < give_up) {
    }
    close(fd);
  } else {
    while (!Exists("closed") && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (std::chrono::steady_clock::now() >= give_up) g_hook_error = "the root never left";
}
}  // namespace finished_peer

class ShmFinishedPeer : public ::testing::TestWithParam<bool> {};

TEST_P(ShmFinishedPeer, ItsLastMessageIsReadNotReportedAsADeath) {
  const TempDir dir;
  finished_peer::g_dir = dir.url().substr(std::string("file://").size());
  finished_peer::g_root_exits = GetParam();
  constexpr int kRoot = 1;
  const auto exits = ForkRanks(2, [&](int rank) -> std::string {
    std::optional<Communicator> comm;
    {
      auto created = Communicator::Create(ShmOptions(rank, 2, dir.url()));
      if (!created.ok()) return "Create: " + created.status().ToString();
      comm.emplace(std::move(created).value());
    }
    std::vector<int32_t> v(100, rank == kRoot ? 7 : 0);
    if (rank != kRoot) {
      internal::g_before_interrupt_check.store(&finished_peer::BeforeInterruptCheck);
      const Status s = comm->Broadcast(std::span<int32_t>(v), kRoot);
      finished_peer::Touch("done");  // the root may go, whatever became of the call
      if (!finished_peer::g_hook_error.empty()) return finished_peer::g_hook_error;
      if (!finished_peer::g_hooked) return "the wait never reached the hook";
      if (!s.ok()) return s.ToString();
      return v == std::vector<int32_t>(100, 7) ? "" : "wrong data";
    }
    while (!finished_peer::Exists("go")) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    { std::ofstream(finished_peer::g_dir + "/pid.tmp") << getpid() << "\n"; }
    fs::rename(finished_peer::g_dir + "/pid.tmp", finished_peer::g_dir + "/pid");
    if (Status s = comm->Broadcast(std::span<int32_t>(v), kRoot); !s.ok()) return s.ToString();
    if (finished_peer::g_root_exits) _exit(0);  // gone, communicator and all, unclosed
    comm.reset();
    finished_peer::Touch("closed");
    // Lives on until rank 0 is done, so that only the departure can tell it has left.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!finished_peer::Exists("done") && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return "";
  });
  ExpectAllOk(exits);
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmFinishedPeer, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("RootExits")
                                              : std::string("RootClosesItsCommunicator");
                         });

TEST(ShmCreate, TcpStoreHostedByRankZero) {
  // Rank 0 serves the store on a port kept from everyone else.
  const testing::ReservedPort port;
  const std::string url = port.url();
  const auto exits = ForkRanks(4, [&](int rank) -> std::string {
    CommOptions o = ShmOptions(rank, 4, url);
    o.host_store = true;
    o.secret = "shm-test-secret";  // a TCP store admits only clients that prove the secret
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::vector<float> v(1000, 1.0f);
    if (Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kAvg); !s.ok()) {
      return s.ToString();
    }
    return v == std::vector<float>(1000, 1.0f) ? "" : "wrong avg";
  });
  ExpectAllOk(exits);
}

// Rank 1 joins first and stays (a long timeout); rank 0 joins once rank 1's record is in the
// store, so that within its 0.5 s only rank 2, which never comes, is missing.
TEST(ShmCreate, MissingRankIsNamedInTheDeadlineError) {
  const TempDir dir;
  const pid_t rank1 = fork();
  if (rank1 == 0) {
    CommOptions o = ShmOptions(1, 3, dir.url());
    o.timeout = std::chrono::seconds(60);
    Communicator::Create(o).status().IgnoreError();
    _exit(0);
  }
  ASSERT_GT(rank1, 0);
  const Status seated = testing::AwaitMeetingKey(dir.url(), "1/join/1");
  CommOptions o = ShmOptions(0, 3, dir.url());
  o.timeout = std::chrono::milliseconds(500);
  auto comm = seated.ok() ? Communicator::Create(o) : Result<Communicator>(seated);
  kill(rank1, SIGKILL);
  waitpid(rank1, nullptr, 0);
  ASSERT_TRUE(seated.ok()) << seated;
  ASSERT_FALSE(comm.ok()) << "Create succeeded without rank 2";
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("waited 0.5 s for rank 2 to join store file://"));
}

TEST(ShmCreate, RecreatingWithTheSameStoreAndNameStartsAfresh) {
  const TempDir dir;
  const auto exits = ForkRanks(2, [&](int rank) -> std::string {
    for (int round = 0; round < 3; ++round) {
      if (rank == 0 && round == 1) usleep(200'000);  // late: must not read round 0's keys
      auto comm = Communicator::Create(ShmOptions(rank, 2, dir.url()));
      if (!comm.ok()) return "round " + std::to_string(round) + ": " + comm.status().ToString();
      std::vector<int32_t> v(3, round);
      if (Status s = comm->AllReduce(std::span<int32_t>(v), ReduceOp::kSum); !s.ok()) {
        return s.ToString();
      }
      if (v != std::vector<int32_t>(3, 2 * round)) return "wrong sum";
    }
    return "";
  });
  ExpectAllOk(exits);
}

TEST(ShmFailure, KilledRankIsNamedByEverySurvivorWithinTheTimeout) {
  const TempDir dir;
  // Found through the pidfd, not the deadline.
  const std::vector<RankExit> exits = testing::RunKilledRankTrial(
      {.options = [&](int rank) { return ShmOptions(rank, 4, dir.url()); }, .elements = 1 << 18});
  EXPECT_THAT(LeftoverSegments(exits[0].pid), ::testing::IsEmpty());
}

TEST(ShmFailure, MismatchedOptionsAcrossRanksAreRejected) {
  const TempDir dir;
  const auto exits = ForkRanks(2, [&](int rank) -> std::string {
    CommOptions o = ShmOptions(rank, 2, dir.url());
    o.timeout = std::chrono::seconds(5);
    if (rank == 1) o.segment_bytes = 4096;  // rank 0 uses the default
    auto comm = Communicator::Create(o);
    // Both ranks learn it at the meeting, before anything is set up, with the same words.
    if (comm.ok()) return "joined a communicator with other options";
    if (comm.status().code() != StatusCode::kFailedPrecondition ||
        comm.status().message().find("disagree on their options") == std::string::npos ||
        comm.status().message().find("segment_bytes=4096") == std::string::npos) {
      return "unclear error: " + comm.status().ToString();
    }
    return "";
  });
  EXPECT_TRUE(exits[0].ok()) << exits[0].report;
  EXPECT_TRUE(exits[1].ok()) << exits[1].report;
}

}  // namespace
}  // namespace chorus
