// `chorus launch`: a one-host torchrun / mpirun. It serves a TcpStoreServer for the job, starts
// N ranks of one program, prefixes their output with the rank, forwards SIGINT/SIGTERM/SIGHUP
// to them, and stops the whole job as soon as one rank fails.
//
//   chorus launch -n 4 -- ./train --epochs 3
//   chorus launch -n 2 --timeout-ms 60000 sh -c 'echo "rank $CHORUS_RANK of $CHORUS_WORLD_SIZE"'
//
// Every rank r of N gets:
//   CHORUS_RANK=r  CHORUS_LOCAL_RANK=r  CHORUS_WORLD_SIZE=N  CHORUS_LOCAL_WORLD_SIZE=N
//   CHORUS_STORE=tcp://127.0.0.1:PORT   (served by the launcher while the job runs)
//   CHORUS_LAUNCHER=1  CHORUS_JOB_ID=<16 random hex digits, the same for every rank>
// and /dev/null as stdin: N ranks cannot share one terminal's input.
//
// Output: each line a rank writes comes out whole as "[r] line" on the launcher's stream of the
// same name (a last line without '\n' gets one). The launcher is the only writer of its stdout
// and stderr and writes whole lines, so lines of different ranks never mix.
//
// Process model: every rank leads its own process group. A signal meant for a rank then reaches
// its whole tree (a shell and the command it waits for), and a Ctrl-C on the terminal reaches the
// launcher alone, which forwards it exactly once. PR_SET_PDEATHSIG kills a rank whose launcher
// died without cleaning up (SIGKILL, crash). Signals are taken from a signalfd so that child
// exits, forwarded signals, output and deadlines are all handled by one poll() loop.
//
// Stopping: when a rank exits non-zero or dies by a signal, the other ranks' process groups get
// SIGTERM and, after --grace-ms, SIGKILL; a forwarded signal or the --timeout-ms deadline starts
// the same sequence. Once every rank has exited, what a stopped job left behind in those groups
// gets SIGKILL. The launcher does not wait for such leftovers: it is done when its ranks are.
//
// Exit status: 0 when every rank exits 0; otherwise that of the first rank that failed (its exit
// code, or 128 + signal); 124 after --timeout-ms; 128 + signal when a forwarded signal left ranks
// that had to be killed; 127 / 126 when PROG is not found / not executable (as in a shell);
// 2 for bad arguments; 1 when the launcher itself cannot start the job.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/store.h"
#include "commands.h"

extern char** environ;  // NOLINT: the ranks inherit the launcher's environment

namespace chorus::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitLauncherFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitNotExecutable = 126;
constexpr int kExitNotFound = 127;
constexpr int kMaxRanks = 1024;
constexpr size_t kReadChunk = 64 * 1024;
// A rank that never writes '\n' must not make the launcher buffer without bound: a longer line
// is cut into pieces of this size, each printed as a line of its own.
constexpr size_t kMaxLineBytes = 64 * 1024;
// After a rank has exited, whatever it wrote is in its pipe (a pipe holds 64 KiB by default, at
// most 1 MiB). Reading more than that would mean a surviving child keeps writing; stop there.
constexpr size_t kDrainLimit = 2 * 1024 * 1024;
constexpr std::array<int, 3> kForwardedSignals = {SIGINT, SIGTERM, SIGHUP};
constexpr std::array<const char*, 7> kRankVariables = {
    "CHORUS_RANK",  "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE",
    "CHORUS_STORE", "CHORUS_LAUNCHER",   "CHORUS_JOB_ID"};

struct LaunchFlags {
  int ranks = 0;
  int64_t timeout_ms = 0;  // 0: no deadline
  int64_t grace_ms = 2000;
  bool no_prefix = false;
  std::vector<std::string> prog_placeholder;  // see AddLaunchCommand
};

// ------------------------------------------------------------------ small OS helpers

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string ErrnoText(int err) { return std::strerror(err); }

// Writes all of `data` to `fd`. Errors are dropped on purpose: when whoever reads our stdout has
// gone away (EPIPE), the job must still be supervised to its end.
void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {  // someone made our stdout non-blocking
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&p, 1, -1);
    } else {
      return;
    }
  }
}

void Note(const std::string& message) {
  WriteAll(STDERR_FILENO, "chorus launch: " + message + "\n");
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string Plural(size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

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

// A child's stdin/stdout/stderr are dup2()ed onto 0/1/2. Should the launcher have started with
// one of those closed, a pipe could land there and dup2 would silently keep its close-on-exec
// flag; occupying the slots with /dev/null first rules that out.
void EnsureStandardFdsOpen() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

// ------------------------------------------------------------------ program lookup

struct Resolved {
  std::string path;
  int exit_code = 0;  // non-zero: `error` explains why PROG cannot run
  std::string error;
};

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Finds PROG the way a shell does: a name with a '/' is used as given, anything else is looked up
// on PATH. Resolving once in the launcher reports a typo once, not N times, and lets the children
// use execve() (async-signal-safe, unlike execvp()).
Resolved ResolveProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) {
    if (IsExecutableFile(prog)) return {.path = prog};
    struct stat st {};
    if (::stat(prog.c_str(), &st) != 0) {
      return {.exit_code = kExitNotFound, .error = prog + ": " + ErrnoText(errno)};
    }
    return {.exit_code = kExitNotExecutable,
            .error = prog + (S_ISDIR(st.st_mode) ? ": is a directory" : ": permission denied")};
  }
  const char* path_env = std::getenv("PATH");
  std::string_view dirs = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  bool found_unexecutable = false;
  while (true) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + prog;  // empty entry: cwd
    if (IsExecutableFile(candidate)) return {.path = candidate};
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) found_unexecutable = true;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  if (found_unexecutable) {
    return {.exit_code = kExitNotExecutable, .error = prog + ": permission denied"};
  }
  return {.exit_code = kExitNotFound, .error = prog + ": command not found"};
}

Result<std::string> MakeJobId() {
  UniqueFd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Unavailable("cannot open /dev/urandom: " + ErrnoText(errno));
  std::array<unsigned char, 8> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("cannot read /dev/urandom: " + ErrnoText(errno));
    got += static_cast<size_t>(n);
  }
  std::string id;
  for (unsigned char b : bytes) {
    constexpr char kHex[] = "0123456789abcdef";
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

// ------------------------------------------------------------------ output

// Cuts a byte stream into lines and renders each one whole behind a prefix.
class LineSplitter {
 public:
  explicit LineSplitter(std::string prefix) : prefix_(std::move(prefix)) {}

  // Appends every line that `data` completes to `out`; keeps the unfinished tail.
  void Feed(std::string_view data, std::string& out) {
    while (!data.empty()) {
      size_t newline = data.find('\n');
      partial_.append(data.substr(0, newline));
      if (newline == std::string_view::npos) {
        if (partial_.size() >= kMaxLineBytes) EmitPartial(out);
        return;
      }
      EmitPartial(out);
      data.remove_prefix(newline + 1);
    }
  }

  // End of stream: an unterminated last line still comes out, with a '\n'.
  void Finish(std::string& out) {
    if (!partial_.empty()) EmitPartial(out);
  }

 private:
  void EmitPartial(std::string& out) {
    out += prefix_;
    out += partial_;
    out += '\n';
    partial_.clear();
  }

  std::string prefix_;
  std::string partial_;
};

// The launcher's end of one of a rank's output pipes.
struct OutputStream {
  OutputStream(UniqueFd read_end, int sink_fd, std::string prefix)
      : fd(std::move(read_end)), sink(sink_fd), lines(std::move(prefix)) {}

  // Reads what is available (at most `limit` bytes) and writes the completed lines to `sink`.
  // Closes the stream at end of file or on a read error.
  void Pump(size_t limit) {
    std::string out;
    std::array<char, kReadChunk> buffer;
    size_t total = 0;
    while (fd.valid() && total < limit) {
      ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
      if (n > 0) {
        lines.Feed(std::string_view(buffer.data(), static_cast<size_t>(n)), out);
        total += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        break;
      } else {  // EOF, or an error that will not go away
        lines.Finish(out);
        fd.Reset();
      }
    }
    WriteAll(sink, out);
  }

  // The launcher is done: flush the unterminated tail even if a straggler holds the pipe open.
  void Close() {
    std::string out;
    lines.Finish(out);
    WriteAll(sink, out);
    fd.Reset();
  }

  UniqueFd fd;  // non-blocking read end
  int sink;     // STDOUT_FILENO or STDERR_FILENO
  LineSplitter lines;
};

// ------------------------------------------------------------------ ranks

// A rank's process is observed to exit with WNOWAIT and reaped only when the job is over: while
// its zombie exists, neither its pid nor its process group id can be reused, so signalling -pid
// reaches the rank's leftovers (a command its shell ran in the background) and nobody else.
struct Child {
  int rank = 0;
  pid_t pid = -1;        // also the id of the rank's process group
  bool running = false;  // forked and not yet exited
  bool reaped = false;
  bool killed_by_launcher = false;  // got our SIGKILL when the grace period ran out
  std::unique_ptr<OutputStream> out;
  std::unique_ptr<OutputStream> err;
};

// Everything a forked child needs, prepared before fork(): the launcher has threads (the store
// server), so between fork() and exec the child may only make async-signal-safe calls.
struct ExecPlan {
  std::string path;
  std::vector<std::string> args;  // argv as given, argv[0] = PROG
  std::vector<char*> argv;
  std::vector<std::string> sh_args;  // "/bin/sh path args...", for scripts without a #! line
  std::vector<char*> sh_argv;
  // The launcher's environment minus the CHORUS_* rank variables.
  std::vector<std::string> base_env;
  sigset_t original_mask{};
  struct sigaction original_sigpipe {};
  int dev_null = -1;
  pid_t launcher = 0;
};

std::vector<char*> PointersTo(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

std::vector<std::string> BaseEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::string_view name = kv.substr(0, kv.find('='));
    bool ours = false;
    for (const char* var : kRankVariables) ours = ours || name == var;
    if (!ours) env.emplace_back(kv);
  }
  return env;
}

// Child side of fork(); never returns.
[[noreturn]] void ExecRank(const ExecPlan& plan, char* const* envp, int out_fd, int err_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork() and prctl(); then nobody would kill this rank.
  if (::getppid() != plan.launcher) ::_exit(kExitLauncherFailed);
  ::dup2(plan.dev_null, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // A blocked signal mask and an ignored SIGPIPE would both survive exec: undo the launcher's.
  ::sigaction(SIGPIPE, &plan.original_sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.original_mask, nullptr);
  ::execve(plan.path.c_str(), plan.argv.data(), envp);
  if (errno == ENOEXEC) ::execve("/bin/sh", plan.sh_argv.data(), envp);
  int err = errno;
  // strerror() may lock (translations); strerrorname_np() reads a constant table.
  const char* parts[] = {"chorus launch: cannot execute ", plan.path.c_str(), ": ",
                         strerrorname_np(err) != nullptr ? strerrorname_np(err) : "error", "\n"};
  for (const char* part : parts) {
    if (::write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
  }
  ::_exit(err == ENOENT ? kExitNotFound : kExitNotExecutable);
}

Result<UniqueFd> SetNonBlocking(UniqueFd fd) {
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
    return Unavailable("fcntl: " + ErrnoText(errno));
  }
  return fd;
}

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

Result<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable("pipe: " + ErrnoText(errno));
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  Result<UniqueFd> read_end = SetNonBlocking(std::move(pipe.read_end));
  if (!read_end.ok()) return read_end.status();
  pipe.read_end = std::move(*read_end);
  return pipe;
}

Status SpawnRank(const ExecPlan& plan, const std::vector<std::string>& rank_env, bool prefix,
                 Child& child) {
  Result<Pipe> out = MakePipe();
  if (!out.ok()) return out.status();
  Result<Pipe> err = MakePipe();
  if (!err.ok()) return err.status();
  std::vector<std::string> env = plan.base_env;
  env.insert(env.end(), rank_env.begin(), rank_env.end());
  std::vector<char*> envp = PointersTo(env);

  pid_t pid = ::fork();
  if (pid < 0) return Unavailable("fork: " + ErrnoText(errno));
  if (pid == 0) ExecRank(plan, envp.data(), out->write_end.get(), err->write_end.get());
  // Also set the group from this side: whichever of the two runs first, the group exists before
  // the launcher could signal it.
  ::setpgid(pid, pid);
  child.pid = pid;
  child.running = true;
  std::string tag = prefix ? "[" + std::to_string(child.rank) + "] " : "";
  // The write ends close here: once the rank and its children are gone, the pipes report EOF.
  child.out = std::make_unique<OutputStream>(std::move(out->read_end), STDOUT_FILENO, tag);
  child.err = std::make_unique<OutputStream>(std::move(err->read_end), STDERR_FILENO, tag);
  return Status::Ok();
}

// ------------------------------------------------------------------ supervision

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
          if (!stream->fd.valid()) continue;
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
    for (const auto& deadline : {job_deadline_, kill_deadline_}) {
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

  void ObserveExits() {
    for (Child& child : children_) {
      if (!child.running) continue;
      siginfo_t info{};
      int rc = ::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc != 0 || info.si_pid != child.pid) continue;
      child.running = false;
      OnRankExit(child, RankExit(info));
    }
  }

  void OnRankExit(Child& child, const RankExit& how) {
    // What the rank wrote last belongs before anything said about its exit.
    child.out->Pump(kDrainLimit);
    child.err->Pump(kDrainLimit);
    if (how.ok() || child.killed_by_launcher || exit_status_) return;
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
};

// ------------------------------------------------------------------ the command

std::optional<std::string> CheckFlags(const LaunchFlags& flags) {
  if (flags.ranks < 1 || flags.ranks > kMaxRanks) {
    return "-n must be between 1 and " + std::to_string(kMaxRanks) + " (got " +
           std::to_string(flags.ranks) + ")";
  }
  if (flags.timeout_ms < 0) return "--timeout-ms must be >= 0 (0: no deadline)";
  if (flags.grace_ms < 0) return "--grace-ms must be >= 0";
  return std::nullopt;
}

int RunLaunch(const LaunchFlags& flags, std::vector<std::string> command) {
  if (std::optional<std::string> problem = CheckFlags(flags)) {
    Note(*problem);
    return kExitUsage;
  }
  // CLI11 hands over everything from the first word it does not know, including a leading "--".
  if (!command.empty() && command.front() == "--") {
    command.erase(command.begin());
  } else if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-') {
    Note("unknown option " + command.front() + " (put -- before a PROG that starts with '-')");
    return kExitUsage;
  }
  if (command.empty()) {
    Note("missing PROG: chorus launch -n N [options] [--] PROG [ARGS...]");
    return kExitUsage;
  }
  Resolved program = ResolveProgram(command.front());
  if (program.exit_code != 0) {
    Note(program.error);
    return program.exit_code;
  }
  EnsureStandardFdsOpen();
  Result<std::string> job_id = MakeJobId();
  if (!job_id.ok()) {
    Note(job_id.status().message());
    return kExitLauncherFailed;
  }

  ExecPlan plan;
  plan.path = program.path;
  plan.args = command;
  plan.argv = PointersTo(plan.args);
  plan.sh_args = {"/bin/sh", program.path};
  plan.sh_args.insert(plan.sh_args.end(), command.begin() + 1, command.end());
  plan.sh_argv = PointersTo(plan.sh_args);
  plan.base_env = BaseEnvironment();
  plan.launcher = ::getpid();
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) {
    Note("cannot open /dev/null: " + ErrnoText(errno));
    return kExitLauncherFailed;
  }
  plan.dev_null = dev_null.get();

  // Block the signals we take from the signalfd before the store server starts its thread, which
  // inherits the mask: a process-directed SIGTERM could otherwise land on that thread and kill the
  // launcher without its ranks being told.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  for (int sig : kForwardedSignals) sigaddset(&handled, sig);
  ::sigprocmask(SIG_BLOCK, &handled, &plan.original_mask);
  // A closed stdout must not kill the launcher (and with it the supervision of the job).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &plan.original_sigpipe);
  UniqueFd signal_fd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) {
    Note("signalfd: " + ErrnoText(errno));
    return kExitLauncherFailed;
  }

  Result<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start({.host = "127.0.0.1", .port = 0});
  if (!server.ok()) {
    Note("cannot start the store server: " + server.status().ToString());
    return kExitLauncherFailed;
  }
  std::vector<std::string> shared_env = {
      "CHORUS_WORLD_SIZE=" + std::to_string(flags.ranks),
      "CHORUS_LOCAL_WORLD_SIZE=" + std::to_string(flags.ranks),
      "CHORUS_STORE=" + (*server)->url(),
      "CHORUS_LAUNCHER=1",
      "CHORUS_JOB_ID=" + *job_id,
  };

  std::vector<Child> children(static_cast<size_t>(flags.ranks));
  for (int rank = 0; rank < flags.ranks; ++rank) {
    Child& child = children[static_cast<size_t>(rank)];
    child.rank = rank;
    std::vector<std::string> rank_env = shared_env;
    rank_env.push_back("CHORUS_RANK=" + std::to_string(rank));
    rank_env.push_back("CHORUS_LOCAL_RANK=" + std::to_string(rank));
    Status spawned = SpawnRank(plan, rank_env, !flags.no_prefix, child);
    if (!spawned.ok()) {
      Note("cannot start rank " + std::to_string(rank) + ": " + spawned.message() +
           "; killing the ranks already started");
      children.resize(static_cast<size_t>(rank));
      for (Child& started : children) {
        ::kill(-started.pid, SIGKILL);
        ::kill(started.pid, SIGKILL);
        while (::waitpid(started.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      return kExitLauncherFailed;
    }
  }
  return Supervisor(flags, children, signal_fd.get()).Run();
}

}  // namespace

void AddLaunchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N ranks of a program on this host with the CHORUS_* bootstrap variables "
      "and a TCP store (a small torchrun / mpirun)");
  cmd->add_option("-n,--ranks", flags->ranks,
                  "number of ranks (processes), 1.." + std::to_string(kMaxRanks));
  cmd->add_option("--timeout-ms", flags->timeout_ms,
                  "kill the whole job after this many milliseconds and exit 124 (0: never)")
      ->capture_default_str();
  cmd->add_option("--grace-ms", flags->grace_ms,
                  "after SIGTERM (or a forwarded signal), wait this long before SIGKILL")
      ->capture_default_str();
  cmd->add_flag("--no-prefix", flags->no_prefix, "do not prefix output lines with [rank]");
  // Never filled: its validator refuses every word, so CLI11 stops parsing at PROG and leaves it
  // and everything after it (options of PROG included) in remaining(). It documents PROG in --help.
  cmd->add_option("PROG", flags->prog_placeholder,
                  "the program (looked up on PATH) and its arguments")
      ->check(CLI::Validator([](std::string&) { return std::string("not an option"); }, "", ""));
  cmd->prefix_command();
  cmd->validate_positionals();
  cmd->footer(
      "Every rank gets CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE,"
      " CHORUS_STORE, CHORUS_LAUNCHER and CHORUS_JOB_ID.\nExit status: 0 when all ranks exit 0; "
      "else the first failed rank's (exit code or 128+signal); 124 timeout; 126/127 PROG not "
      "executable/found; 2 bad arguments; 1 launcher failure.");
  cmd->callback([flags, cmd, &exit_code] { exit_code = RunLaunch(*flags, cmd->remaining()); });
}

}  // namespace chorus::cli
