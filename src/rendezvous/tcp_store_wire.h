// Socket pieces the TCP store's client and server share (tcp_store_client.cpp,
// tcp_store_server.cpp): name resolution, TCP_NODELAY, the claim a client dials with, and the
// client's blocking, deadline-bounded I/O that sends one request frame (tcp_protocol.h) and
// reads its reply.
//
// Thread safety: free functions without shared state; a socket is used by one thread at a time.
#pragma once

#include <netdb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"

namespace chorus::internal::tcp_store {

struct AddrInfoFree {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoFree>;

// Resolves host:port for a stream socket; on failure returns null and sets *error.
AddrInfoList Resolve(const std::string& host, uint16_t port, bool passive, std::string* error);

// Sets TCP_NODELAY on `fd`.
void SetNoDelay(int fd);

// The claim a client dials the handshake with (net/auth.h); the server accepts no other.
inline constexpr std::string_view kStoreClaim = "store";

enum class Io { kOk, kTimedOut, kLost };

// Waits until `fd` is ready for `events` or the deadline passes.
Io WaitReady(int fd, short events, StoreDeadline deadline, std::string* error);

// Sends all of `data`, or fails with the reason in *error (kLost) or at `deadline` (kTimedOut).
Io SendAll(int fd, std::string_view data, StoreDeadline deadline, std::string* error);

// Reads exactly `size` bytes into `buf`; a closed connection is kLost.
Io RecvExact(int fd, char* buf, size_t size, StoreDeadline deadline, std::string* error);

struct Exchange {
  Io io = Io::kOk;
  std::string error;  // when io == kLost
  ReplyStatus status = ReplyStatus::kOk;
  std::string payload;
};

// Sends one request frame and reads its reply.
Exchange RoundTrip(int fd, const std::string& frame, StoreDeadline deadline);

}  // namespace chorus::internal::tcp_store
