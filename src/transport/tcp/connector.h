// What the TCP transport's connector keeps of a connection it accepted or dialed until the
// handshake is done (Pending), and how an epoll event names a listener, a pending connection or
// a link. The transport's members that accept, dial, authenticate and adopt connections are
// connector.cpp's. Used by tcp_transport_internal.h.
//
// Thread safety: the progress thread alone touches pending connections.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/unique_fd.h"
#include "base/wait.h"
#include "net/auth.h"

namespace chorus::internal::tcp {

// An accepted or dialed connection that has not finished its handshake.
struct Pending {
  UniqueFd fd;
  int peer = -1;     // dialed: the peer; accepted: unknown until the claim is read
  int claimed = -1;  // accepted: the peer rank its claim names, once read
  bool connecting = false;
  std::unique_ptr<Handshake> handshake;
  Clock::time_point deadline;
  std::string name;
};

// What an epoll event refers to.
enum class Source : uint64_t { kListener = 1, kWake = 2 };
inline constexpr uint64_t kLinkBase = 1ull << 32;     // + peer
inline constexpr uint64_t kPendingBase = 1ull << 48;  // + pending id

}  // namespace chorus::internal::tcp
