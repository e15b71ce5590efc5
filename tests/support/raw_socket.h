// Raw TCP clients for tests that play a stranger or a misbehaving peer: connect, send bytes
// that are not what the protocol wants, and see whether (and what) the other side answers
// before it closes the connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "base/unique_fd.h"

namespace chorus::testing {

// A blocking socket connected to `ip`:`port` (IPv4 literal); empty if the connect failed.
inline internal::UniqueFd RawConnect(const std::string& ip, uint16_t port) {
  internal::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) return {};
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  return fd;
}

inline internal::UniqueFd RawConnect(uint16_t port) { return RawConnect("127.0.0.1", port); }

inline bool SendRaw(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads until the other side closes the connection; false if it is still open after `limit`.
// `got` receives everything read.
inline bool ClosedByPeer(int fd, std::chrono::milliseconds limit, std::string* got = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // EOF or reset
    if (got != nullptr) got->append(buf, static_cast<size_t>(n));
  }
  return false;
}

}  // namespace chorus::testing
