// Test helpers: run one function per rank, on threads of this process or in forked processes.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

// Calls fn(comm) for every communicator on its own thread and joins them all.
inline void RunRanks(std::vector<Communicator>& comms,
                     const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (Communicator& comm : comms) threads.emplace_back([&fn, &comm] { fn(comm); });
  for (std::thread& t : threads) t.join();
}

struct RankExit {
  pid_t pid = 0;
  int status = -1;     // as from waitpid
  std::string report;  // what fn returned (or "timed out")
  bool ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// Forks `n` processes; child r runs fn(r) and exits 0 when it returns "", 1 otherwise, with the
// text sent back to the parent. Children still running after `limit` are killed. Call it
// before the test starts any thread.
inline std::vector<RankExit> ForkRanks(int n, const std::function<std::string(int)>& fn,
                                       std::chrono::seconds limit = std::chrono::seconds(300)) {
  std::vector<pid_t> pids(static_cast<size_t>(n));
  std::vector<int> pipes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::string report = fn(r);
      size_t done = 0;
      while (done < report.size()) {
        const ssize_t w = write(fds[1], report.data() + done, report.size() - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      _exit(report.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids[static_cast<size_t>(r)] = pid;
    pipes[static_cast<size_t>(r)] = fds[0];
  }
  std::vector<RankExit> exits(static_cast<size_t>(n));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int open = n;
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (int fd : pipes) fds.push_back({fd, fd >= 0 ? short{POLLIN} : short{0}, 0});
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t r = 0; r < fds.size(); ++r) {
      if (pipes[r] < 0 || fds[r].revents == 0) continue;
      char buffer[4096];
      const ssize_t got = read(pipes[r], buffer, sizeof(buffer));
      if (got > 0) {
        exits[r].report.append(buffer, static_cast<size_t>(got));
      } else {
        close(pipes[r]);
        pipes[r] = -1;
        --open;
      }
    }
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pipes[r] >= 0) {
      kill(pids[r], SIGKILL);
      close(pipes[r]);
      exits[r].report += " (timed out)";
    }
    exits[r].pid = pids[r];
    waitpid(pids[r], &exits[r].status, 0);
  }
  return exits;
}

}  // namespace chorus::testing
