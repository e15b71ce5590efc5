// reaper.h: the process that stops a dead launcher's ranks. Started by RunLaunch (launch.cpp)
// before the first rank.
//
// Thread safety: one owner, the launcher's supervising thread; Start forks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <utility>

#include "chorus/status.h"
#include "launch/sys.h"

namespace chorus::cli::launch {

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
  static Result<Reaper> Start(int ranks);

  // After a rank's fork: the reaper will stop group `group` should the launcher die.
  void Watch(pid_t group) const;

  // At the launcher's normal end (its supervisor has dealt with the ranks): the reaper leaves.
  void Done();

 private:
  Reaper(pid_t pid, UniqueFd to_reaper) : pid_(pid), to_reaper_(std::move(to_reaper)) {}

  // The reaper's side of fork(); never returns.
  [[noreturn]] static void Run(int from_launcher, pid_t* groups, size_t capacity);

  pid_t pid_;
  UniqueFd to_reaper_;
};

}  // namespace chorus::cli::launch
