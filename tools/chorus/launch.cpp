// `chorus launch`: a small torchrun / mpirun. It serves a TcpStoreServer for the job, starts
// N ranks of one program on this host or, through an rsh agent (ssh), on other hosts, prefixes
// their output with the rank, forwards SIGINT/SIGTERM/SIGHUP to them, and stops the whole job as
// soon as one rank fails.
//
//   chorus launch -n 4 -- ./train --epochs 3
//   chorus launch -n 2 --timeout-ms 60000 sh -c 'echo "rank $CHORUS_RANK of $CHORUS_WORLD_SIZE"'
//   chorus launch --hosts node1:2,node2:2 --store-host eth0 -- /shared/train --epochs 3
//
// Every rank r of N gets:
//   CHORUS_RANK=r  CHORUS_WORLD_SIZE=N
//   CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE   its index among the ranks of its host, and how
//                                                many there are (r and N on one host)
//   CHORUS_STORE=tcp://ADDR:PORT   (served by the launcher while the job runs)
//   CHORUS_LAUNCHER=1  CHORUS_JOB_ID=<16 random hex digits, the same for every rank>
//   CHORUS_SECRET=<64 random hex digits> when the launcher's environment has neither
//     CHORUS_SECRET nor CHORUS_SECRET_FILE (otherwise the ranks use those, as the store does)
// and /dev/null as stdin: N ranks cannot share one terminal's input.
//
// Binding (--bind core): local rank i runs on the i-th CPU the launcher may use, set between
// fork and exec, so the rank's every thread inherits it, when there is a CPU per local rank
// (not with --hosts). The default is none: a rank that runs threads of its own (a torch intra-op
// pool, a TCP progress thread) would share its one CPU with them. Ranks that wait without such
// threads gain from it on a busy machine (docs/waiting.md): a rank bound to its own CPU spins
// instead of yielding it to other work for a time slice.
//
// Secret: every connection to the store and between ranks proves the job's secret. The launcher
// makes one up unless CHORUS_SECRET (which wins) or CHORUS_SECRET_FILE is set, and serves the
// store with the same text the ranks derive their key from (the file's text minus one trailing
// newline, as CommOptionsFromEnvironment reads it).
//
// Hosts (--hosts NAME[:SLOTS],...): ranks fill the hosts' slots in order (node1:2,node2:2 puts
// ranks 0-1 on node1 and 2-3 on node2); -n defaults to the number of slots and may be smaller.
// Rank r on HOST is started as the argv
//   AGENT... HOST sh -c 'IFS= read -r CHORUS_SECRET ...; exec "$@" </dev/null' chorus-rank
//       env CHORUS_*=... [-x NAME=VALUE...] PROG ARGS...
// where AGENT is --rsh split at spaces (default "ssh", like mpirun's plm_rsh_agent). The agent
// must behave as ssh does: join the words after HOST with spaces and have a POSIX shell on HOST
// run them, so every word is shell-quoted here. The secret travels on the agent's stdin, never
// in an argv that `ps` would show on either host (the launcher writes one line and closes the
// pipe; the rank's own stdin is /dev/null again); with CHORUS_SECRET_FILE, the ranks get only
// its path, which must then exist on every host. The remote environment is what the agent
// gives (ssh: a fresh login) plus the rank variables, every CHORUS_* variable of the launcher's
// environment and each -x NAME[=VALUE]. The store binds --store-host (an IPv4 address or an
// interface name; default: this host's first non-loopback IPv4 interface that is up, the same
// rule the TCP transport uses to listen) and every rank must reach it.
// Through the agent the launcher sees the agent, not the rank: output, the first failure and
// exit statuses come through whatever the agent passes on. ssh passes output and the exit code
// (a rank killed by a signal shows as status 255), but neither signals nor the launcher's end:
// a rank stopped that way notices only when its connections to the store and its peers break.
// An agent that execs its way to the command (tests/netns/netns-rsh) passes everything.
//
// Output: each line a rank writes comes out whole as "[r] line" on the launcher's stream of the
// same name (a last line without '\n' gets one). The launcher is the only writer of its stdout
// and stderr and writes whole lines, so lines of different ranks never mix.
//
// Process model: every rank leads its own process group. A signal meant for a rank then reaches
// its whole tree (a shell and the command it waits for), and a Ctrl-C on the terminal reaches the
// launcher alone, which forwards it exactly once. A launcher that dies without cleaning up
// (SIGKILL, crash) leaves no orphans: PR_SET_PDEATHSIG kills each rank's first process, and a
// reaper (below) that outlives the launcher kills every rank's whole process group within a
// second. Signals are taken from a signalfd so that child exits, forwarded signals, output and
// deadlines are all handled by one poll() loop.
//
// Stopping: when a rank exits non-zero or dies by a signal, the other ranks' process groups get
// SIGTERM and, after --grace-ms, SIGKILL; a forwarded signal or the --timeout-ms deadline starts
// the same sequence. Once every rank has exited, what a stopped job left behind in those groups
// gets SIGKILL. The launcher does not wait for such leftovers: it is done when its ranks are.
//
// Exit status: 0 when every rank exits 0; otherwise that of the first rank that failed (its exit
// code, or 128 + signal; a rank killed by a signal within 100 ms after a rank's failing exit code
// counts as first: peers that notice a crash can exit before the crashed process is seen gone); 124
// after --timeout-ms; 128 + signal when a forwarded signal left ranks that had to be killed; 127 /
// 126 when PROG (with --hosts: AGENT) is not found / not executable (as in a shell); 2 for bad
// arguments; 1 when the launcher itself cannot start the job.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/store.h"
#include "commands.h"
#include "net/auth.h"

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
// How long a rank's failing exit code waits for a death by signal to be seen and take its place
// as the job's first failure (see Supervisor::OnRankExit).
constexpr auto kSettle = std::chrono::milliseconds(100);
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

// What a rank started through the agent sees before its command: it takes the secret from the
// first line of its stdin (so that no argv shows it) and gives the command /dev/null instead.
constexpr char kReadSecretScript[] =
    "IFS= read -r CHORUS_SECRET || { echo \"chorus launch: no secret on stdin\" >&2; exit 1; }; "
    "export CHORUS_SECRET; exec \"$@\" </dev/null";

struct LaunchFlags {
  int ranks = 0;           // 0 with --hosts: one rank per slot
  int64_t timeout_ms = 0;  // 0: no deadline
  int64_t grace_ms = 2000;
  bool no_prefix = false;
  std::string bind = "none";                  // --bind: none or core
  std::string hosts;                          // "node1:2,node2:2"; empty: every rank on this host
  std::string rsh;                            // the agent that starts a rank on a host; empty: ssh
  std::string store_host;                     // address or interface the store binds
  std::vector<std::string> exports;           // -x NAME[=VALUE]
  std::vector<std::string> prog_placeholder;  // see AddLaunchCommand
};

// ------------------------------------------------------------------ small OS helpers

// The CPUs this process may run on, in order.
std::vector<int> UsableCpuList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

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

// ------------------------------------------------------------------ hosts, store, secret

struct HostSlots {
  std::string name;
  int slots = 1;
};

// "node1:2,node2,node3:4" -> {node1, 2}, {node2, 1}, {node3, 4}.
Result<std::vector<HostSlots>> ParseHosts(std::string_view text) {
  std::vector<HostSlots> hosts;
  std::set<std::string, std::less<>> seen;
  while (true) {
    size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    HostSlots host;
    size_t colon = entry.rfind(':');
    host.name = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      std::string count(entry.substr(colon + 1));
      char* end = nullptr;
      errno = 0;
      long slots = std::strtol(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || errno != 0 || slots < 1 || slots > kMaxRanks) {
        return InvalidArgument("--hosts: \"" + std::string(entry) +
                               "\": the slot count must be an integer in [1, " +
                               std::to_string(kMaxRanks) + "]");
      }
      host.slots = static_cast<int>(slots);
    }
    // The name becomes an argument of the agent: one that looks like an option would be taken
    // for one.
    if (host.name.empty() || host.name[0] == '-' ||
        host.name.find_first_of(" \t\n\r\"'\\;&|<>()$`*?[]{}~#") != std::string::npos) {
      return InvalidArgument("--hosts: \"" + std::string(entry) +
                             "\" is not HOST or HOST:SLOTS with a plain host name");
    }
    if (!seen.insert(host.name).second) {
      return InvalidArgument("--hosts: " + host.name + " is listed twice");
    }
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return hosts;
}

// Where rank r runs: host index into the --hosts list (-1: this host, no agent).
struct Placement {
  int host = -1;
  int local_rank = 0;
  int local_size = 0;
};

// Fills the hosts' slots in order; without hosts every rank is local.
std::vector<Placement> PlaceRanks(const std::vector<HostSlots>& hosts, int ranks) {
  std::vector<Placement> placement;
  if (hosts.empty()) {
    for (int r = 0; r < ranks; ++r) placement.push_back({-1, r, ranks});
    return placement;
  }
  for (size_t h = 0; h < hosts.size() && static_cast<int>(placement.size()) < ranks; ++h) {
    const int here = std::min(hosts[h].slots, ranks - static_cast<int>(placement.size()));
    for (int local = 0; local < here; ++local) {
      placement.push_back({static_cast<int>(h), local, here});
    }
  }
  return placement;
}

// The IPv4 address the store binds and the ranks dial: --store-host as an address or the name
// of an interface; without it, loopback for a one-host job, else the first non-loopback IPv4
// interface that is up. Names are never looked up in DNS: the store must be on this host.
Result<std::string> StoreAddress(const std::string& flag, bool multi_host) {
  if (flag.empty() && !multi_host) return std::string("127.0.0.1");
  in_addr parsed{};
  if (!flag.empty() && ::inet_pton(AF_INET, flag.c_str(), &parsed) == 1) {
    if (parsed.s_addr == htonl(INADDR_ANY)) {
      return InvalidArgument(
          "--store-host 0.0.0.0: the ranks need one address to dial; name "
          "the interface they reach this host on");
    }
    return flag;
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Unavailable("getifaddrs: " + ErrnoText(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, ::freeifaddrs);
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if (flag.empty() ? ((ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0)
                     : flag != ifa->ifa_name) {
      continue;
    }
    sockaddr_in addr{};
    std::memcpy(&addr, ifa->ifa_addr, sizeof(addr));
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
    return std::string(text);
  }
  if (flag.empty()) {
    return Unavailable(
        "no IPv4 interface other than loopback is up for the store; name one "
        "with --store-host");
  }
  return InvalidArgument("--store-host " + flag +
                         ": not an IPv4 address, nor an interface of this host with one");
}

struct JobSecret {
  std::string text;        // what the store and the ranks derive the key from
  bool generated = false;  // made up here: the launcher must hand it to the ranks
};

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The job's secret, decided as the ranks' CommOptionsFromEnvironment will: CHORUS_SECRET, else
// the text of CHORUS_SECRET_FILE (internal::ReadSecretFile), else a fresh one.
Result<JobSecret> DecideSecret() {
  if (std::optional<std::string> text = NonEmptyEnv("CHORUS_SECRET")) return JobSecret{*text};
  if (std::optional<std::string> path = NonEmptyEnv("CHORUS_SECRET_FILE")) {
    Result<std::string> text = internal::ReadSecretFile(*path);
    if (!text.ok()) return text.status();
    return JobSecret{std::move(text).value()};
  }
  return JobSecret{internal::Secret::Generate(), true};
}

// `word` as a POSIX shell reads it back: bare when it has nothing special, else single-quoted.
std::string ShellQuote(std::string_view word) {
  constexpr std::string_view kPlain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%";
  if (!word.empty() && word.find_first_not_of(kPlain) == std::string_view::npos) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// "ssh -p 2222" -> {"ssh", "-p", "2222"}.
std::vector<std::string> SplitWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool IsVariableName(std::string_view name) {
  if (name.empty() || (std::isdigit(static_cast<unsigned char>(name[0])) != 0)) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

bool IsRankVariable(std::string_view name) {
  return std::find(kRankVariables.begin(), kRankVariables.end(), name) != kRankVariables.end();
}

// -x NAME=VALUE stays; -x NAME takes the launcher's value. Errors name the flag.
Result<std::vector<std::string>> ResolveExports(const std::vector<std::string>& exports) {
  std::vector<std::string> resolved;
  for (const std::string& entry : exports) {
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (!IsVariableName(name)) {
      return InvalidArgument("-x " + entry + ": want NAME or NAME=VALUE");
    }
    if (IsRankVariable(name)) {
      return InvalidArgument("-x " + name + ": the launcher sets it for every rank");
    }
    if (name == "CHORUS_SECRET") {
      return InvalidArgument(
          "-x CHORUS_SECRET: an argv would show it; set it in the "
          "launcher's environment, which hands it to the ranks privately");
    }
    if (eq != std::string::npos) {
      resolved.push_back(entry);
      continue;
    }
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return InvalidArgument("-x " + name + ": not set here");
    resolved.push_back(name + "=" + value);
  }
  return resolved;
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
  std::string path;  // PROG, or with --hosts the agent
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

// How one rank is started: its argv (argv[0] as given) and what it gets on top of the launcher's
// environment; `stdin_line`, when not empty, is all its stdin holds (else /dev/null).
struct RankCommand {
  std::vector<std::string> args;
  std::vector<std::string> env;  // NAME=VALUE, replacing the launcher's values of NAME
  std::string stdin_line;
  int cpu = -1;  // >= 0: the rank runs on this CPU only (--bind core)
};

// The argv and envp of a rank, prepared before fork().
struct ExecArgs {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::vector<std::string> sh_args;  // "/bin/sh path args...", for scripts without a #! line
  std::vector<char*> sh_argv;
  std::vector<std::string> env;
  std::vector<char*> envp;
  bool bind = false;  // set `cpus` as the rank's affinity before exec
  cpu_set_t cpus{};
};

// Child side of fork(); never returns.
[[noreturn]] void ExecRank(const ExecPlan& plan, const ExecArgs& exec, int in_fd, int out_fd,
                           int err_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork() and prctl(); then nobody would kill this rank.
  if (::getppid() != plan.launcher) ::_exit(kExitLauncherFailed);
  ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // A blocked signal mask and an ignored SIGPIPE would both survive exec: undo the launcher's.
  ::sigaction(SIGPIPE, &plan.original_sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.original_mask, nullptr);
  // Best effort, like mpirun's binding: a rank that cannot be bound still runs.
  if (exec.bind) ::sched_setaffinity(0, sizeof exec.cpus, &exec.cpus);
  ::execve(plan.path.c_str(), exec.argv.data(), exec.envp.data());
  if (errno == ENOEXEC) ::execve("/bin/sh", exec.sh_argv.data(), exec.envp.data());
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

ExecArgs PrepareExec(const ExecPlan& plan, const RankCommand& command) {
  ExecArgs exec;
  exec.args = command.args;
  exec.argv = PointersTo(exec.args);
  exec.sh_args = {"/bin/sh", plan.path};
  exec.sh_args.insert(exec.sh_args.end(), command.args.begin() + 1, command.args.end());
  exec.sh_argv = PointersTo(exec.sh_args);
  std::set<std::string_view> replaced;
  for (const std::string& kv : command.env)
    replaced.insert(std::string_view(kv).substr(0, kv.find('=')));
  for (const std::string& kv : plan.base_env) {
    if (replaced.count(std::string_view(kv).substr(0, kv.find('='))) == 0) exec.env.push_back(kv);
  }
  exec.env.insert(exec.env.end(), command.env.begin(), command.env.end());
  exec.envp = PointersTo(exec.env);
  if (command.cpu >= 0) {
    exec.bind = true;
    CPU_ZERO(&exec.cpus);
    CPU_SET(command.cpu, &exec.cpus);
  }
  return exec;
}

// A pipe that holds `line` and then reports end of file; the read end is returned.
Result<UniqueFd> PipeHolding(const std::string& line) {
  // Written before the rank starts, so it must fit in the pipe: 4 KiB always does.
  if (line.size() > 4096) return Unavailable("the secret is too long to pass on stdin (> 4 KiB)");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable("pipe: " + ErrnoText(errno));
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  if (::write(write_end.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return Unavailable("cannot write the rank's stdin: " + ErrnoText(errno));
  }
  return read_end;
}

Status SpawnRank(const ExecPlan& plan, const RankCommand& command, bool prefix, Child& child) {
  Result<Pipe> out = MakePipe();
  if (!out.ok()) return out.status();
  Result<Pipe> err = MakePipe();
  if (!err.ok()) return err.status();
  UniqueFd stdin_pipe;
  if (!command.stdin_line.empty()) {
    Result<UniqueFd> in = PipeHolding(command.stdin_line);
    if (!in.ok()) return in.status();
    stdin_pipe = std::move(*in);
  }
  const int in_fd = stdin_pipe.valid() ? stdin_pipe.get() : plan.dev_null;
  const ExecArgs exec = PrepareExec(plan, command);

  pid_t pid = ::fork();
  if (pid < 0) return Unavailable("fork: " + ErrnoText(errno));
  if (pid == 0) ExecRank(plan, exec, in_fd, out->write_end.get(), err->write_end.get());
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

// ------------------------------------------------------------------ the reaper

// PR_SET_PDEATHSIG reaches only a rank's first process: a rank run as `sh -c 'prog; echo done'`
// would keep computing after a SIGKILLed launcher. So before the first rank the launcher forks a
// reaper that outlives it. The reaper learns each rank's process group through a pipe whose
// only writer is the launcher; when the pipe reports end of file without the launcher's
// "done", the launcher has died, and the reaper sends every group SIGTERM and, kReapGrace
// later (or at once when all are gone), SIGKILL. The reaper leads a process group of its own
// and keeps the launcher's blocked signals, so neither a Ctrl-C nor a kill of the launcher's
// group stops it. The ranks' zombies keep their group ids reserved while the launcher lives;
// after its death the reaper signals within milliseconds, long before pids could wrap around.
class Reaper {
 public:
  static constexpr auto kReapGrace = std::chrono::milliseconds(300);

  // Forks the reaper for up to `ranks` process groups.
  static Result<Reaper> Start(int ranks) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Unavailable("pipe: " + ErrnoText(errno));
    UniqueFd from_launcher(fds[0]);
    UniqueFd to_reaper(fds[1]);
    // Allocated before fork(): the reaper may only make async-signal-safe calls.
    std::vector<pid_t> groups(static_cast<size_t>(ranks));
    const pid_t pid = ::fork();
    if (pid < 0) return Unavailable("fork: " + ErrnoText(errno));
    if (pid == 0) Run(from_launcher.get(), groups.data(), groups.size());
    return Reaper(pid, std::move(to_reaper));
  }

  // After a rank's fork: the reaper will stop group `group` should the launcher die.
  void Watch(pid_t group) const {
    const int32_t message = group;
    [[maybe_unused]] ssize_t n = ::write(to_reaper_.get(), &message, sizeof(message));
  }

  // At the launcher's normal end (its supervisor has dealt with the ranks): the reaper leaves.
  void Done() {
    if (!to_reaper_.valid()) return;
    const int32_t done = 0;
    [[maybe_unused]] ssize_t n = ::write(to_reaper_.get(), &done, sizeof(done));
    to_reaper_ = UniqueFd();
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

 private:
  Reaper(pid_t pid, UniqueFd to_reaper) : pid_(pid), to_reaper_(std::move(to_reaper)) {}

  // The reaper's side of fork(); never returns.
  [[noreturn]] static void Run(int from_launcher, pid_t* groups, size_t capacity) {
    ::setpgid(0, 0);
    // Hold nothing of the launcher's but the pipe: not its store's sockets, and not its stdout,
    // whose reader waits for end of file (the launcher made sure fds 0-2 are open, so the pipe
    // is above them).
    const unsigned fd = static_cast<unsigned>(from_launcher);
    if (fd > 3) ::syscall(SYS_close_range, 3u, fd - 1, 0u);
    ::syscall(SYS_close_range, fd + 1, ~0u, 0u);
    const int null = ::open("/dev/null", O_RDWR);
    for (int standard = 0; standard < 3 && null >= 0; ++standard) ::dup2(null, standard);
    if (null > 2) ::close(null);
    size_t known = 0;
    for (;;) {
      int32_t message = 0;
      const ssize_t n = ::read(from_launcher, &message, sizeof(message));
      if (n < 0 && errno == EINTR) continue;
      if (n != static_cast<ssize_t>(sizeof(message))) break;  // the launcher is gone
      if (message == 0) ::_exit(0);                           // done
      if (known < capacity) groups[known++] = message;
    }
    for (size_t i = 0; i < known; ++i) ::kill(-groups[i], SIGTERM);
    constexpr auto kTick = std::chrono::milliseconds(10);
    const timespec tick{.tv_sec = 0, .tv_nsec = std::chrono::nanoseconds(kTick).count()};
    for (int i = 0; i < kReapGrace / kTick; ++i) {
      bool any = false;
      for (size_t g = 0; g < known; ++g) any = any || ::kill(-groups[g], 0) == 0;
      if (!any) ::_exit(0);
      ::nanosleep(&tick, nullptr);
    }
    for (size_t g = 0; g < known; ++g) ::kill(-groups[g], SIGKILL);
    ::_exit(0);
  }

  pid_t pid_;
  UniqueFd to_reaper_;
};

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

// ------------------------------------------------------------------ the command

std::optional<std::string> CheckFlags(const LaunchFlags& flags, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    return "-n must be between 1 and " + std::to_string(kMaxRanks) + " (got " +
           std::to_string(ranks) + ")";
  }
  if (flags.timeout_ms < 0) return "--timeout-ms must be >= 0 (0: no deadline)";
  if (flags.grace_ms < 0) return "--grace-ms must be >= 0";
  if (flags.hosts.empty() && !flags.rsh.empty()) return "--rsh needs --hosts";
  return std::nullopt;
}

// The CHORUS_* variables of the launcher's environment that a remote rank gets on top of its
// own: all but the rank variables, and the secret, which goes on stdin.
std::vector<std::string> ForwardedVariables() {
  std::vector<std::string> forwarded;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::string_view name = kv.substr(0, kv.find('='));
    if (name.rfind("CHORUS_", 0) != 0 || IsRankVariable(name) || name == "CHORUS_SECRET") continue;
    forwarded.emplace_back(kv);
  }
  return forwarded;
}

// Rank r through the agent: AGENT... HOST [sh -c READ-SECRET chorus-rank] env VARS... PROG ARGS,
// every word after HOST quoted for the shell that runs it there.
RankCommand RemoteCommand(const std::vector<std::string>& agent, const std::string& host,
                          const std::vector<std::string>& env, const std::vector<std::string>& prog,
                          const std::string* secret_on_stdin) {
  std::vector<std::string> words;
  if (secret_on_stdin != nullptr) words = {"sh", "-c", kReadSecretScript, "chorus-rank"};
  words.emplace_back("env");
  words.insert(words.end(), env.begin(), env.end());
  words.insert(words.end(), prog.begin(), prog.end());
  RankCommand command;
  command.args = agent;
  command.args.push_back(host);
  for (const std::string& word : words) command.args.push_back(ShellQuote(word));
  if (secret_on_stdin != nullptr) command.stdin_line = *secret_on_stdin + "\n";
  return command;
}

int RunLaunch(const LaunchFlags& flags, std::vector<std::string> command) {
  std::vector<HostSlots> hosts;
  int ranks = flags.ranks;
  if (!flags.hosts.empty()) {
    Result<std::vector<HostSlots>> parsed = ParseHosts(flags.hosts);
    if (!parsed.ok()) {
      Note(parsed.status().message());
      return kExitUsage;
    }
    hosts = std::move(*parsed);
    int64_t slots = 0;
    for (const HostSlots& host : hosts) slots += host.slots;
    if (ranks == 0) ranks = static_cast<int>(std::min<int64_t>(slots, kMaxRanks + 1));
    if (ranks > slots) {
      Note("-n " + std::to_string(ranks) + " is more than the " + std::to_string(slots) +
           " slots of --hosts");
      return kExitUsage;
    }
  }
  if (std::optional<std::string> problem = CheckFlags(flags, ranks)) {
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
  Result<std::vector<std::string>> exports = ResolveExports(flags.exports);
  if (!exports.ok()) {
    Note(exports.status().message());
    return kExitUsage;
  }
  // PROG runs here, or on the hosts (where only they can find it) through the agent.
  const bool remote = !hosts.empty();
  const std::vector<std::string> agent = SplitWords(flags.rsh.empty() ? "ssh" : flags.rsh);
  if (agent.empty()) {
    Note("--rsh is empty");
    return kExitUsage;
  }
  Resolved program = ResolveProgram(remote ? agent.front() : command.front());
  if (program.exit_code != 0) {
    Note(program.error);
    return program.exit_code;
  }
  Result<std::string> store_address = StoreAddress(flags.store_host, remote);
  if (!store_address.ok()) {
    Note(store_address.status().message());
    return store_address.status().code() == StatusCode::kInvalidArgument ? kExitUsage
                                                                         : kExitLauncherFailed;
  }
  Result<JobSecret> secret = DecideSecret();
  if (!secret.ok()) {
    Note(secret.status().message());
    return kExitLauncherFailed;
  }
  EnsureStandardFdsOpen();
  Result<std::string> job_id = MakeJobId();
  if (!job_id.ok()) {
    Note(job_id.status().message());
    return kExitLauncherFailed;
  }

  ExecPlan plan;
  plan.path = program.path;
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
      TcpStoreServer::Start({.host = *store_address, .port = 0, .secret = secret->text});
  if (!server.ok()) {
    Note("cannot start the store server: " + server.status().ToString());
    return kExitLauncherFailed;
  }
  std::vector<std::string> shared_env = {
      "CHORUS_WORLD_SIZE=" + std::to_string(ranks),
      "CHORUS_STORE=" + (*server)->url(),
      "CHORUS_LAUNCHER=1",
      "CHORUS_JOB_ID=" + *job_id,
  };
  // A secret the ranks cannot find in their environment: local ranks get it there (only their
  // user may read it), remote ones on stdin.
  const std::string* secret_to_pass =
      secret->generated || NonEmptyEnv("CHORUS_SECRET") ? &secret->text : nullptr;
  const std::vector<std::string> forwarded =
      remote ? ForwardedVariables() : std::vector<std::string>{};

  Result<Reaper> reaper = Reaper::Start(ranks);
  if (!reaper.ok()) {
    Note("cannot start the reaper: " + reaper.status().message());
    return kExitLauncherFailed;
  }
  const std::vector<Placement> placement = PlaceRanks(hosts, ranks);
  // --bind core: local rank i on the i-th CPU the launcher may use, when there are enough.
  std::vector<int> cpus;
  if (flags.bind == "core" && !remote) {
    cpus = UsableCpuList();
    if (static_cast<int>(cpus.size()) < ranks) {
      Note("--bind core: " + std::to_string(ranks) + " ranks but " + std::to_string(cpus.size()) +
           " CPUs; the ranks run unbound");
      cpus.clear();
    }
  }
  std::vector<Child> children(static_cast<size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    const Placement& where = placement[static_cast<size_t>(rank)];
    Child& child = children[static_cast<size_t>(rank)];
    child.rank = rank;
    std::vector<std::string> rank_env = remote ? forwarded : std::vector<std::string>{};
    rank_env.insert(rank_env.end(), exports->begin(), exports->end());
    rank_env.insert(rank_env.end(), shared_env.begin(), shared_env.end());
    rank_env.push_back("CHORUS_RANK=" + std::to_string(rank));
    rank_env.push_back("CHORUS_LOCAL_RANK=" + std::to_string(where.local_rank));
    rank_env.push_back("CHORUS_LOCAL_WORLD_SIZE=" + std::to_string(where.local_size));
    RankCommand rank_command;
    if (remote) {
      rank_command = RemoteCommand(agent, hosts[static_cast<size_t>(where.host)].name, rank_env,
                                   command, secret_to_pass);
    } else {
      if (secret->generated) rank_env.push_back("CHORUS_SECRET=" + secret->text);
      rank_command = {.args = command, .env = std::move(rank_env)};
      if (!cpus.empty()) rank_command.cpu = cpus[static_cast<size_t>(where.local_rank)];
    }
    Status spawned = SpawnRank(plan, rank_command, !flags.no_prefix, child);
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
      reaper->Done();
      return kExitLauncherFailed;
    }
    reaper->Watch(child.pid);
  }
  const int status = Supervisor(flags, children, signal_fd.get()).Run();
  reaper->Done();
  return status;
}

}  // namespace

void AddLaunchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N ranks of a program, on this host or through ssh on several, with the CHORUS_* "
      "bootstrap variables, a TCP store and a job secret (a small torchrun / mpirun)");
  cmd->add_option("-n,--ranks", flags->ranks,
                  "number of ranks (processes), 1.." + std::to_string(kMaxRanks) +
                      "; with --hosts, default: every slot");
  cmd->add_option("--hosts", flags->hosts,
                  "HOST[:SLOTS],...: run the ranks on these hosts through --rsh, filling each "
                  "host's slots (default 1) in order");
  cmd->add_option("--rsh", flags->rsh,
                  "with --hosts: the command, split at spaces, that runs a shell command on a host "
                  "as `AGENT HOST WORDS...` the way ssh does (default: ssh)");
  cmd->add_option("--store-host", flags->store_host,
                  "IPv4 address or interface the store binds and the ranks dial (default: "
                  "127.0.0.1; with --hosts, the first non-loopback IPv4 interface that is up)");
  cmd->add_option("-x,--export", flags->exports,
                  "NAME[=VALUE]: also give the ranks this variable (NAME alone: the launcher's "
                  "value); repeatable. With --hosts, CHORUS_* variables are passed on anyway")
      ->allow_extra_args(false);
  cmd->add_option("--timeout-ms", flags->timeout_ms,
                  "kill the whole job after this many milliseconds and exit 124 (0: never)")
      ->capture_default_str();
  cmd->add_option("--grace-ms", flags->grace_ms,
                  "after SIGTERM (or a forwarded signal), wait this long before SIGKILL")
      ->capture_default_str();
  cmd->add_flag("--no-prefix", flags->no_prefix, "do not prefix output lines with [rank]");
  cmd->add_option("--bind", flags->bind,
                  "none: the ranks run where the scheduler puts them; core: local rank i runs on "
                  "the i-th CPU the launcher may use (when there is one per rank; not with "
                  "--hosts). Bound ranks that each have a CPU wait by spinning, which is fastest "
                  "beside other busy work (docs/waiting.md); a rank that runs threads of its own "
                  "(a torch intra-op pool) is better left unbound")
      ->check(CLI::IsMember({"none", "core"}))
      ->capture_default_str();
  // Never filled: its validator refuses every word, so CLI11 stops parsing at PROG and leaves it
  // and everything after it (options of PROG included) in remaining(). It documents PROG in --help.
  cmd->add_option("PROG", flags->prog_placeholder,
                  "the program (looked up on PATH; with --hosts, on each host) and its arguments")
      ->check(CLI::Validator([](std::string&) { return std::string("not an option"); }, "", ""));
  cmd->prefix_command();
  cmd->validate_positionals();
  cmd->footer(
      "Every rank gets CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE "
      "(per host), CHORUS_STORE, CHORUS_LAUNCHER, CHORUS_JOB_ID and, unless CHORUS_SECRET or "
      "CHORUS_SECRET_FILE is set, a fresh CHORUS_SECRET.\n"
      "With --hosts, rank r on HOST runs as `AGENT HOST sh -c '<read CHORUS_SECRET from stdin>' "
      "chorus-rank env CHORUS_...=... PROG ARGS` (words shell-quoted; the secret comes on stdin, "
      "never in an argv; with CHORUS_SECRET_FILE only its path is passed, so the file must exist "
      "on every host). ssh passes output and exit codes but not signals.\n"
      "Exit status: 0 when all ranks exit 0; else the first failed rank's (exit code or "
      "128+signal); 124 timeout; 126/127 PROG (with --hosts: AGENT) not executable/found; "
      "2 bad arguments; 1 launcher failure.");
  cmd->callback([flags, cmd, &exit_code] { exit_code = RunLaunch(*flags, cmd->remaining()); });
}

}  // namespace chorus::cli
