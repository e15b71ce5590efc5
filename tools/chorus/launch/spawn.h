// spawn.h: starting one rank of `chorus launch`: its environment, its pipes, fork() and exec.
// RunLaunch (launch.cpp) prepares an ExecPlan once and calls SpawnRank for each rank; the
// supervisor (supervisor.h) watches the Child it fills in.
//
// Thread safety: SpawnRank forks; call it from the launcher's one supervising thread. The
// launcher has other threads (the store server), which is why everything the child needs is
// prepared before fork().
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/status.h"
#include "launch/output.h"
#include "launch/plan.h"

namespace chorus::cli::launch {

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

// The launcher's environment minus the CHORUS_* rank variables: ExecPlan::base_env.
std::vector<std::string> BaseEnvironment();

// Starts `command` as rank `child.rank` in a process group of its own, with /dev/null (or a
// pipe holding command.stdin_line) as its stdin and pipes to the launcher as its stdout and
// stderr, whose lines get the prefix "[rank] " when `prefix` is set. Fills in `child`.
Status SpawnRank(const ExecPlan& plan, const RankCommand& command, bool prefix, Child& child);

}  // namespace chorus::cli::launch
