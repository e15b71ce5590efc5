// Test helper: a TCP store served by a child process, for tests that fork ranks.
//
// A process that forks while one of its threads holds a lock leaves the child with that lock
// held forever. A store served on a thread of the test process does just that when the test
// then forks ranks: under ASan a child that inherits the allocator's lock mid-malloc hangs in
// its first allocation, past every deadline (seen as ranks "timed out" under load). So a test
// that forks serves its store from a process of its own, forked before any thread exists.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "chorus/store.h"

namespace chorus::testing {

class StoreProcess {
 public:
  // Forks the server. Call it while the test process has no thread besides the main one.
  explicit StoreProcess(const TcpStoreServer::Options& options) {
    int port_pipe[2];
    int lifeline[2];
    if (pipe(port_pipe) != 0 || pipe(lifeline) != 0) std::abort();
    pid_ = fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      close(port_pipe[0]);
      close(lifeline[1]);
      auto server = TcpStoreServer::Start(options);
      const std::string url = server.ok() ? (*server)->url() : "";
      if (write(port_pipe[1], url.data(), url.size()) < 0) _exit(1);
      close(port_pipe[1]);
      // Serve until the test lets go of the lifeline (or dies): EOF on the pipe.
      char byte;
      while (read(lifeline[0], &byte, 1) > 0) {
      }
      _exit(0);
    }
    close(port_pipe[1]);
    close(lifeline[0]);
    lifeline_ = lifeline[1];
    char text[256];
    ssize_t got;
    while ((got = read(port_pipe[0], text, sizeof(text))) > 0) {
      url_.append(text, static_cast<size_t>(got));
    }
    close(port_pipe[0]);
    if (const size_t colon = url_.rfind(':'); colon != std::string::npos) {
      port_ = static_cast<uint16_t>(std::atoi(url_.c_str() + colon + 1));
    }
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  ~StoreProcess() {
    close(lifeline_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  bool ok() const { return port_ != 0; }  // false: the server did not start
  uint16_t port() const { return port_; }
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = -1;
  int lifeline_ = -1;
  std::string url_;
  uint16_t port_ = 0;
};

}  // namespace chorus::testing
