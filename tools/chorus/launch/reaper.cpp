// reaper.cpp: the process that stops a dead launcher's ranks (reaper.h).
#include "launch/reaper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace chorus::cli::launch {

Result<Reaper> Reaper::Start(int ranks) {
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

void Reaper::Watch(pid_t group) const {
  const int32_t message = group;
  [[maybe_unused]] ssize_t n = ::write(to_reaper_.get(), &message, sizeof(message));
}

void Reaper::Done() {
  if (!to_reaper_) return;
  const int32_t done = 0;
  [[maybe_unused]] ssize_t n = ::write(to_reaper_.get(), &done, sizeof(done));
  to_reaper_ = UniqueFd();
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void Reaper::Run(int from_launcher, pid_t* groups, size_t capacity) {
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

}  // namespace chorus::cli::launch
