// The TCP store's shared socket pieces (see tcp_store_wire.h).
#include "rendezvous/tcp_store_wire.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace chorus::internal::tcp_store {
namespace {

namespace proto = internal::tcp_store;

}  // namespace

AddrInfoList Resolve(const std::string& host, uint16_t port, bool passive, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) {
    *error = rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc);
    return nullptr;
  }
  return AddrInfoList(list);
}

void SetNoDelay(int fd) {
  // Requests and replies are small and strictly alternate: Nagle would only add latency.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Io WaitReady(int fd, short events, StoreDeadline deadline, std::string* error) {
  while (true) {
    // With no time left, still look once: what is already there is not late.
    const int64_t left = internal::MillisecondsLeft(deadline);
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (rc < 0 && errno != EINTR) {
      *error = "poll: " + ErrnoText(errno);
      return Io::kLost;
    }
    // Errors and hang-ups count as ready: the next send or recv reports them precisely.
    if (rc > 0) return Io::kOk;
    if (left == 0) return Io::kTimedOut;
  }
}

Io SendAll(int fd, std::string_view data, StoreDeadline deadline, std::string* error) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Io io = WaitReady(fd, POLLOUT, deadline, error); io != Io::kOk) return io;
    } else if (errno != EINTR) {
      *error = ErrnoText(errno);
      return Io::kLost;
    }
  }
  return Io::kOk;
}

Io RecvExact(int fd, char* buf, size_t size, StoreDeadline deadline, std::string* error) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, buf + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      *error = "the server closed the connection";
      return Io::kLost;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Io io = WaitReady(fd, POLLIN, deadline, error); io != Io::kOk) return io;
    } else if (errno != EINTR) {
      *error = ErrnoText(errno);
      return Io::kLost;
    }
  }
  return Io::kOk;
}

Exchange RoundTrip(int fd, const std::string& frame, StoreDeadline deadline) {
  Exchange x;
  x.io = SendAll(fd, frame, deadline, &x.error);
  if (x.io != Io::kOk) return x;
  char header[proto::kLengthBytes];
  x.io = RecvExact(fd, header, sizeof(header), deadline, &x.error);
  if (x.io != Io::kOk) return x;
  const uint32_t len = proto::LoadU32(header);
  if (len == 0 || len > proto::kMaxFrameBytes) {
    x.io = Io::kLost;
    x.error = "garbled reply (length " + std::to_string(len) + ")";
    return x;
  }
  std::string body(len, '\0');
  x.io = RecvExact(fd, body.data(), len, deadline, &x.error);
  if (x.io != Io::kOk) return x;
  x.status = static_cast<ReplyStatus>(body[0]);
  x.payload = body.substr(1);
  return x;
}

}  // namespace chorus::internal::tcp_store
