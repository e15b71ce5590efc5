// The TCP transport's socket helpers (see socket.h).
#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/errno_text.h"

namespace chorus::internal::tcp {

Result<Address> ParseAddress(const std::string& text) {
  const size_t colon = text.rfind(':');
  Address a;
  a.text = text;
  a.addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      inet_pton(AF_INET, text.substr(0, colon).c_str(), &a.addr.sin_addr) != 1) {
    return InvalidArgument("tcp: bad peer address \"" + text + "\"");
  }
  const int port = std::atoi(text.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return InvalidArgument("tcp: bad port in \"" + text + "\"");
  a.addr.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

std::string PeerName(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

void TuneSocket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Bigger buffers than the default let a whole segment be in flight on fast links; the kernel
  // caps them at net.core.{w,r}mem_max.
  const int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

std::string Hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

Result<UniqueFd> Listen(const std::string& address, std::string* published) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Unavailable("tcp: " + Errno("socket"));
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    return InvalidArgument("tcp: cannot listen on \"" + address + "\": not an IPv4 address");
  }
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return Unavailable("tcp: cannot listen on " + address + ": " + Errno("bind"));
  }
  if (listen(fd.get(), 1024) != 0) return Unavailable("tcp: " + Errno("listen"));
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *published = address + ":" + std::to_string(ntohs(a.sin_port));
  return fd;
}

bool DrainedToTheEnd(int fd) {
  char scratch[4096];
  ssize_t n;
  do {
    n = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
  } while (n > 0);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

bool DrainedAndAcknowledged(int fd) {
  int unacknowledged = 0;
  return DrainedToTheEnd(fd) || (ioctl(fd, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0);
}

}  // namespace chorus::internal::tcp
