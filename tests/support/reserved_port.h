// Test helper: a loopback TCP port that nothing listens on and nobody else can take while the
// object lives, for a test that starts its own server there later (or never).
//
// A port found free and then closed may be taken meanwhile by another test that ctest runs
// beside this one (a listener's bind(0) or a client's connect): the test's server then fails
// with "Address already in use", or its client reaches a stranger. This one stays bound with
// SO_REUSEADDR and never listens: a connect to it is refused, a socket without SO_REUSEADDR
// cannot bind it, and the kernel hands it to no connect; yet a server that sets SO_REUSEADDR,
// as chorus's store and transport do, may bind it and listen. Forked children inherit the
// descriptor, which changes none of this.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace chorus::testing {

class ReservedPort {
 public:
  ReservedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::abort();
    }
    port_ = ntohs(addr.sin_port);
  }
  ~ReservedPort() { ::close(fd_); }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  uint16_t port() const { return port_; }
  // "tcp://127.0.0.1:<port>"
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace chorus::testing
