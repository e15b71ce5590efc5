// Tests of `chorus launch`: they run the built chorus binary (CHORUS_CLI, set by CMake) on small
// `sh -c` programs and check its exit status, its notes on stderr and the ranks' prefixed output.
// Ranks that must be in a given state before something happens (a trap installed, a line printed)
// say so through marker files or output lines; nothing relies on sleeps being long enough, and
// the only time bounds are loose ones (< 10 s) where the alternative is a 30 s sleep.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/proc_stat.h"
#include "support/temp_dir.h"
#include "support/timing.h"

#ifndef CHORUS_CLI
#error "CHORUS_CLI must name the chorus binary (tests/CMakeLists.txt sets it)"
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAreArray;

// Nothing in these tests should take longer; a launcher still running then has hung.
constexpr auto kHardLimit = std::chrono::seconds(30);
using chorus::testing::kPromptSeconds;  // support/timing.h
using chorus::testing::ProcStat;        // support/proc_stat.h
using chorus::testing::ReadProcStat;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "[rank] ", the launcher's line prefix. Appended piece by piece: GCC 12 at -O3 warns
// -Wrestrict (a false positive, GCC bug 105651) about "[" + std::to_string(rank).
std::string RankTag(int rank) {
  std::string tag = "[";
  tag += std::to_string(rank);
  tag += "] ";
  return tag;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

struct Outcome {
  int exit_code = -1;  // -1 when the launcher did not exit normally
  int signal = 0;      // the signal that ended the launcher, if any
  std::string out;
  std::string err;
  double seconds = 0;
};

// One run of `chorus launch ARGS...`, with its stdout and stderr captured through pipes.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args,
                    const std::vector<std::pair<std::string, std::string>>& env = {}) {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
    std::vector<std::string> argv_storage = {CHORUS_CLI, "launch"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      // Ranks inherit the launcher's dispositions, and `sh` cannot trap a signal it was started
      // with ignored; a test runner started as a background job (SIGINT ignored) must not
      // change what these tests see.
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(250);
    }
    ::close(out[1]);
    ::close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }

  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  ~Launcher() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }

  // Reads output until `done(out, err)` holds; false at EOF or after the hard limit.
  bool ReadUntil(const std::function<bool(const std::string&, const std::string&)>& done) {
    while (!done(out_, err_)) {
      if (!ReadSome()) return done(out_, err_);
    }
    return true;
  }

  void Signal(int sig) const { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }

  // Reads both streams to EOF and reaps the launcher (killing it past the hard limit).
  Outcome Finish() {
    while (ReadSome()) {
    }
    Outcome outcome;
    int status = 0;
    if (fds_[0] >= 0 || fds_[1] >= 0) ::kill(pid_, SIGKILL);  // the hard limit ran out
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    outcome.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
    outcome.out = out_;
    outcome.err = err_;
    return outcome;
  }

 private:
  // One poll + read round; false when both streams are closed or the hard limit has passed.
  bool ReadSome() {
    pollfd fds[2];
    int n = 0;
    for (int fd : fds_) {
      if (fd >= 0) fds[n++] = pollfd{.fd = fd, .events = POLLIN, .revents = 0};
    }
    auto left = kHardLimit - (Clock::now() - start_);
    if (n == 0 || left <= Clock::duration::zero()) return false;
    int timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    int ready = ::poll(fds, static_cast<nfds_t>(n), timeout);
    if (ready < 0 && errno == EINTR) return true;
    if (ready <= 0) return false;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int& fd = fds[i].fd == fds_[0] ? fds_[0] : fds_[1];
      std::string& sink = &fd == &fds_[0] ? out_ : err_;
      char buffer[4096];
      ssize_t got = ::read(fd, buffer, sizeof(buffer));
      if (got > 0) {
        sink.append(buffer, static_cast<size_t>(got));
      } else {
        ::close(fd);
        fd = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string out_;
  std::string err_;
  Clock::time_point start_;
};

Outcome Launch(const std::vector<std::string>& args,
               const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return Launcher(args, env).Finish();
}

// A fresh directory for marker files, removed afterwards.
class LaunchTest : public ::testing::Test {
 protected:
  std::string Dir() const { return dir_.string(); }

  const chorus::testing::TempDir tmp_{"chorus-launch-test"};
  const fs::path dir_ = tmp_.path();
};

// ------------------------------------------------------------------ exit status

TEST_F(LaunchTest, AllRanksSucceedingExitsZeroQuietly) {
  Outcome r = Launch({"-n", "3", "sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST_F(LaunchTest, SingleRankJob) {
  Outcome r = Launch({"-n", "1", "sh", "-c", "echo solo $CHORUS_RANK/$CHORUS_WORLD_SIZE"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "[0] solo 0/1\n");
}

// --bind core: each local rank on a CPU of its own, in order, inherited by what it runs; more
// ranks than CPUs run unbound, with a note. The default leaves the ranks' affinity alone.
TEST_F(LaunchTest, BindCoreGivesEachRankItsOwnCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  const std::string show = "grep Cpus_allowed_list /proc/self/status | tr -d ' \t'";
  if (cpus.size() >= 2) {
    Outcome r = Launch({"-n", "2", "--bind", "core", "--no-prefix", "sh", "-c",
                        "echo $CHORUS_RANK $(" + show + ")"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines, (std::vector<std::string>{"0 Cpus_allowed_list:" + std::to_string(cpus[0]),
                                               "1 Cpus_allowed_list:" + std::to_string(cpus[1])}));
  }
  const std::string too_many = std::to_string(cpus.size() + 1);
  Outcome crowded = Launch({"-n", too_many, "--bind", "core", "sh", "-c", "exit 0"});
  EXPECT_EQ(crowded.exit_code, 0);
  EXPECT_NE(crowded.err.find("--bind core: " + too_many + " ranks but " +
                             std::to_string(cpus.size()) + " CPUs; the ranks run unbound"),
            std::string::npos)
      << crowded.err;
  Outcome unbound = Launch({"-n", "1", "--no-prefix", "sh", "-c", show});
  EXPECT_EQ(unbound.exit_code, 0);
  if (cpus.size() >= 2) {  // still allowed every CPU, not just the first
    EXPECT_EQ(unbound.out.find("Cpus_allowed_list:" + std::to_string(cpus[0]) + "\n"),
              std::string::npos)
        << unbound.out;
  }
}

TEST_F(LaunchTest, FailingRankDecidesTheExitCodeAndStopsTheOthers) {
  Outcome r = Launch({"-n", "4", "sh", "-c", "[ $CHORUS_RANK = 2 ] && exit 3; sleep 30"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("rank 2 exited with status 3; stopping the other 3 ranks"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(LaunchTest, RankKilledBySignalStopsTheJobWith128PlusSignal) {
  Outcome r = Launch({"-n", "4", "sh", "-c", "[ $CHORUS_RANK = 1 ] && kill -9 $$; sleep 30"});
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_THAT(r.err, HasSubstr("rank 1 was killed by signal 9 (Killed); stopping the other 3"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(LaunchTest, FirstFailureWinsOverFailuresCausedByTheStop) {
  // Rank 0 answers the launcher's SIGTERM with status 9; rank 1 fails first (once rank 0's trap is
  // in place), so the job's status is rank 1's 4, and only rank 1's failure is reported.
  std::string script = "d=" + Dir() + R"(
    if [ $CHORUS_RANK = 0 ]; then
      trap 'exit 9' TERM; touch $d/ready; sleep 30 & wait $!
    else
      while [ ! -e $d/ready ]; do sleep 0.01; done; exit 4
    fi)";
  Outcome r = Launch({"-n", "2", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_THAT(r.err, HasSubstr("rank 1 exited with status 4; stopping the other 1 rank\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("rank 0")));
}

TEST_F(LaunchTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  std::string script = "d=" + Dir() + R"(
    if [ $CHORUS_RANK = 0 ]; then
      trap '' TERM; touch $d/ready; sleep 30
    else
      while [ ! -e $d/ready ]; do sleep 0.01; done; exit 5
    fi)";
  Outcome r = Launch({"-n", "2", "--grace-ms", "200", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 5);  // not 137: the SIGKILL was the launcher's doing
  EXPECT_THAT(r.err, HasSubstr("rank 0 still running 200 ms after being told to stop; sending "
                               "SIGKILL"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(LaunchTest, TimeoutKillsTheJobAndExits124) {
  Outcome r = Launch({"-n", "2", "--timeout-ms", "200", "sleep", "30"});
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_THAT(r.err, HasSubstr("timed out after 200 ms; stopping 2 ranks"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(LaunchTest, ExecFailureInsideTheRankIsReported) {
  // A script without "#!" runs under /bin/sh, as with execvp().
  fs::path script = dir_ / "no-shebang";
  std::ofstream(script) << "echo script $CHORUS_RANK\n";
  fs::permissions(script, fs::perms::owner_all);
  Outcome r = Launch({"-n", "2", script.string()});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] script 0", "[1] script 1"}));
}

// ------------------------------------------------------------------ signals

TEST_F(LaunchTest, SigtermIsForwardedToEveryRank) {
  Launcher launcher(
      {"-n", "3", "sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 30 & wait $!"});
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "ready\n") == 3; }));
  launcher.Signal(SIGTERM);
  Outcome r = launcher.Finish();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_THAT(r.err, HasSubstr("received SIGTERM; forwarding it to 3 ranks"));
  for (int rank = 0; rank < 3; ++rank) {
    std::string line = RankTag(rank) + "got TERM\n";
    EXPECT_EQ(Count(r.out, line), 1u) << line << "in:\n" << r.out;  // forwarded exactly once
  }
  EXPECT_LT(r.seconds, kPromptSeconds);
}

// How many processes below `root` (its children, theirs, ...) run the program `name`.
size_t DescendantsNamed(pid_t root, const std::string& name) {
  std::map<pid_t, ProcStat> processes;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid_text = entry.path().filename().string();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(pid_text);
    if (auto stat = ReadProcStat(pid)) processes.emplace(pid, std::move(*stat));  // or gone
  }
  size_t count = 0;
  for (const auto& [pid, stat] : processes) {
    if (stat.comm != name) continue;
    for (pid_t up = stat.ppid; up > 1;) {
      if (up == root) {
        ++count;
        break;
      }
      const auto it = processes.find(up);
      up = it == processes.end() ? 0 : it->second.ppid;
    }
  }
  return count;
}

TEST_F(LaunchTest, SigintReachesTheWholeProcessTreeOfEachRank) {
  // The rank is a shell waiting for `sleep`; both die of SIGINT, so the status is 128 + 2.
  Launcher launcher({"-n", "2", "sh", "-c", "echo ready; sleep 30"});
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "ready\n") == 2; }));
  // Both `sleep`s must have started: a shell between its fork and the exec of `sleep` defers
  // the signal, and the launcher then (rightly) kills the rank once its grace has passed.
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (DescendantsNamed(launcher.pid(), "sleep") < 2 && Clock::now() < until) ::usleep(5'000);
  ASSERT_EQ(DescendantsNamed(launcher.pid(), "sleep"), 2u);
  launcher.Signal(SIGINT);
  Outcome r = launcher.Finish();
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_THAT(r.err, HasSubstr("received SIGINT; forwarding it to 2 ranks"));
  EXPECT_THAT(r.err, HasSubstr("was killed by signal 2 (Interrupt)"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

// True once `pid` has exited (gone, or a zombie waiting for init), waiting up to 10 s for it.
bool ProcessEnds(pid_t pid) {
  for (auto start = Clock::now(); Clock::now() - start < chorus::testing::kPrompt;) {
    const std::optional<ProcStat> stat = ReadProcStat(pid);
    if (!stat || stat->state == 'Z') return true;
    ::usleep(10'000);
  }
  return false;
}

TEST_F(LaunchTest, RanksHandlingTheSignalDecideAndTheirLeftoversAreKilled) {
  // The background `sleep` ignores SIGINT (sh does that for `&` commands), so it outlives its
  // rank; as the job was stopped, the launcher kills it with the rank's process group.
  Launcher launcher(
      {"-n", "2", "sh", "-c", "trap 'exit 0' INT; sleep 30 & echo ready $!; wait $!"});
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "ready ") == 2; }));
  std::vector<pid_t> sleepers;
  for (const std::string& line : Lines(launcher.out())) {
    sleepers.push_back(std::stoi(line.substr(line.find("ready ") + 6)));
  }
  launcher.Signal(SIGINT);
  Outcome r = launcher.Finish();
  EXPECT_EQ(r.exit_code, 0);
  for (pid_t pid : sleepers) {
    if (!ProcessEnds(pid)) {
      ADD_FAILURE() << "the rank's background sleep " << pid << " survived the job";
      ::kill(pid, SIGKILL);
    }
  }
}

// A SIGKILLed launcher cannot clean up; its reaper does, for every process of every rank and
// not only the launcher's children: here the rank's shell runs a second shell that becomes a
// `sleep` (a grandchild of the launcher), then would print "done".
TEST_F(LaunchTest, AKilledLauncherLeavesNoProcessOfAnyRankPromptly) {
  Launcher launcher(
      {"-n", "3", "sh", "-c", "sh -c 'echo ready $$; exec sleep 30'; echo done"});
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "ready ") == 3; }));
  std::vector<pid_t> sleepers;
  for (const std::string& line : Lines(launcher.out())) {
    sleepers.push_back(std::stoi(line.substr(line.find("ready ") + 6)));
  }
  const auto killed = Clock::now();
  launcher.Signal(SIGKILL);
  for (pid_t pid : sleepers) {
    if (!ProcessEnds(pid)) {
      ADD_FAILURE() << "the rank's sleep " << pid << " survived the launcher";
      ::kill(pid, SIGKILL);
    }
  }
  // Promptly, not when the ranks' 30-second sleeps would end.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), kPromptSeconds);
  const Outcome r = launcher.Finish();
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_THAT(r.out, Not(HasSubstr("done")));
}

// ------------------------------------------------------------------ output

TEST_F(LaunchTest, EveryLineIsPrefixedWithItsRankOnItsOwnStream) {
  Outcome r = Launch({"-n", "3", "sh", "-c",
                      "echo out-$CHORUS_RANK-a; echo err-$CHORUS_RANK-a >&2; "
                      "echo out-$CHORUS_RANK-b; echo err-$CHORUS_RANK-b >&2; "
                      "printf tail-$CHORUS_RANK >&2"});
  EXPECT_EQ(r.exit_code, 0);
  std::vector<std::string> out = Lines(r.out);
  std::vector<std::string> err = Lines(r.err);
  EXPECT_THAT(out, UnorderedElementsAreArray({"[0] out-0-a", "[0] out-0-b", "[1] out-1-a",
                                              "[1] out-1-b", "[2] out-2-a", "[2] out-2-b"}));
  EXPECT_THAT(err, UnorderedElementsAreArray({"[0] err-0-a", "[0] err-0-b", "[0] tail-0",
                                              "[1] err-1-a", "[1] err-1-b", "[1] tail-1",
                                              "[2] err-2-a", "[2] err-2-b", "[2] tail-2"}));
  // Within a rank the order is kept; the unterminated tail comes out last, with a newline.
  for (int rank = 0; rank < 3; ++rank) {
    std::string tag = RankTag(rank);
    std::vector<std::string> mine;
    for (const std::string& line : err) {
      if (line.rfind(tag, 0) == 0) mine.push_back(line.substr(tag.size()));
    }
    std::string r_str = std::to_string(rank);
    EXPECT_THAT(mine, ElementsAre("err-" + r_str + "-a", "err-" + r_str + "-b", "tail-" + r_str));
  }
  EXPECT_EQ(r.err.back(), '\n');
}

TEST_F(LaunchTest, LineWrittenInPiecesComesOutWhole) {
  // Rank 0 writes half a line, lets rank 1 print complete lines, then finishes its own.
  std::string script = "d=" + Dir() + R"(
    if [ $CHORUS_RANK = 0 ]; then
      printf 'first '; touch $d/half; while [ ! -e $d/done ]; do sleep 0.01; done; echo half
    else
      while [ ! -e $d/half ]; do sleep 0.01; done; echo one; echo two; touch $d/done
    fi)";
  Outcome r = Launch({"-n", "2", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] first half", "[1] one", "[1] two"}));
}

TEST_F(LaunchTest, NoPrefixPassesLinesThrough) {
  Outcome r = Launch({"--no-prefix", "-n", "2", "sh", "-c",
                      "echo line-$CHORUS_RANK; printf 'tail-%s' $CHORUS_RANK >&2"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"line-0", "line-1"}));
  EXPECT_THAT(Lines(r.err), UnorderedElementsAreArray({"tail-0", "tail-1"}));
}

TEST_F(LaunchTest, LongLineWithoutNewlineIsCutNotLost) {
  // 200000 bytes and no '\n': printed in pieces of at most 64 KiB, each behind the prefix.
  Outcome r = Launch({"-n", "1", "sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"});
  EXPECT_EQ(r.exit_code, 0);
  size_t xs = 0;
  for (const std::string& line : Lines(r.out)) {
    ASSERT_EQ(line.rfind("[0] ", 0), 0u);
    ASSERT_LE(line.size() - 4, 64u * 1024 * 2);
    xs += static_cast<size_t>(std::count(line.begin(), line.end(), 'x'));
  }
  EXPECT_EQ(xs, 200000u);
}

TEST_F(LaunchTest, RanksReadEndOfFileFromStdin) {
  Outcome r = Launch({"-n", "2", "sh", "-c", "cat; echo after-cat"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] after-cat", "[1] after-cat"}));
}

TEST_F(LaunchTest, BackgroundChildHoldingThePipeDoesNotHoldTheLauncher) {
  Outcome r = Launch({"-n", "1", "sh", "-c", "sleep 30 & echo bg $!"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(r.seconds, kPromptSeconds);
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(lines[0].rfind("[0] bg ", 0), 0u);
  ::kill(std::stoi(lines[0].substr(7)), SIGKILL);
}

// ------------------------------------------------------------------ environment

TEST_F(LaunchTest, RanksGetTheirVariablesAndALiveStore) {
  std::string script = "d=" + Dir() + R"(
    echo "$CHORUS_RANK $CHORUS_WORLD_SIZE $CHORUS_LOCAL_RANK $CHORUS_LOCAL_WORLD_SIZE" \
         "$CHORUS_LAUNCHER $CHORUS_JOB_ID $CHORUS_STORE $UNRELATED"
    while [ ! -e $d/go ]; do sleep 0.01; done)";
  // Stale values in the launcher's own environment must not leak into the ranks.
  Launcher launcher({"-n", "3", "sh", "-c", script},
                    {{"CHORUS_RANK", "99"}, {"CHORUS_JOB_ID", "stale"}, {"UNRELATED", "kept"}});
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "\n") == 3; }));
  std::map<int, std::vector<std::string>> fields;  // rank -> the words it printed
  for (const std::string& line : Lines(launcher.out())) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    ASSERT_EQ(words.size(), 9u) << line;
    ASSERT_EQ(words[0], "[" + words[1] + "]") << line;
    fields[std::stoi(words[1])] = std::vector<std::string>(words.begin() + 1, words.end());
  }
  ASSERT_EQ(fields.size(), 3u);
  const std::string job_id = fields[0][5];
  const std::string store = fields[0][6];
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<std::string>& f = fields[rank];
    std::string r_str = std::to_string(rank);
    EXPECT_THAT(f, ElementsAre(r_str, "3", r_str, "3", "1", job_id, store, "kept"));
  }
  EXPECT_EQ(job_id.size(), 16u);
  EXPECT_EQ(job_id.find_first_not_of("0123456789abcdef"), std::string::npos) << job_id;
  const std::string kScheme = "tcp://127.0.0.1:";
  ASSERT_EQ(store.rfind(kScheme, 0), 0u) << store;
  int port = std::stoi(store.substr(kScheme.size()));
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);

  // The ranks are still waiting for "go", so the job runs: its store must accept a connection.
  int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  ::close(sock);

  std::ofstream(dir_ / "go").flush();
  Outcome r = launcher.Finish();
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(LaunchTest, EveryJobGetsItsOwnId) {
  Outcome a = Launch({"-n", "1", "sh", "-c", "echo $CHORUS_JOB_ID"});
  Outcome b = Launch({"-n", "1", "sh", "-c", "echo $CHORUS_JOB_ID"});
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  EXPECT_EQ(a.out.size(), std::string("[0] \n").size() + 16);
  EXPECT_NE(a.out, b.out);
}

// ------------------------------------------------------------------ arguments

TEST_F(LaunchTest, OptionsAfterProgBelongToProg) {
  Outcome r =
      Launch({"-n", "2", "sh", "-c", "printf '%s\\n' \"$*\"", "sh", "-n", "5", "--no-prefix"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out),
              UnorderedElementsAreArray({"[0] -n 5 --no-prefix", "[1] -n 5 --no-prefix"}));
}

TEST_F(LaunchTest, DoubleDashEndsTheLaunchersOptions) {
  Outcome r = Launch({"-n", "2", "--", "sh", "-c", "echo $CHORUS_RANK"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] 0", "[1] 1"}));
}

TEST_F(LaunchTest, BadRankCountsAreRejected) {
  for (const char* n : {"0", "-1", "1025"}) {
    Outcome r = Launch({"-n", n, "true"});
    EXPECT_EQ(r.exit_code, 2) << n;
    EXPECT_THAT(r.err, HasSubstr("-n must be between 1 and 1024")) << n;
    EXPECT_EQ(r.out, "");
  }
  Outcome missing = Launch({"true"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("-n must be between 1 and 1024 (got 0)"));
}

TEST_F(LaunchTest, MissingProgIsRejected) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"-n", "2"}, std::vector<std::string>{"-n", "2", "--"}}) {
    Outcome r = Launch(args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("missing PROG"));
  }
}

TEST_F(LaunchTest, NegativeDurationsAreRejected) {
  EXPECT_EQ(Launch({"-n", "1", "--timeout-ms", "-1", "true"}).exit_code, 2);
  EXPECT_EQ(Launch({"-n", "1", "--grace-ms", "-1", "true"}).exit_code, 2);
}

TEST_F(LaunchTest, UnknownOptionIsRejected) {
  Outcome r = Launch({"-n", "2", "--bogus", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option --bogus"));
}

TEST_F(LaunchTest, ProgNotFoundExits127) {
  Outcome on_path = Launch({"-n", "2", "chorus-no-such-program"});
  EXPECT_EQ(on_path.exit_code, 127);
  EXPECT_THAT(on_path.err, HasSubstr("chorus-no-such-program: command not found"));
  Outcome with_slash = Launch({"-n", "2", Dir() + "/missing"});
  EXPECT_EQ(with_slash.exit_code, 127);
  EXPECT_THAT(with_slash.err, HasSubstr("/missing: No such file or directory"));
  Outcome dashed = Launch({"-n", "2", "--", "-dash"});
  EXPECT_EQ(dashed.exit_code, 127);
  EXPECT_THAT(dashed.err, HasSubstr("-dash: command not found"));
}

TEST_F(LaunchTest, ProgNotExecutableExits126) {
  fs::path file = dir_ / "plain";
  std::ofstream(file) << "echo never\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  Outcome r = Launch({"-n", "2", file.string()});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_THAT(r.err, HasSubstr("plain: permission denied"));
  Outcome dir = Launch({"-n", "2", Dir()});
  EXPECT_EQ(dir.exit_code, 126);
  EXPECT_THAT(dir.err, HasSubstr("is a directory"));
  EXPECT_EQ(r.out, "");
}

TEST_F(LaunchTest, ProgIsLookedUpOnThePathOfTheLauncher) {
  fs::path bin = dir_ / "bin";
  fs::create_directory(bin);
  std::ofstream(bin / "chorus-hello") << "#!/bin/sh\necho hello from $CHORUS_RANK\n";
  fs::permissions(bin / "chorus-hello", fs::perms::owner_all);
  const char* path = std::getenv("PATH");
  Outcome r = Launch({"-n", "2", "chorus-hello"},
                     {{"PATH", bin.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin")}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] hello from 0", "[1] hello from 1"}));
}

// ------------------------------------------------------------------ --hosts through an agent

// Runs ranks "on hosts" through a fake rsh agent that behaves as ssh does: it joins its words and
// has bash run them, in a fresh environment (PATH and FAKE_HOST=HOST only). It records each HOST
// in hosts.log and its whole argv in argv.log.
class HostsTest : public LaunchTest {
 protected:
  void SetUp() override {
    LaunchTest::SetUp();
    agent_ = (dir_ / "fake-rsh").string();
    std::ofstream(agent_) << "#!/bin/bash\n"
                          << "printf '%s\\n' \"$1\" >> " << Dir() << "/hosts.log\n"
                          << "printf '%s\\n' \"$*\" >> " << Dir() << "/argv.log\n"
                          << "host=$1; shift\n"
                          << "exec env -i PATH=\"$PATH\" FAKE_HOST=\"$host\" bash -c \"$*\"\n";
    fs::permissions(agent_, fs::perms::owner_all);
  }

  // chorus launch --hosts HOSTS --rsh AGENT --store-host 127.0.0.1 ARGS...
  std::vector<std::string> Args(const std::string& hosts, std::vector<std::string> args) const {
    std::vector<std::string> all = {"--hosts", hosts, "--rsh", agent_, "--store-host", "127.0.0.1"};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::string agent_;
};

// No secret in the launcher's environment: it makes one up (an empty value counts as unset).
const std::vector<std::pair<std::string, std::string>> kNoSecret = {{"CHORUS_SECRET", ""},
                                                                    {"CHORUS_SECRET_FILE", ""}};

TEST_F(HostsTest, RanksFillTheSlotsOfEachHostInOrder) {
  Outcome r = Launch(Args("a:2,b:1,c:3", {"-n", "5", "sh", "-c",
                                          "echo $FAKE_HOST $CHORUS_RANK/$CHORUS_WORLD_SIZE "
                                          "$CHORUS_LOCAL_RANK/$CHORUS_LOCAL_WORLD_SIZE"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out),
              UnorderedElementsAreArray({"[0] a 0/5 0/2", "[1] a 1/5 1/2", "[2] b 2/5 0/1",
                                         "[3] c 3/5 0/2", "[4] c 4/5 1/2"}));
  // Rank 5 would have been c's third slot; the agent was asked for each host once per rank.
  EXPECT_THAT(Lines(Read("hosts.log")), UnorderedElementsAreArray({"a", "a", "b", "c", "c"}));
}

TEST_F(HostsTest, RankCountDefaultsToEverySlot) {
  Outcome r = Launch(Args("a:2,b", {"sh", "-c", "echo $FAKE_HOST $CHORUS_WORLD_SIZE"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] a 3", "[1] a 3", "[2] b 3"}));
}

TEST_F(HostsTest, ArgumentsReachTheRankIntactThroughTheRemoteShell) {
  // The agent's shell parses the words again: quotes, spaces, $, globs and empty words must
  // survive it, and must not be expanded there.
  Outcome r = Launch(Args("a", {"sh", "-c", "printf '<%s>' \"$@\"; echo", "sh", "two words", "it's",
                                "$HOME", "*", "", "a\"b", "back\\slash", "~"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] <two words><it's><$HOME><*><><a\"b><back\\slash><~>\n");
}

TEST_F(HostsTest, RemoteRanksGetTheGeneratedSecretOnStdinNotInAnyArgv) {
  std::string script = R"(echo "$CHORUS_RANK $CHORUS_SECRET ${CHORUS_SECRET_FILE-unset}"; cat)";
  Outcome r = Launch(Args("a:2,b:1", {"sh", "-c", script}), kNoSecret);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;  // `cat` found nothing more on stdin
  std::set<std::string> secrets;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string tag, rank, secret, file;
    in >> tag >> rank >> secret >> file;
    EXPECT_EQ(tag, "[" + rank + "]");
    EXPECT_EQ(secret.size(), 64u) << line;
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << line;
    EXPECT_EQ(file, "") << "an empty CHORUS_SECRET_FILE is passed on as it is";
    secrets.insert(secret);
  }
  ASSERT_EQ(secrets.size(), 1u) << "every rank gets the same secret";
  EXPECT_THAT(Read("argv.log"), Not(HasSubstr(*secrets.begin())));
  // A second job gets a secret of its own.
  Outcome again = Launch(Args("a", {"sh", "-c", "echo $CHORUS_SECRET"}), kNoSecret);
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_EQ(again.out.size(), std::string("[0] \n").size() + 64);
  EXPECT_THAT(again.out, Not(HasSubstr(*secrets.begin())));
}

TEST_F(HostsTest, SecretFromTheEnvironmentGoesOnStdinToo) {
  Outcome r = Launch(Args("a,b", {"sh", "-c", "echo \"$CHORUS_SECRET\""}),
                     {{"CHORUS_SECRET", "not so secret"}, {"CHORUS_SECRET_FILE", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] not so secret", "[1] not so secret"}));
  EXPECT_THAT(Read("argv.log"), Not(HasSubstr("not so secret")));
}

TEST_F(HostsTest, SecretFileIsPassedByPathOnly) {
  fs::path file = dir_ / "secret";
  std::ofstream(file) << "from a file\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  Outcome r =
      Launch(Args("a,b", {"sh", "-c", "echo \"${CHORUS_SECRET-unset} $CHORUS_SECRET_FILE\"; cat"}),
             {{"CHORUS_SECRET", ""}, {"CHORUS_SECRET_FILE", file.string()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray(
                                {"[0] unset " + file.string(), "[1] unset " + file.string()}));
}

TEST_F(HostsTest, OnlyChorusVariablesAndExportsReachRemoteRanks) {
  Outcome r =
      Launch(Args("a", {"-x", "PICKED", "-x", "SET=here", "-x", "CHORUS_FOO=override", "sh", "-c",
                        "echo ${CHORUS_FOO-} ${CHORUS_BAR-} ${PICKED-} ${SET-} "
                        "${UNRELATED-none} ${CHORUS_JOB_ID:+job}"}),
             {{"CHORUS_FOO", "foo"},
              {"CHORUS_BAR", "bar"},
              {"PICKED", "picked"},
              {"UNRELATED", "left behind"},
              {"CHORUS_RANK", "99"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] override bar picked here none job\n");
}

TEST_F(LaunchTest, ExportsAlsoApplyToLocalRanks) {
  Outcome r =
      Launch({"-n", "2", "-x", "SHADOWED=new", "-x", "KEPT", "sh", "-c", "echo $SHADOWED $KEPT"},
             {{"SHADOWED", "old"}, {"KEPT", "kept"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out), UnorderedElementsAreArray({"[0] new kept", "[1] new kept"}));
}

TEST_F(LaunchTest, LocalRanksGetTheGeneratedSecretInTheirEnvironment) {
  Outcome r = Launch({"-n", "2", "sh", "-c", "echo $CHORUS_SECRET"}, kNoSecret);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].substr(4), lines[1].substr(4));
  EXPECT_EQ(lines[0].size(), 4u + 64u);
  Outcome own =
      Launch({"-n", "1", "sh", "-c", "echo \"$CHORUS_SECRET\""}, {{"CHORUS_SECRET", "mine"}});
  EXPECT_EQ(own.out, "[0] mine\n");
}

TEST_F(LaunchTest, SecretFileThatOthersMayReadIsRefused) {
  fs::path file = dir_ / "secret";
  std::ofstream(file) << "s3cret\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  Outcome r = Launch({"-n", "1", "true"}, {{"CHORUS_SECRET", ""}, {"CHORUS_SECRET_FILE", file}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("chmod 600"));
  Outcome missing =
      Launch({"-n", "1", "true"}, {{"CHORUS_SECRET", ""}, {"CHORUS_SECRET_FILE", Dir() + "/none"}});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("/none"));
}

TEST_F(HostsTest, FailureOnOneHostStopsTheRanksOnTheOthers) {
  Outcome r = Launch(Args("a:2,b:2", {"sh", "-c", "[ $CHORUS_RANK = 3 ] && exit 5; sleep 30"}));
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_THAT(r.err, HasSubstr("rank 3 exited with status 5; stopping the other 3 ranks"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(HostsTest, RankKilledBySignalIsReportedThroughAnExecingAgent) {
  Outcome r = Launch(Args("a,b", {"sh", "-c", "[ $CHORUS_RANK = 1 ] && kill -9 $$; sleep 30"}));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_THAT(r.err, HasSubstr("rank 1 was killed by signal 9 (Killed); stopping the other 1"));
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(HostsTest, SignalsReachTheRanksOnEveryHost) {
  Launcher launcher(Args("a:2,b:1", {"sh", "-c",
                                     "trap 'echo got TERM on $FAKE_HOST; exit 7' TERM; echo ready;"
                                     " sleep 30 & wait $!"}));
  ASSERT_TRUE(launcher.ReadUntil(
      [](const std::string& out, const std::string&) { return Count(out, "ready\n") == 3; }));
  launcher.Signal(SIGTERM);
  Outcome r = launcher.Finish();
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_THAT(r.err, HasSubstr("received SIGTERM; forwarding it to 3 ranks"));
  EXPECT_EQ(Count(r.out, "got TERM on a\n"), 2u) << r.out;
  EXPECT_EQ(Count(r.out, "got TERM on b\n"), 1u) << r.out;
  EXPECT_LT(r.seconds, kPromptSeconds);
}

TEST_F(HostsTest, ProgMissingOnTheHostExits127) {
  Outcome r = Launch(Args("a", {"chorus-no-such-program"}));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("chorus-no-such-program"));
}

TEST_F(LaunchTest, AgentNotFoundExits127) {
  Outcome r = Launch(
      {"--hosts", "a", "--rsh", "chorus-no-such-agent -p 22", "--store-host", "127.0.0.1", "true"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("chorus-no-such-agent: command not found"));
}

TEST_F(HostsTest, AgentWordsAreSplitAtSpaces) {
  // As one word, "bash /path/fake-rsh" would not be found.
  Outcome r = Launch({"--hosts", "a", "--rsh", "bash " + agent_, "--store-host", "127.0.0.1", "sh",
                      "-c", "echo $FAKE_HOST"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] a\n");
}

TEST_F(HostsTest, StoreBindsTheGivenAddressOrInterface) {
  Outcome by_name = Launch(
      {"--hosts", "a", "--rsh", agent_, "--store-host", "lo", "sh", "-c", "echo $CHORUS_STORE"});
  EXPECT_EQ(by_name.exit_code, 0) << by_name.err;
  EXPECT_THAT(by_name.out, HasSubstr("[0] tcp://127.0.0.1:"));
  Outcome local =
      Launch({"-n", "1", "--store-host", "127.0.0.1", "sh", "-c", "echo $CHORUS_STORE"});
  EXPECT_THAT(local.out, HasSubstr("[0] tcp://127.0.0.1:"));
}

TEST_F(LaunchTest, BadHostsAndStoreHostsAreRejected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hosts", "a:2,b:2", "-n", "5"}, "-n 5 is more than the 4 slots of --hosts"},
      {{"--hosts", "a:0"}, "the slot count must be an integer in [1, 1024]"},
      {{"--hosts", "a:x"}, "the slot count must be an integer"},
      {{"--hosts", "a:"}, "the slot count must be an integer"},
      {{"--hosts", ":2"}, "is not HOST or HOST:SLOTS"},
      {{"--hosts", "a,,b"}, "is not HOST or HOST:SLOTS"},
      {{"--hosts", "-oProxyCommand=x"}, "is not HOST or HOST:SLOTS"},
      {{"--hosts", "a b"}, "is not HOST or HOST:SLOTS"},
      {{"--hosts", "a;reboot"}, "is not HOST or HOST:SLOTS"},
      {{"--hosts", "a:1,b,a:2"}, "a is listed twice"},
      {{"-n", "2", "--rsh", "ssh"}, "--rsh needs --hosts"},
      {{"--hosts", "a", "--rsh", " "}, "--rsh is empty"},
      {{"--hosts", "a", "--store-host", "0.0.0.0"}, "the ranks need one address to dial"},
      {{"--hosts", "a", "--store-host", "no-such-if0"}, "not an IPv4 address, nor an interface"},
      {{"-n", "1", "-x", "1BAD"}, "-x 1BAD: want NAME or NAME=VALUE"},
      {{"-n", "1", "-x", "CHORUS_RANK=3"}, "-x CHORUS_RANK: the launcher sets it"},
      {{"-n", "1", "-x", "CHORUS_SECRET=x"}, "-x CHORUS_SECRET: an argv would show it"},
      {{"-n", "1", "-x", "CHORUS_TEST_SURELY_UNSET"}, "not set here"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> all = args;
    all.push_back("true");
    Outcome r = Launch(all);
    EXPECT_EQ(r.exit_code, 2) << all[1] << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << all[1];
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
