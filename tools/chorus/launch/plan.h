// plan.h: the pure parts of `chorus launch` (launch.cpp): its flags and exit statuses, the
// --hosts list and where each rank runs, the -x exports, shell quoting and the argv of a rank
// started through the agent. Nothing here starts a process or touches a file descriptor;
// ResolveExports and ForwardedVariables read the environment. tests/launch_plan_test.cpp tests
// them through the chorus_launch_plan library.
//
// Thread safety: plain functions over values; those that read the environment must not race
// with setenv().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/status.h"

namespace chorus::cli::launch {

// The launcher's exit statuses besides a rank's own (launch.cpp's header comment).
inline constexpr int kExitLauncherFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;
inline constexpr int kMaxRanks = 1024;
inline constexpr std::array<const char*, 7> kRankVariables = {
    "CHORUS_RANK",  "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_WORLD_SIZE",
    "CHORUS_STORE", "CHORUS_LAUNCHER",   "CHORUS_JOB_ID"};

// What a rank started through the agent sees before its command: it takes the secret from the
// first line of its stdin (so that no argv shows it) and gives the command /dev/null instead.
inline constexpr char kReadSecretScript[] =
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

// ------------------------------------------------------------------ hosts

struct HostSlots {
  std::string name;
  int slots = 1;
};

// "node1:2,node2,node3:4" -> {node1, 2}, {node2, 1}, {node3, 4}.
Result<std::vector<HostSlots>> ParseHosts(std::string_view text);

// Where rank r runs: host index into the --hosts list (-1: this host, no agent).
struct Placement {
  int host = -1;
  int local_rank = 0;
  int local_size = 0;
};

// Fills the hosts' slots in order; without hosts every rank is local.
std::vector<Placement> PlaceRanks(const std::vector<HostSlots>& hosts, int ranks);

// ------------------------------------------------------------------ words and variables

// `word` as a POSIX shell reads it back: bare when it has nothing special, else single-quoted.
std::string ShellQuote(std::string_view word);

// "ssh -p 2222" -> {"ssh", "-p", "2222"}.
std::vector<std::string> SplitWords(const std::string& text);

bool IsVariableName(std::string_view name);

bool IsRankVariable(std::string_view name);

// -x NAME=VALUE stays; -x NAME takes the launcher's value. Errors name the flag.
Result<std::vector<std::string>> ResolveExports(const std::vector<std::string>& exports);

// ------------------------------------------------------------------ the command

// How one rank is started: its argv (argv[0] as given) and what it gets on top of the launcher's
// environment; `stdin_line`, when not empty, is all its stdin holds (else /dev/null).
struct RankCommand {
  std::vector<std::string> args;
  std::vector<std::string> env;  // NAME=VALUE, replacing the launcher's values of NAME
  std::string stdin_line;
  int cpu = -1;  // >= 0: the rank runs on this CPU only (--bind core)
};

// What is wrong with the flags for a job of `ranks` ranks, if anything.
std::optional<std::string> CheckFlags(const LaunchFlags& flags, int ranks);

// The CHORUS_* variables of the launcher's environment that a remote rank gets on top of its
// own: all but the rank variables, and the secret, which goes on stdin.
std::vector<std::string> ForwardedVariables();

// Rank r through the agent: AGENT... HOST [sh -c READ-SECRET chorus-rank] env VARS... PROG ARGS,
// every word after HOST quoted for the shell that runs it there.
RankCommand RemoteCommand(const std::vector<std::string>& agent, const std::string& host,
                          const std::vector<std::string>& env, const std::vector<std::string>& prog,
                          const std::string* secret_on_stdin);

}  // namespace chorus::cli::launch
