// supervisor.h: runs a started `chorus launch` job to its end. RunLaunch (launch.cpp) calls
// Supervise once every rank is spawned (spawn.h): it copies the ranks' output, forwards the
// signals the launcher receives, stops the job at the first failure, the timeout or a signal,
// and decides the launcher's exit status (launch.cpp's header comment says how).
//
// Thread safety: call from the launcher's one supervising thread, with SIGCHLD and the forwarded
// signals blocked and taken from `signal_fd`.
#pragma once

#include <vector>

#include "launch/plan.h"
#include "launch/spawn.h"

namespace chorus::cli::launch {

// Supervises `children` until every one has exited (and been reaped) and their output is
// copied; `signal_fd` is a signalfd for SIGCHLD and the forwarded signals. Returns the
// launcher's exit status.
int Supervise(const LaunchFlags& flags, std::vector<Child>& children, int signal_fd);

}  // namespace chorus::cli::launch
