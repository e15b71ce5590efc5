// Job isolation in the meeting (core/meet.h): ranks of different jobs never form one
// communicator on a shared store; a clash fails fast on every rank with a message that says so;
// rounds left by finished, failed or crashed meetings do not disturb later ones.
#include "core/meet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "support/group.h"
#include "support/reserved_port.h"
#include "support/store_process.h"
#include "support/timing.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct Process {
  std::string job;  // "A" or "B": what the rank contributes tells the jobs apart
  int rank;
  int size;
  milliseconds start_after;
  // A key of the meeting the process waits for before it joins (testing::AwaitMeetingKey):
  // orders the joins by what the store holds, not by how soon each process gets a CPU.
  std::string after = {};
};

// Each process joins `url` as its rank, then all-reduces its job's marker (A: 1, B: 100) and
// reports "ok <sum>" or "fail <seconds> <status>".
std::vector<std::string> RunProcesses(const std::vector<Process>& processes, const std::string& url,
                                      bool with_job_ids, milliseconds timeout,
                                      TransportKind kind = TransportKind::kShm) {
  const auto exits =
      testing::ForkRanks(static_cast<int>(processes.size()), [&](int i) -> std::string {
        const Process& me = processes[static_cast<size_t>(i)];
        std::this_thread::sleep_for(me.start_after);
        if (!me.after.empty()) {
          const Status s = testing::AwaitMeetingKey(url, me.after);
          if (!s.ok()) return "waiting for " + me.after + ": " + s.ToString();
        }
        CommOptions o = testing::GroupOptions(kind, me.rank, me.size, url);
        o.timeout = timeout;
        if (with_job_ids) o.job_id = me.job;
        const auto start = Clock::now();
        auto comm = Communicator::Create(o);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (!comm.ok()) {
          return "fail " + std::to_string(seconds) + " " + comm.status().ToString();
        }
        std::vector<int32_t> v(64, me.job == "A" ? 1 : 100);
        const Status s = comm->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
        if (!s.ok()) return "call failed: " + s.ToString();
        return "ok " + std::to_string(v[0]);
      });
  std::vector<std::string> reports;
  for (const auto& e : exits) reports.push_back(e.report);
  if (std::getenv("CHORUS_TEST_VERBOSE")) {
    for (const auto& r : reports) std::printf("  %s\n", r.c_str());
  }
  return reports;
}

// What a rank of `p`'s job reports when its communicator holds its own job's ranks only; any
// other sum (101, 201, ...) would be a communicator of two jobs.
std::string OwnJobSum(const Process& p) {
  return "ok " + std::to_string(p.size * (p.job == "A" ? 1 : 100));
}

// A rank's CPU is its own when every rank of its host is bound and none other to that CPU: as
// mpirun --bind-to core binds ranks. Ranks of other hosts do not count.
TEST(OwnCpu, OnlyARankBoundToACpuNoOtherRankOfItsHostIsBoundTo) {
  auto member = [](const std::string& host, const std::string& caps) {
    internal::MemberRecord m;
    m.host = host;
    m.caps = caps;
    return m;
  };
  EXPECT_EQ(member("a", "cpu=3").BoundCpu(), 3);
  EXPECT_EQ(member("a", "aesgcm cpu=12").BoundCpu(), 12);
  EXPECT_EQ(member("a", "cpu=7 aesgcm").BoundCpu(), 7);
  EXPECT_EQ(member("a", "aesgcm").BoundCpu(), -1);
  EXPECT_EQ(member("a", "").BoundCpu(), -1);
  EXPECT_EQ(member("a", "cpu=").BoundCpu(), -1);
  EXPECT_EQ(member("a", "cpu=x").BoundCpu(), -1);
  EXPECT_EQ(member("a", "cpu=-1").BoundCpu(), -1);
  EXPECT_EQ(member("a", "xcpu=4").BoundCpu(), -1);

  const std::vector<internal::MemberRecord> each_its_own{member("a", "cpu=0"),
                                                         member("a", "aesgcm cpu=1")};
  EXPECT_EQ(internal::OwnCpu(each_its_own, 0), 0);
  EXPECT_EQ(internal::OwnCpu(each_its_own, 1), 1);
  const std::vector<internal::MemberRecord> sharing{member("a", "cpu=0"), member("a", "cpu=0"),
                                                    member("a", "cpu=1")};
  EXPECT_EQ(internal::OwnCpu(sharing, 0), -1);
  EXPECT_EQ(internal::OwnCpu(sharing, 1), -1);
  EXPECT_EQ(internal::OwnCpu(sharing, 2), 1);
  const std::vector<internal::MemberRecord> one_unbound{member("a", "cpu=0"), member("a", "")};
  EXPECT_EQ(internal::OwnCpu(one_unbound, 0), -1);
  EXPECT_EQ(internal::OwnCpu(one_unbound, 1), -1);
  // Two hosts, each binding its ranks to CPUs 0 and 1; an unbound rank elsewhere changes nothing.
  const std::vector<internal::MemberRecord> hosts{member("a", "cpu=0"), member("a", "cpu=1"),
                                                  member("b", "cpu=0"), member("b", "cpu=1"),
                                                  member("c", "")};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(internal::OwnCpu(hosts, r), r % 2) << "rank " << r;
  EXPECT_EQ(internal::OwnCpu(hosts, 4), -1);
}

// Ranks bound each to a CPU of its own have a core each, though each may run on one CPU only;
// ranks bound to one CPU share it; unbound ranks count the CPUs they may run on.
TEST(JobCores, CountsTheCpusTheRanksOfEachHostRunOn) {
  auto member = [](const std::string& host, int cpus, const std::string& caps) {
    internal::MemberRecord m;
    m.host = host;
    m.cpus = cpus;
    m.caps = caps;
    return m;
  };
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=0"), member("a", 1, "cpu=1")}), 2);
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=0"), member("a", 1, "cpu=0")}), 1);
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=0"), member("a", 1, "cpu=0"),
                                member("a", 1, "cpu=1"), member("a", 1, "cpu=1")}),
            2);
  EXPECT_EQ(internal::JobCores({member("a", 8, ""), member("a", 4, "aesgcm")}), 4);
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=3"), member("a", 2, "")}), 2);
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=3"), member("a", 0, "")}), 1);
  EXPECT_EQ(internal::JobCores({member("a", 0, ""), member("a", 0, "")}), 1);
  // Summed over hosts: two bound ranks on "a", two unbound ranks on "b" that may use 16 CPUs.
  EXPECT_EQ(internal::JobCores({member("a", 1, "cpu=0"), member("a", 1, "cpu=1"),
                                member("b", 16, ""), member("b", 16, "")}),
            18);
}

// The reproduction: two 2-rank jobs on one store join in the order A0, B0, B1, A1. Before, they
// formed A0+B1 and B0+A1 and every all-reduce returned the other job's data. Each waits for
// what the one before it left in the store: A0's seat in round 1, B0's clash there (it found
// A0 in its seat), B1's seat in round 2.
std::vector<Process> InterleavedJobs() {
  return {{"A", 0, 2, milliseconds(0)},
          {"B", 0, 2, milliseconds(0), "1/join/0"},
          {"B", 1, 2, milliseconds(0), "1/clash"},
          {"A", 1, 2, milliseconds(0), "2/join/1"}};
}

TEST(JobIsolation, InterleavedJobsWithoutIdsFailFastAndNeverMix) {
  const testing::TempDir dir;
  const std::vector<Process> processes = InterleavedJobs();
  const auto reports = RunProcesses(processes, dir.url(), false, testing::kWrongPathWait);
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string& r = reports[i];
    SCOPED_TRACE("process " + std::to_string(i) + ": " + r);
    // Never a communicator of two jobs.
    if (r.rfind("ok ", 0) == 0) {
      EXPECT_EQ(r, OwnJobSum(processes[i]));
      continue;
    }
    EXPECT_THAT(r, HasSubstr("FAILED_PRECONDITION"));
    EXPECT_THAT(r, HasSubstr("two jobs share this store and name"));
    // Fast: long before the deadline.
    EXPECT_LT(std::stod(r.substr(5)), testing::kPromptSeconds);
  }
}

TEST(JobIsolation, InterleavedJobsWithIdsEachMeetTheirOwn) {
  const testing::TempDir dir;
  const std::vector<Process> processes = {{"A", 0, 2, milliseconds(0)},
                                          {"B", 0, 2, milliseconds(400)},
                                          {"B", 1, 2, milliseconds(800)},
                                          {"A", 1, 2, milliseconds(1200)}};
  const auto reports = RunProcesses(processes, dir.url(), true, std::chrono::seconds(20));
  EXPECT_EQ(reports[0], "ok 2");
  EXPECT_EQ(reports[1], "ok 200");
  EXPECT_EQ(reports[2], "ok 200");
  EXPECT_EQ(reports[3], "ok 2");
}

// The same over one TCP store (and the TCP transport) with one secret.
TEST(JobIsolation, InterleavedJobsOnOneTcpStore) {
  const testing::StoreProcess server({.secret = testing::kTestSecret});
  ASSERT_TRUE(server.ok());
  const std::vector<Process> processes = InterleavedJobs();
  const auto reports =
      RunProcesses(processes, server.url(), false, testing::kWrongPathWait, TransportKind::kTcp);
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string& r = reports[i];
    if (r.rfind("ok ", 0) == 0) {
      EXPECT_EQ(r, OwnJobSum(processes[i]));
    } else {
      EXPECT_THAT(r, HasSubstr("two jobs share this store")) << r;
    }
  }
}

// Jobs of different sizes on one store and name: whoever meets a rank of the other job fails
// fast naming both sizes. A rank that comes only after the others of its job have failed waits
// alone in a fresh round, and its deadline error then tells of the clash before it.
TEST(JobIsolation, JobsOfDifferentSizesFailFastOrNameTheClash) {
  const testing::TempDir dir;
  // B1 comes once A0 holds its seat in round 1 and B2 once B1 holds its own there (so that B1
  // fails in round 1 and leaves seat 1 of round 2 to A1); A1 and B0 come once round 1 has
  // failed (had A1 come first, each job would meet its own and nothing would clash).
  const std::vector<Process> processes = {{"A", 0, 2, milliseconds(0)},
                                          {"B", 1, 3, milliseconds(300), "1/join/0"},
                                          {"B", 2, 3, milliseconds(300), "1/join/1"},
                                          {"A", 1, 2, milliseconds(600), "1/clash"},
                                          {"B", 0, 3, milliseconds(900), "1/clash"}};
  // Those that meet another job's ranks fail at once; the rest wait out the timeout, which is
  // kWrongPathWait so that "at once" (kPrompt) cannot be the timeout.
  const auto reports = RunProcesses(processes, dir.url(), false, testing::kWrongPathWait);
  int fast = 0;
  bool named_sizes = false;
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string& r = reports[i];
    if (r.rfind("ok ", 0) == 0) {
      EXPECT_EQ(r, OwnJobSum(processes[i]));
      continue;
    }
    EXPECT_THAT(r, HasSubstr("two jobs share this store")) << r;
    named_sizes = named_sizes || r.find("with size") != std::string::npos;
    if (r.find("FAILED_PRECONDITION") != std::string::npos) {
      ++fast;
      EXPECT_LT(std::stod(r.substr(5)), testing::kPromptSeconds) << r;
    } else {
      EXPECT_THAT(r, HasSubstr("DEADLINE_EXCEEDED")) << r;
      EXPECT_THAT(r, HasSubstr("an earlier meeting of communicator")) << r;
    }
  }
  EXPECT_TRUE(named_sizes);
  EXPECT_GE(fast, 3);
}

// Jobs one after another on a lasting store: each meets in a fresh round.
TEST(JobIsolation, JobsOneAfterAnotherOnOneFileStore) {
  const testing::TempDir dir;
  for (const char* job : {"A", "B", "A"}) {
    const std::vector<Process> processes = {{job, 0, 2, milliseconds(0)},
                                            {job, 1, 2, milliseconds(0)}};
    const auto reports = RunProcesses(processes, dir.url(), false, std::chrono::seconds(20));
    const std::string want = std::string(job) == "A" ? "ok 2" : "ok 200";
    EXPECT_EQ(reports[0], want);
    EXPECT_EQ(reports[1], want);
  }
}

// A meeting that failed (rank 1 never came) or crashed (rank 0 killed while waiting) does not
// hold up the next job on the store.
TEST(JobIsolation, FailedAndCrashedMeetingsDoNotHoldUpTheNext) {
  const testing::TempDir dir;
  // Failed: rank 0 alone, 1 s timeout.
  auto lonely = RunProcesses({{"A", 0, 2, milliseconds(0)}}, dir.url(), false, milliseconds(1000));
  EXPECT_THAT(lonely[0], HasSubstr("DEADLINE_EXCEEDED")) << lonely[0];
  EXPECT_THAT(lonely[0], HasSubstr("rank 1 to join")) << lonely[0];
  // Crashed: rank 0 killed mid-meeting, its record still claiming the seat.
  const pid_t crashed = fork();
  if (crashed == 0) {
    CommOptions o = testing::GroupOptions(TransportKind::kShm, 0, 2, dir.url());
    o.timeout = std::chrono::seconds(60);
    Communicator::Create(o).status().IgnoreError();
    _exit(0);
  }
  // Killed once its record holds seat 0 of round 2 (round 1 is the failed meeting's).
  const Status seated = testing::AwaitMeetingKey(dir.url(), "2/join/0");
  kill(crashed, SIGKILL);
  waitpid(crashed, nullptr, 0);
  ASSERT_TRUE(seated.ok()) << seated;
  const auto start = Clock::now();
  const auto reports = RunProcesses({{"B", 0, 2, milliseconds(0)}, {"B", 1, 2, milliseconds(0)}},
                                    dir.url(), false, std::chrono::seconds(20));
  EXPECT_EQ(reports[0], "ok 200");
  EXPECT_EQ(reports[1], "ok 200");
  EXPECT_LT(Clock::now() - start, testing::kPrompt);  // not the 20 s timeout
}

// torchrun's MASTER_ADDR:MASTER_PORT given to two jobs: the second job's rank 0 cannot serve
// the port, and its rank 1, which reached the first job's store, fails at once naming that job.
TEST(JobIsolation, ASecondJobOnTheSamePortIsToldWhoseStoreItIs) {
  const testing::ReservedPort port;  // for the first job's rank 0 to serve its store on
  const std::string url = port.url();
  // The processes order themselves through a store of their own: the second job starts once the
  // first has met, and the first keeps its store up until the second job's ranks have failed.
  const testing::TempDir signals;
  const auto exits = testing::ForkRanks(4, [&](int i) -> std::string {
    const bool second = i >= 2;
    auto side = OpenStore(signals.url());
    if (!side.ok()) return "side store: " + side.status().ToString();
    if (second) {
      const Status s = (*side)->Wait({"first-met"}, testing::kWrongPathWait);
      if (!s.ok()) return "waiting for the first job: " + s.ToString();
    }
    CommOptions o = testing::GroupOptions(TransportKind::kShm, i % 2, 2, url);
    o.host_store = true;
    o.job_id = second ? "job-B" : "job-A";
    o.timeout = std::chrono::seconds(20);
    const auto start = Clock::now();
    auto comm = Communicator::Create(o);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!second) {
      if (!comm.ok()) return "first job: " + comm.status().ToString();
      if (Status s = (*side)->Set("first-met", "1"); !s.ok()) return s.ToString();
      // Keep the store up until both ranks of the second job are done.
      const Status s = (*side)->Wait({"second-2", "second-3"}, testing::kWrongPathWait);
      return s.ok() ? "" : "waiting for the second job: " + s.ToString();
    }
    std::string verdict;
    if (comm.ok()) {
      verdict = "the second job formed a communicator";
    } else if (seconds > testing::kPromptSeconds) {
      verdict = "slow: " + std::to_string(seconds) + " s: " + comm.status().ToString();
    } else {
      const std::string want = i == 2 ? "another job serving its store on this port"
                                      : "is served by rank 0 of another job";
      if (comm.status().message().find(want) == std::string::npos) {
        verdict = "unclear: " + comm.status().ToString();
      }
    }
    if (Status s = (*side)->Set("second-" + std::to_string(i), "1"); !s.ok()) return s.ToString();
    return verdict;
  });
  for (size_t i = 0; i < exits.size(); ++i)
    EXPECT_TRUE(exits[i].ok()) << i << ": " << exits[i].report;
}

}  // namespace
}  // namespace chorus
