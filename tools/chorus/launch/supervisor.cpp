// supervisor.cpp: the launcher's poll() loop over its ranks, its signals and its deadlines
// (supervisor.h).
#include "launch/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "launch/output.h"
#include "launch/sys.h"

namespace chorus::cli::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank's failing exit code waits for a death by signal to be seen and take its place
// as the job's first failure (see Supervisor::OnRankExit).
constexpr auto kSettle = std::chrono::milliseconds(100);
// After a rank has exited, whatever it wrote is in its pipe (a pipe holds 64 KiB by default, at
// most 1 MiB). Reading more than that would mean a surviving child keeps writing; stop there.
constexpr size_t kDrainLimit = 2 * 1024 * 1024;

// How a rank ended, from waitid().
struct RankExit {
  bool by_signal = false;
  int value = 0;  // the exit code, or the signal
  bool core_dumped = false;

  explicit RankExit(const siginfo_t& info)
      : by_signal(info.si_code != CLD_EXITED),
        value(info.si_status),
        core_dumped(info.si_code == CLD_DUMPED) {}

  bool ok() const { return !by_signal && value == 0; }
  // As a shell reports it: the exit code, or 128 + signal.
  int ShellStatus() const { return by_signal ? 128 + value : value; }
  std::string Describe(int rank) const {
    std::string text = "rank " + std::to_string(rank);
    if (!by_signal) return text + " exited with status " + std::to_string(value);
    text += " was killed by signal " + std::to_string(value) + " (" + strsignal(value) + ")";
    return core_dumped ? text + ", core dumped" : text;
  }
};

// Runs the job to its end: one poll() loop over the signalfd and every rank's output pipes, with
// the job deadline and the kill deadline as its timeout.
class Supervisor {
 public:
  Supervisor(const LaunchFlags& flags, std::vector<Child>& children, int signal_fd)
      : flags_(flags), children_(children), signal_fd_(signal_fd) {
    if (flags_.timeout_ms > 0) {
      job_deadline_ = Clock::now() + std::chrono::milliseconds(flags_.timeout_ms);
    }
  }

  // Returns the launcher's exit status.
  int Run() {
    // SIGCHLD is coalesced, and a rank may have exited before the signalfd was first read.
    ObserveExits();
    std::vector<pollfd> fds;
    std::vector<OutputStream*> streams;
    while (RunningCount() > 0) {
      fds.assign(1, pollfd{.fd = signal_fd_, .events = POLLIN, .revents = 0});
      streams.clear();
      for (Child& child : children_) {
        for (OutputStream* stream : {child.out.get(), child.err.get()}) {
          if (!stream->fd) continue;
          fds.push_back(pollfd{.fd = stream->fd.get(), .events = POLLIN, .revents = 0});
          streams.push_back(stream);
        }
      }
      int ready = ::poll(fds.data(), fds.size(), PollTimeoutMs());
      if (ready < 0 && errno != EINTR) {
        Note("poll: " + ErrnoText(errno) + "; killing all ranks");
        KillRunning();
        break;
      }
      // Output first, so that what a rank printed comes out before the note about its exit.
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) streams[i - 1]->Pump(kReadChunk);
      }
      if (fds[0].revents != 0) OnSignals();
      OnDeadlines();
    }
    CommitPendingFailure();  // every rank exited within kSettle of the first failure
    if (stopping_) {
      // A stopped job takes along whatever its ranks left behind; a job that succeeded leaves
      // such processes alone (someone may want them).
      SignalGroups(SIGKILL);
    }
    ReapAll();
    for (Child& child : children_) {
      for (OutputStream* stream : {child.out.get(), child.err.get()}) {
        stream->Pump(kDrainLimit);
        stream->Close();
      }
    }
    return ExitStatus();
  }

 private:
  size_t RunningCount() const {
    size_t n = 0;
    for (const Child& child : children_) n += child.running ? 1 : 0;
    return n;
  }

  int PollTimeoutMs() const {
    std::optional<Clock::time_point> next;
    std::optional<Clock::time_point> settle;
    if (pending_failure_) settle = pending_failure_->until;
    for (const auto& deadline : {job_deadline_, kill_deadline_, settle}) {
      if (deadline && (!next || *deadline < *next)) next = deadline;
    }
    if (!next) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
  }

  void OnSignals() {
    signalfd_siginfo info{};
    bool child_exited = false;
    while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      if (info.ssi_signo == SIGCHLD) {
        child_exited = true;
      } else {
        Forward(static_cast<int>(info.ssi_signo));
      }
    }
    if (child_exited) ObserveExits();
  }

  void Forward(int sig) {
    if (received_signal_ == 0) received_signal_ = sig;
    Note("received " + SignalName(sig) + "; forwarding it to " + Plural(RunningCount(), "rank"));
    SignalGroups(sig);
    stopping_ = true;
    if (!kill_deadline_) StartGracePeriod();
  }

  // Ranks found exited together are handled deaths by signal first: which of them ended first
  // is lost, and a rank that crashed is far more likely the cause of the others' failing exits
  // (peers report the crash and exit) than their consequence.
  void ObserveExits() {
    std::vector<std::pair<Child*, RankExit>> exited;
    for (Child& child : children_) {
      if (!child.running) continue;
      siginfo_t info{};
      int rc = ::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc != 0 || info.si_pid != child.pid) continue;
      child.running = false;
      exited.emplace_back(&child, RankExit(info));
    }
    std::stable_partition(exited.begin(), exited.end(),
                          [](const auto& e) { return e.second.by_signal; });
    for (const auto& [child, how] : exited) OnRankExit(*child, how);
  }

  void OnRankExit(Child& child, const RankExit& how) {
    // What the rank wrote last belongs before anything said about its exit.
    child.out->Pump(kDrainLimit);
    child.err->Pump(kDrainLimit);
    if (how.ok() || child.killed_by_launcher || exit_status_) return;
    // A rank that exits with an error may be reporting a peer that crashed, and the crashed
    // rank's own exit can be seen later (tearing a large process down takes a while; its sockets
    // close first). So a failing exit code waits kSettle for a death by signal to take its place.
    if (!how.by_signal && !stopping_) {
      if (!pending_failure_) pending_failure_.emplace(&child, how, Clock::now() + kSettle);
      return;
    }
    pending_failure_.reset();
    Fail(child, how);
  }

  void CommitPendingFailure() {
    if (!pending_failure_) return;
    PendingFailure pending = *pending_failure_;
    pending_failure_.reset();
    Fail(*pending.child, pending.how);
  }

  // `child` decides the job's exit status; the others are told to stop.
  void Fail(const Child& child, const RankExit& how) {
    exit_status_ = how.ShellStatus();
    std::string what = how.Describe(child.rank);
    size_t others = RunningCount();
    if (stopping_ || others == 0) {
      Note(what);
      return;
    }
    Note(what + "; stopping the other " + Plural(others, "rank"));
    stopping_ = true;
    SignalGroups(SIGTERM);
    StartGracePeriod();
  }

  void OnDeadlines() {
    Clock::time_point now = Clock::now();
    if (pending_failure_ && now >= pending_failure_->until) CommitPendingFailure();
    if (job_deadline_ && now >= *job_deadline_) {
      job_deadline_.reset();
      if (!exit_status_) exit_status_ = kExitTimeout;
      Note("the job timed out after " + std::to_string(flags_.timeout_ms) + " ms; stopping " +
           Plural(RunningCount(), "rank"));
      stopping_ = true;
      SignalGroups(SIGTERM);
      if (!kill_deadline_) StartGracePeriod();
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      std::string ranks;
      for (const Child& child : children_) {
        if (child.running) ranks += (ranks.empty() ? "" : ", ") + std::to_string(child.rank);
      }
      if (ranks.empty()) return;
      Note(std::string(RunningCount() == 1 ? "rank " : "ranks ") + ranks + " still running " +
           std::to_string(flags_.grace_ms) + " ms after being told to stop; sending SIGKILL");
      KillRunning();
    }
  }

  void StartGracePeriod() {
    kill_deadline_ = Clock::now() + std::chrono::milliseconds(flags_.grace_ms);
  }

  // Signals every rank's process group: the rank and whatever it started.
  void SignalGroups(int sig) {
    for (const Child& child : children_) {
      if (child.reaped) continue;
      // The plain pid is the fallback for a rank that could not get its own group.
      if (::kill(-child.pid, sig) != 0 && child.running) ::kill(child.pid, sig);
    }
  }

  void KillRunning() {
    for (Child& child : children_) child.killed_by_launcher |= child.running;
    SignalGroups(SIGKILL);
  }

  // Normally every rank has exited by now and this only collects the zombies; after a poll()
  // failure it waits for the SIGKILLed ranks.
  void ReapAll() {
    for (Child& child : children_) {
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED) != 0 && errno == EINTR) {
      }
      child.reaped = true;
      if (child.running) {
        child.running = false;
        OnRankExit(child, RankExit(info));
      }
    }
  }

  int ExitStatus() const {
    if (exit_status_) return *exit_status_;
    for (const Child& child : children_) {
      if (child.killed_by_launcher)
        return 128 + (received_signal_ != 0 ? received_signal_ : SIGKILL);
    }
    return 0;
  }

  const LaunchFlags& flags_;
  std::vector<Child>& children_;
  int signal_fd_;
  std::optional<Clock::time_point> job_deadline_;
  std::optional<Clock::time_point> kill_deadline_;  // SIGKILL whoever still runs at this time
  bool stopping_ = false;  // the ranks were told to stop; later failures are consequences
  int received_signal_ = 0;
  std::optional<int> exit_status_;  // decided by the first failure (or the timeout)
  struct PendingFailure {
    PendingFailure(const Child* c, const RankExit& h, Clock::time_point u)
        : child(c), how(h), until(u) {}
    const Child* child;
    RankExit how;
    Clock::time_point until;
  };
  std::optional<PendingFailure> pending_failure_;  // a failing exit code, waiting out kSettle
};

}  // namespace

int Supervise(const LaunchFlags& flags, std::vector<Child>& children, int signal_fd) {
  return Supervisor(flags, children, signal_fd).Run();
}

}  // namespace chorus::cli::launch
