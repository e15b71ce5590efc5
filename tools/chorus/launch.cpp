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
// reaper (launch/reaper.h) that outlives the launcher kills every rank's whole process group
// within a second. Signals are taken from a signalfd so that child exits, forwarded signals,
// output and deadlines are all handled by one poll() loop.
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
//
// The parts live in launch/: plan (flags, hosts, placement, quoting; pure), job (PROG's path,
// the store's address, the secret), spawn (a rank's fork and exec), output and line_splitter
// (the ranks' prefixed lines), reaper (stops the ranks of a launcher that died), supervisor
// (the poll() loop) and sys (small OS helpers). This file wires them into the command.
#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/store.h"
#include "commands.h"
#include "launch/job.h"
#include "launch/plan.h"
#include "launch/reaper.h"
#include "launch/spawn.h"
#include "launch/supervisor.h"
#include "launch/sys.h"

namespace chorus::cli {
namespace launch {
namespace {

constexpr std::array<int, 3> kForwardedSignals = {SIGINT, SIGTERM, SIGHUP};

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
  if (!dev_null) {
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
  if (!signal_fd) {
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
  const int status = Supervise(flags, children, signal_fd.get());
  reaper->Done();
  return status;
}

}  // namespace
}  // namespace launch

void AddLaunchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<launch::LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Run N ranks of a program, on this host or through ssh on several, with the CHORUS_* "
      "bootstrap variables, a TCP store and a job secret (a small torchrun / mpirun)");
  cmd->add_option("-n,--ranks", flags->ranks,
                  "number of ranks (processes), 1.." + std::to_string(launch::kMaxRanks) +
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
  cmd->callback(
      [flags, cmd, &exit_code] { exit_code = launch::RunLaunch(*flags, cmd->remaining()); });
}

}  // namespace chorus::cli
