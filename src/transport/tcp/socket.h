// Socket helpers of the TCP transport: errno text, peer addresses, socket options, the
// listening socket, and the drain before a close. Used by the link (link.cpp), the connector
// (connector.cpp) and the transport's setup and closing (tcp_transport.cpp).
//
// Thread safety: free functions without shared state.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "base/errno_text.h"  // Errno, for the TCP sources
#include "base/unique_fd.h"
#include "chorus/status.h"

namespace chorus::internal::tcp {

struct Address {
  sockaddr_in addr{};
  std::string text;  // "10.0.0.2:4242"
};

// Parses a published "ip:port"; an IPv4 address only.
Result<Address> ParseAddress(const std::string& text);

// "10.0.0.2:4242" of the socket's peer, or "?".
std::string PeerName(int fd);

// TCP_NODELAY and larger socket buffers, on every link.
void TuneSocket(int fd);

// `v` as 16 hex digits: the communicator id in claims and in the store.
std::string Hex64(uint64_t v);

// A listening socket on IPv4 `address`, any port; *published is "address:port".
Result<UniqueFd> Listen(const std::string& address, std::string* published);

// A socket closed with unread input resets its connection, and a reset throws away what the
// peer has not yet been sent: its kFail, say. So each link says it is done writing, drops what
// still comes in, and is closed only when the peer has acknowledged every byte written to it.

// Drops what `fd` has to read; true when the peer has closed it (or it broke).
bool DrainedToTheEnd(int fd);

// Drops what `fd` has to read. True once the peer has closed it or has acknowledged every byte
// written to it: then closing it resets nothing the peer still needs.
bool DrainedAndAcknowledged(int fd);

}  // namespace chorus::internal::tcp
