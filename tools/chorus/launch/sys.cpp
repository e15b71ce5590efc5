// sys.cpp: the small OS helpers of `chorus launch` (sys.h).
#include "launch/sys.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstring>

namespace chorus::cli::launch {

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

void EnsureStandardFdsOpen() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

}  // namespace chorus::cli::launch
