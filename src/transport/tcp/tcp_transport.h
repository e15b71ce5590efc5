// TCP transport: ranks on any hosts, over authenticated TCP connections.
//
// Each rank listens on one socket and publishes its address through the store. Connections are
// made when the transport starts in groups of up to 16 ranks (so that a census can ask every
// peer), else the first time an algorithm touches a peer: the lower rank dials, both sides
// prove the job's secret (net/auth.h), and only then are the link's staging slots
// allocated and touched (base/pages.h: on huge pages where the kernel gives them, so the
// 2 x depth x slot_bytes of a link cost a few first touches, not one per 4 KiB). A link is one
// socket carrying frames both ways (frame.h): data frames hold one segment, control frames carry
// the group's failure and a rank's refusal of a call.
//
// Per link and direction there are `depth` slots of slot_bytes, which is the credit window:
//
//   rank thread  TryReserve -> fill slot -> Post ──▶ written to the socket (by the rank thread
//                at once when the socket takes it, else by the progress thread) -> credit back
//   progress     socket ──▶ header checked ──▶ payload read into a free receive slot ──▶
//   thread       doorbell rung -> rank thread TryPeek / Release -> slot free again
//
// One progress thread per rank runs an epoll loop over the listening socket, the links, the
// handshakes in progress and an eventfd the rank thread uses to call it. It sleeps in
// epoll_wait, so it never burns a core a rank needs. Sends and receives of a link proceed
// together, so a ring step streams both ways at once; TCP's own flow control backs up a
// sender whose receiver has no free slot.
//
// Failure: a rank that fails the group sends a kFail frame on every link; a rank that receives
// one records it and forwards it, so the failure floods every connected rank. A connection
// that closes (the peer exited or was killed: the kernel closes its sockets) makes the peer
// dead for waits that need it, which then fail with kUnavailable naming it, but only once what
// it sent before has been read: a send to it that fails drops what is queued for it (as the
// kernel would) and leaves its last messages readable.
//
// Strangers: a connection that does not complete the handshake with a valid claim (this
// communicator, this rank, a lower peer rank not yet connected) within the handshake timeout
// is closed and logged to stderr; the job does not notice. A frame that fails validation on
// an authenticated link is a protocol error that fails the group.
//
// Thread safety: as Transport; plus the progress thread, which shares only atomics and the
// per-link send lock with the rank thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "chorus/store.h"
#include "net/auth.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace chorus::internal {

struct TcpConfig {
  ConnectConfig connect;
  std::string listen_address;  // IPv4 address to listen on
  Secret secret;
  int ranks_on_host = 1;
  // How long a connecting stranger may take over its handshake before it is dropped.
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  // The doorbell to ring on arrivals instead of the transport's own: a hybrid transport's
  // (transport/hybrid.h), so that one wait covers both of its transports.
  Doorbell* bell = nullptr;
  // The beacon this rank's waits refresh, when not the transport's own (the hybrid's shm one).
  Beacon* beacon = nullptr;
  // How frames are protected after the handshake (CommOptions::wire; the same on every rank).
  tcp::WireCipher cipher = tcp::WireCipher::kNone;
};

// Listens, publishes this rank's address through `store`, learns the others' and starts the
// progress thread, which dials this rank's higher peers at once in groups of up to
// kTcpDialAllUpTo ranks.
Result<std::unique_ptr<Transport>> ConnectTcp(Store& store, const TcpConfig& config);

inline constexpr int kTcpDialAllUpTo = 16;
// For tests of links made mid-job: groups of more than `ranks` ranks, made after this call in
// this process, dial as calls need them (the default is kTcpDialAllUpTo).
void SetTcpDialAllUpToForTesting(int ranks);

}  // namespace chorus::internal
