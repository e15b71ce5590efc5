// Busy processes beside a benchmark (see busy.h).
#include "busy.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace chorus::cli {
namespace {

[[noreturn]] void Spin(pid_t parent) {
  // Dies with the forking thread; if that thread is already gone, there is nobody to serve.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(0);
  volatile unsigned long counter = 0;
  for (;;) counter = counter + 1;
}

}  // namespace

Result<std::unique_ptr<BusyLoops>> BusyLoops::Start(int count) {
  std::unique_ptr<BusyLoops> loops(new BusyLoops());
  const pid_t self = ::getpid();
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) Spin(self);
    if (pid < 0) {
      const int err = errno;
      return Unavailable("--busy: fork of busy process " + std::to_string(i + 1) + " of " +
                         std::to_string(count) + " failed: " + std::strerror(err));
    }
    loops->pids_.push_back(pid);  // the destructor reaps those started so far
  }
  return loops;
}

BusyLoops::~BusyLoops() {
  for (pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (pid_t pid : pids_) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace chorus::cli
