// On a deadline, every survivor's error names the rank that is actually behind, not the
// neighbour it happened to wait on: a rank stopped with SIGSTOP in the middle of a run of
// all-reduces, on shm, TCP and hybrid (shm within a fake host, TCP across) ranks, and a rank
// that never enters the call on thread ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"
#include "support/proc_stat.h"
#include "support/timing.h"
#include "transport/census.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr int kRanks = 4;
constexpr int kFrozen = 2;

enum class Layout { kShm, kTcp, kHybrid };

std::string LayoutName(Layout l) {
  return l == Layout::kShm ? "shm" : l == Layout::kTcp ? "tcp" : "hybrid";
}

// Options for rank `rank` of a kRanks-rank group of `layout` meeting at `url`, with the test
// wait mode. For hybrid ranks the calling process (a forked rank) first moves to a UTS
// namespace of its own named for its fake host, two ranks a host; "" or why that failed.
std::string LayoutOptions(Layout layout, int rank, const std::string& url, CommOptions* o) {
  *o = testing::GroupOptions(layout == Layout::kShm   ? TransportKind::kShm
                             : layout == Layout::kTcp ? TransportKind::kTcp
                                                      : TransportKind::kAuto,
                             rank, kRanks, url);
  o->wait = testing::TestWaitMode();
  if (layout != Layout::kHybrid) return "";
  if (unshare(CLONE_NEWUTS) != 0) return "unshare failed";
  const std::string host = "chorus-blame-host-" + std::to_string(rank / 2);
  if (sethostname(host.c_str(), host.size()) != 0) return "sethostname failed";
  o->listen = "127.0.0.1";
  return "";
}

// Where the starved rank's pid is written once it has been stopped (ARankStarvedOfCpu...).
std::string g_starved_pid_file;

// Census hook of the starved-rank trial, in every rank: a survivor has taken its first census
// after its deadline, which found the starved rank silent. The rank is woken now, so that it is
// heard only when the census asks again.
void WakeStarvedRank() {
  const auto until = std::chrono::steady_clock::now() + testing::kWrongPathWait;
  pid_t pid = 0;
  while (!(std::ifstream(g_starved_pid_file) >> pid) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (pid > 0) kill(pid, SIGCONT);
}

// One trial: rank `frozen` stops itself after a random delay, mid-call or between calls, or
// (`at_once`) as soon as its communicator is made, before its first call, when its peers may
// not have connected to it yet; every other rank must fail with an error naming it. The lowest
// other rank then kills the stopped process.
// With `starved` >= 0, that rank is stopped too, as a live rank held off the CPU would look,
// once the frozen rank has stopped and it waits in the call the others wait in; the first
// census a survivor takes wakes it (WakeStarvedRank). It must not be named: the census asks
// again while more than one rank could be the cause, and hears the starved rank then.
std::vector<std::string> FrozenRankTrial(Layout layout, unsigned seed, int frozen = kFrozen,
                                         bool at_once = false, int starved = -1) {
  const testing::TempDir dir;
  const std::string pid_file = dir.path() + "/frozen.pid";
  const std::string starved_who = dir.path() + "/starved.who";
  g_starved_pid_file = dir.path() + "/starved.pid";
  internal::g_after_census_for_testing.store(starved >= 0 ? &WakeStarvedRank : nullptr);
  int waker = 0;  // the lowest rank that neither stops nor is stopped
  while (waker == frozen || waker == starved) ++waker;
  const auto exits = testing::ForkRanks(kRanks, [&](int rank) -> std::string {
    CommOptions o;
    if (std::string why = LayoutOptions(layout, rank, dir.url(), &o); !why.empty()) return why;
    // The calls' deadline: the census asks for answers for a quarter of it, and a sanitized
    // rank answers slowly. Create keeps the communicator's own deadline, which only catches a
    // hang: under load the meeting may take longer than a call's deadline, and a rank whose
    // Create fails leaves the job before it could stop.
    CallOptions call;
    call.timeout = milliseconds(2000 * testing::SanitizerSlowdown());
    // In a ring every rank waits on the one before it: the survivors' chains of waits pass
    // through the rank after the frozen one, which the starved-rank test stops.
    if (starved >= 0) call.algorithm = "ring";
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return "Create: " + comm.status().ToString();
    std::thread freezer;
    if (rank == frozen && at_once) {
      std::ofstream(pid_file) << getpid() << "\n";
      kill(getpid(), SIGSTOP);
    } else if (rank == frozen) {
      std::ofstream(pid_file) << getpid() << "\n";
      freezer = std::thread([seed] {
        std::this_thread::sleep_for(milliseconds(100 + std::mt19937(seed)() % 300));
        kill(getpid(), SIGSTOP);
      });
      freezer.detach();
    }
    if (rank == starved) std::ofstream(starved_who) << getpid() << "\n";
    if (starved >= 0 && rank == waker) {
      // Stops the starved rank once the frozen one is stopped and every rank has had time to
      // block in the call it cannot finish, and the starved one is asleep in its wait there.
      std::thread([pid_file, starved_who] {
        pid_t frozen_pid = 0, pid = 0;
        while (!(std::ifstream(pid_file) >> frozen_pid) ||
               testing::ProcessState(frozen_pid) != 'T' || !(std::ifstream(starved_who) >> pid)) {
          std::this_thread::sleep_for(milliseconds(5));
        }
        std::this_thread::sleep_for(milliseconds(300));
        while (testing::ProcessState(pid) != 'S') std::this_thread::sleep_for(milliseconds(1));
        kill(pid, SIGSTOP);
        while (testing::ProcessState(pid) != 'T') std::this_thread::sleep_for(milliseconds(1));
        std::ofstream(g_starved_pid_file + ".tmp") << pid << "\n";
        std::rename((g_starved_pid_file + ".tmp").c_str(), g_starved_pid_file.c_str());
      }).detach();
    }
    std::vector<float> v(size_t{1} << 15, 1.0f);
    for (int i = 0; i < 1000000; ++i) {
      const Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kMax, call);
      if (s.ok()) continue;
      std::string report;
      if (s.code() != StatusCode::kDeadlineExceeded) report += "code: " + s.ToString() + "\n";
      if (s.message().find("rank " + std::to_string(frozen) + " is behind") == std::string::npos) {
        report +=
            "does not name rank " + std::to_string(frozen) + " as behind: " + s.ToString() + "\n";
      }
      // Killed only once every survivor has its verdict, so that none sees it exit.
      std::ofstream(dir.path() + "/done." + std::to_string(rank)) << "\n";
      {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (int r = 0; r < kRanks; ++r) {
          const std::string done = dir.path() + "/done." + std::to_string(r);
          while (r != frozen && !std::ifstream(done) &&
                 std::chrono::steady_clock::now() < give_up) {
            std::this_thread::sleep_for(milliseconds(10));
          }
        }
        pid_t frozen_pid = 0;
        std::ifstream(pid_file) >> frozen_pid;
        const int killer = frozen == 0 ? 1 : 0;
        if (rank == killer && frozen_pid > 0) kill(frozen_pid, SIGKILL);
      }
      return report;
    }
    return "the collectives never failed";
  });
  std::vector<std::string> problems;
  for (int r = 0; r < kRanks; ++r) {
    if (r == frozen) {
      // Stopped until a survivor kills it: any other end (an exit, another signal) means it ran on
      // or died before the survivors had their verdicts, and says how.
      const int status = exits[static_cast<size_t>(r)].status;
      if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        problems.push_back("the stopped rank " + std::to_string(r) +
                           " ended otherwise than by a survivor's SIGKILL: " +
                           (WIFSIGNALED(status)
                                ? "signal " + std::to_string(WTERMSIG(status))
                                : "exit status " + std::to_string(WEXITSTATUS(status))) +
                           ", report: " + exits[static_cast<size_t>(r)].report);
      }
      continue;
    }
    if (!exits[static_cast<size_t>(r)].ok()) {
      problems.push_back("rank " + std::to_string(r) + ": " + exits[static_cast<size_t>(r)].report);
    }
  }
  return problems;
}

class FrozenRank : public ::testing::TestWithParam<Layout> {};

TEST_P(FrozenRank, EverySurvivorNamesTheStoppedRank) {
  if (GetParam() == Layout::kHybrid && geteuid() != 0) {
    GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  }
  // One trial in the TSan build, where each takes 8-10 s: it looks for races, which one finds
  // as well as three.
  const unsigned trials = testing::SanitizerSlowdown() >= 4 ? 1 : 3;
  for (unsigned trial = 0; trial < trials; ++trial) {
    for (const std::string& p : FrozenRankTrial(GetParam(), 7 * trial + 1)) {
      ADD_FAILURE() << "trial " << trial << ": " << p;
    }
  }
}

// Stopped before its first call: over TCP only the lower rank of a pair dials, so a peer that
// never sent to it may still have to ask it, or ask through it, who is behind.
TEST_P(FrozenRank, EverySurvivorNamesARankStoppedBeforeItsFirstCall) {
  if (GetParam() == Layout::kHybrid && geteuid() != 0) {
    GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  }
  // Over TCP rank 0 dials every peer, rank 3 none, rank 1 some; shm and hybrid ranks read or
  // dial each other alike, and one case stands for the rest.
  const std::vector<int> stopped =
      GetParam() == Layout::kTcp ? std::vector<int>{0, 1, 3} : std::vector<int>{1};
  for (int frozen : stopped) {
    for (const std::string& p : FrozenRankTrial(GetParam(), 1, frozen, true)) {
      ADD_FAILURE() << "rank " << frozen << " stopped: " << p;
    }
  }
}

// A live rank can look stopped while it gets no CPU (a busy machine, a sanitizer): rank 3, the
// one after the frozen rank 2 in the ring, is stopped in the call the others wait in, and
// resumed after the first survivor's first census. The survivors' chains of waits run through
// rank 3 to rank 2; the census asks again until rank 3 is heard, and every survivor, rank 3
// included, names rank 2 alone. (Over TCP a survivor may also have its answer from rank 3 from
// before it stopped: the census keeps the answers of the call.)
TEST_P(FrozenRank, ARankStarvedOfCpuMeanwhileIsHeardAndNotNamed) {
  if (GetParam() == Layout::kHybrid && geteuid() != 0) {
    GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  }
  for (const std::string& p : FrozenRankTrial(GetParam(), 3, kFrozen, false, kFrozen + 1)) {
    ADD_FAILURE() << p;
  }
  internal::g_after_census_for_testing.store(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Layouts, FrozenRank,
                         ::testing::Values(Layout::kShm, Layout::kTcp, Layout::kHybrid),
                         [](const auto& param_info) { return LayoutName(param_info.param); });

// The census asks again while more than one rank could be the cause and one of them looks
// stopped (census.h, Ambiguous).
TEST(Census, IsAmbiguousWhileASilentRankIsNotTheOnlyOneThatStandsOut) {
  const uint64_t call = 5;
  std::vector<internal::PeerState> states(4);
  for (internal::PeerState& s : states) {
    s.started = call + 1;
    s.active = static_cast<int64_t>(call);
    s.waiting_for = 0;
    s.idle_seconds = 0.01;
  }
  states[3].waiting_for = 1;
  states[1].answered = false;  // starved, or stopped
  states[2].answered = false;  // stopped
  EXPECT_TRUE(internal::Ambiguous(states, 3, call, 2.0));
  EXPECT_THAT(internal::Blame(states, 3, call, 2.0), HasSubstr("rank 1 is behind: no answer"));
  // The starved rank answers when asked again: it waits on rank 2, whom the verdict names.
  states[1] = states[0];
  states[1].waiting_for = 2;
  EXPECT_FALSE(internal::Ambiguous(states, 3, call, 2.0));
  EXPECT_THAT(internal::Blame(states, 3, call, 2.0), HasSubstr("rank 2 is behind: no answer"));
  // Read in shared memory instead: no sign of life for more than a quarter of the wait.
  states[2].answered = true;
  states[2].idle_seconds = 0.6;
  EXPECT_FALSE(internal::Ambiguous(states, 3, call, 2.0));
  EXPECT_THAT(internal::Blame(states, 3, call, 2.0), HasSubstr("rank 2 is behind: in call #5"));
  // Beside a rank that has not entered the call, a lifeless one may be starved too.
  states[0].started = call;
  states[0].active = -1;
  EXPECT_TRUE(internal::Ambiguous(states, 3, call, 2.0));
  // A quarter of the wait is not yet lifeless; an absent rank alone is no reason to ask again.
  states[2].idle_seconds = 0.4;
  EXPECT_FALSE(internal::Ambiguous(states, 3, call, 2.0));
  EXPECT_THAT(internal::Blame(states, 3, call, 2.0), HasSubstr("rank 0 is behind: not in call"));
  // Nor do the caller itself and a rank that gave up already.
  states[3].answered = false;
  states[1].failed = true;
  states[1].idle_seconds = 9;
  EXPECT_FALSE(internal::Ambiguous(states, 3, call, 2.0));
}

// Two would-be roots of a Gather wait on each other and no message shows it: every rank fails
// with kFailedPrecondition naming the two calls (in the call, or in the barrier after it for
// a rank that only sent), long before the deadline, on hybrid ranks too, where rank 1 finds
// rank 0 through shared memory and ranks 2 and 3 learn it over TCP.
class RootDisagreement : public ::testing::TestWithParam<Layout> {};

TEST_P(RootDisagreement, EveryRankOfAGatherWithTwoRootsFailsBeforeTheDeadline) {
  if (GetParam() == Layout::kHybrid && geteuid() != 0) {
    GTEST_SKIP() << "needs root for a UTS namespace per fake host";
  }
  const testing::TempDir dir;
  const Layout layout = GetParam();
  const auto exits = testing::ForkRanks(kRanks, [&](int rank) -> std::string {
    CommOptions o;
    if (std::string why = LayoutOptions(layout, rank, dir.url(), &o); !why.empty()) return why;
    o.timeout = std::chrono::seconds(60);  // only catches a hang: the answer comes long before
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return "Create: " + comm.status().ToString();
    std::vector<int32_t> mine(4, rank), all(4 * kRanks);
    Status s =
        comm->Gather(std::span<const int32_t>(mine), std::span<int32_t>(all), rank == 1 ? 1 : 0);
    if (s.ok()) s = comm->Barrier();
    if (s.code() != StatusCode::kFailedPrecondition ||
        s.message().find("ranks disagree on the call") == std::string::npos) {
      return "got " + s.ToString();
    }
    return "";
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(exits[static_cast<size_t>(r)].ok())
        << "rank " << r << ": " << exits[static_cast<size_t>(r)].report;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RootDisagreement,
                         ::testing::Values(Layout::kShm, Layout::kTcp, Layout::kHybrid),
                         [](const auto& param_info) { return LayoutName(param_info.param); });

// Thread ranks: rank 2 stays out of call #3 altogether (busy elsewhere until the others have
// given up on it); the others, whichever neighbour they wait on, name it. Only call #3 has a
// short deadline: calls #0 to #2 must succeed however slowly the ranks are scheduled.
TEST(AbsentRank, EveryThreadRankNamesTheRankThatNeverCame) {
  auto group = CreateLocalGroup(
      kRanks, {.timeout = testing::kWrongPathWait, .wait = testing::TestWaitMode()});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<Status> results(kRanks);
  std::atomic<int> finished{0};
  testing::RunRanks(*group, [&](Communicator& comm) {
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 4; ++i) {
      if (comm.rank() == kFrozen && i == 3) {
        const auto until = std::chrono::steady_clock::now() + testing::kWrongPathWait;
        while (finished.load() < kRanks - 1 && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(milliseconds(10));
        }
        return;
      }
      CallOptions options{.algorithm = "ring"};
      if (i == 3) options.timeout = milliseconds(500);
      results[static_cast<size_t>(comm.rank())] =
          comm.AllReduce(std::span<float>(v), ReduceOp::kSum, options);
      if (i < 3 && !results[static_cast<size_t>(comm.rank())].ok()) break;
    }
    finished.fetch_add(1);
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r == kFrozen) continue;
    EXPECT_EQ(results[static_cast<size_t>(r)].code(), StatusCode::kDeadlineExceeded);
    EXPECT_THAT(results[static_cast<size_t>(r)].message(),
                HasSubstr("rank 2 is behind: not in call #3 (it has started 3 calls"))
        << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus
