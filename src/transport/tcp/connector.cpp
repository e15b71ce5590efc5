// The TCP transport's connector (see connector.h): accepting strangers and keeping them from
// crowding out peers, dialing, the handshakes, and adopting an authenticated connection as a
// peer's link.
#include "transport/tcp/connector.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/errno_text.h"
#include "base/pages.h"
#include "transport/tcp/tcp_transport_internal.h"

namespace chorus::internal::tcp {
namespace {

constexpr char kClaimPrefix[] = "chorus-tcp/1";
// Accepted connections that have not yet said who they are (the claim in the handshake's first
// message) share this many places; when a new one comes, the oldest is dropped. A peer says who
// it is in its first write, so a flood of idle or slow strangers never holds a peer's place:
// it only pushes out older strangers.
constexpr size_t kMaxStrangers = 64;
// Connections that claim the same peer rank (a genuine dial, or a stranger replaying a claim it
// overheard) may be pending at once; beyond this the oldest of them is dropped.
constexpr size_t kMaxPerClaim = 4;
// After accept() runs out of descriptors, how long to stop listening, and how long the shortage
// may last before the rank gives up (its peers cannot reach it).
constexpr std::chrono::milliseconds kAcceptPause{100};
constexpr std::chrono::seconds kDescriptorPatience{2};

}  // namespace

bool TcpTransport::Dialing(int peer) const {
  for (const auto& [id, p] : pending_) {
    if (p.peer == peer) return true;
  }
  return false;
}

void TcpTransport::Accept() {
  while (!accept_paused_until_) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        OutOfDescriptors(Errno("accept"));
      }
      return;  // EAGAIN: nothing more queued
    }
    short_of_descriptors_since_.reset();
    Pending p;
    p.fd = UniqueFd(fd);
    p.name = PeerName(fd);
    p.handshake = std::make_unique<Handshake>(secret_, Handshake::Role::kAcceptor);
    p.deadline = Clock::now() + handshake_timeout_;
    const uint64_t id = kPendingBase + next_pending_++;
    Watch(fd, id, EPOLLIN | EPOLLRDHUP, true);
    pending_.emplace(id, std::move(p));
    if (Strangers() > kMaxStrangers) PushOutStranger();
  }
}

void TcpTransport::PushOutStranger() {
  // The oldest first, after a last look at what it sent (a peer's claim may be waiting in its
  // socket behind a burst of strangers): one that has said who it is stays.
  for (size_t tries = 0; tries < 8 && Strangers() > kMaxStrangers; ++tries) {
    uint64_t oldest = 0;
    for (const auto& [id, p] : pending_) {
      if (p.peer < 0 && p.claimed < 0) {
        oldest = id;
        break;
      }
    }
    if (oldest == 0) return;
    Advance(oldest, EPOLLIN);
    auto it = pending_.find(oldest);
    if (it != pending_.end() && it->second.claimed < 0) {
      Drop(oldest, "pushed out by newer connections before it said who it is");
    }
  }
}

size_t TcpTransport::Strangers() const {
  size_t n = 0;
  for (const auto& [id, p] : pending_) n += p.peer < 0 && p.claimed < 0 ? 1 : 0;
  return n;
}

void TcpTransport::DropOldest(bool (*which)(const Pending& p, int claimed), int claimed,
                              const char* why) {
  for (const auto& [id, p] : pending_) {
    if (which(p, claimed)) return Drop(id, why);
  }
}

bool TcpTransport::Claimed(uint64_t id, Pending& p) {
  const std::string expected_head = std::string(kClaimPrefix) + " " + Hex64(comm_id_) + " ";
  const std::string& claim = p.handshake->claim();
  int from = -1;
  int to = -1;
  if (claim.rfind(expected_head, 0) != 0 ||
      std::sscanf(claim.c_str() + expected_head.size(), "%d %d", &from, &to) != 2 || to != rank_ ||
      from < 0 || from >= rank_ || link(from).ready.load(std::memory_order_relaxed) ||
      link(from).dead.load(std::memory_order_relaxed)) {
    Drop(id, "unexpected claim \"" + claim.substr(0, 80) + "\"");
    return false;
  }
  p.claimed = from;
  size_t same = 0;
  for (const auto& [other_id, q] : pending_) same += q.claimed == from ? 1 : 0;
  if (same > kMaxPerClaim) {
    DropOldest([](const Pending& q, int c) { return q.claimed == c; }, from,
               "pushed out by newer connections claiming the same rank");
    return pending_.count(id) != 0;
  }
  return true;
}

void TcpTransport::OutOfDescriptors(const std::string& what) {
  const Clock::time_point now = Clock::now();
  if (!short_of_descriptors_since_) {
    short_of_descriptors_since_ = now;
    log_.Note("this rank:0", "out of file descriptors (" + what + "); accepting paused",
              "connection");
  }
  if (now - *short_of_descriptors_since_ >= kDescriptorPatience) {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    Fail(Unavailable("tcp: rank " + std::to_string(rank_) +
                     " ran out of file descriptors and cannot take connections from its peers (" +
                     what + "; the limit is " + std::to_string(limit.rlim_cur) +
                     ": raise it with ulimit -n)"));
  }
  // The connection stays queued and would wake the level-triggered loop forever: stop
  // listening for a moment.
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  accept_paused_until_ = now + kAcceptPause;
}

void TcpTransport::Dial(int peer) {
  Link& l = link(peer);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    // This rank's own shortage, not the peer's fault: say so, and on this rank.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      rlimit limit{};
      getrlimit(RLIMIT_NOFILE, &limit);
      const std::string why = Errno("socket");
      Fail(Unavailable("tcp: rank " + std::to_string(rank_) +
                       " ran out of file descriptors and cannot connect to rank " +
                       std::to_string(peer) + " (" + why + "; the limit is " +
                       std::to_string(limit.rlim_cur) + ": raise it with ulimit -n)"));
      KillLink(peer, "could not be dialled: this rank ran out of file descriptors (" + why + ")");
      return;
    }
    KillLink(peer, "could not be dialled (" + Errno("socket") + ")");
    return;
  }
  TuneSocket(fd);
  Pending p;
  p.fd = UniqueFd(fd);
  p.peer = peer;
  p.name = l.address.text;
  p.connecting = true;
  p.handshake =
      std::make_unique<Handshake>(secret_, Handshake::Role::kDialer,
                                  std::string(kClaimPrefix) + " " + Hex64(comm_id_) + " " +
                                      std::to_string(rank_) + " " + std::to_string(peer));
  // Generous: the peer may still be busy with an earlier call.
  p.deadline = Clock::time_point::max();
  const int r =
      connect(fd, reinterpret_cast<const sockaddr*>(&l.address.addr), sizeof(sockaddr_in));
  if (r != 0 && errno != EINPROGRESS) {
    KillLink(peer, "refused the connection (" + Errno("connect") + ")");
    return;
  }
  const uint64_t id = kPendingBase + next_pending_++;
  Watch(fd, id, EPOLLOUT | EPOLLIN | EPOLLRDHUP, true);
  pending_.emplace(id, std::move(p));
}

void TcpTransport::Drop(uint64_t id, const std::string& why) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.peer >= 0) {
    // A connection this rank dialled: the peer itself is unreachable or not who it claims.
    KillLink(p.peer, why);
  } else {
    log_.Note(p.name, why);
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.fd.get(), nullptr);
  pending_.erase(it);
}

void TcpTransport::Advance(uint64_t id, uint32_t events) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.connecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      Drop(id, std::string("refused the connection (") + ErrnoText(error) + ")");
      return;
    }
    p.connecting = false;
    Watch(p.fd.get(), id, EPOLLIN | EPOLLRDHUP, false);
  }
  Handshake& h = *p.handshake;
  for (;;) {
    std::string_view out = h.output();
    if (!out.empty()) {
      const ssize_t n = send(p.fd.get(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        Drop(id, Errno("send during the handshake"));
        return;
      }
      if (n > 0) h.Sent(static_cast<size_t>(n));
      if (n < static_cast<ssize_t>(out.size())) {
        Watch(p.fd.get(), id, EPOLLIN | EPOLLOUT | EPOLLRDHUP, false);
        return;
      }
      continue;
    }
    if (h.done()) break;
    const size_t want = h.wanted();
    if (want == 0) return;
    char buffer[512];
    const ssize_t n = recv(p.fd.get(), buffer, std::min(want, sizeof(buffer)), MSG_DONTWAIT);
    if (n == 0) {
      Drop(id, p.peer >= 0 ? "closed the connection during the handshake (it exited, or it has a "
                             "different secret)"
                           : "closed the connection during the handshake");
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      Drop(id, Errno("recv during the handshake"));
      return;
    }
    if (Status s = h.Feed(buffer, static_cast<size_t>(n)); !s.ok()) {
      Drop(id, s.message());
      return;
    }
    if (p.peer < 0 && p.claimed < 0 && h.claimed() && !Claimed(id, p)) return;
  }
  // Authenticated. An acceptor took the peer from its claim (checked when it came, and again
  // now: another connection for the same rank may have won meanwhile).
  int peer = p.peer;
  if (peer < 0) {
    peer = p.claimed;
    if (peer < 0 || link(peer).ready.load(std::memory_order_relaxed) ||
        link(peer).dead.load(std::memory_order_relaxed)) {
      Drop(id, "unexpected claim \"" + h.claim().substr(0, 80) + "\"");
      return;
    }
  }
  // The link owns the socket from now on, and the keys that protect its frames.
  if (cipher_ != tcp::WireCipher::kNone) {
    Link& l = link(peer);
    const bool dialer = p.peer >= 0;
    l.send_seal = std::make_unique<tcp::WireSeal>(cipher_, h.SessionKey(dialer));
    l.recv_seal = std::make_unique<tcp::WireSeal>(cipher_, h.SessionKey(!dialer));
  }
  const int fd = p.fd.Release();
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  pending_.erase(it);
  Adopt(fd, peer);
}

void TcpTransport::Adopt(int fd, int peer) {
  Link& l = link(peer);
  TuneSocket(fd);
  const size_t bytes = slot_bytes_ * static_cast<size_t>(depth_);
  l.send_slots = TouchedPages(bytes);  // first touches now, not mid-call
  l.recv_slots = TouchedPages(bytes);
  {
    std::lock_guard<std::mutex> lock(l.send_mu);
    l.fd = fd;
  }
  Interest(peer, false);
  // A failure recorded before this link was up went only to the links up then: tell this
  // peer too, or it would see only the hang-up when this rank exits. The store of `ready` and
  // Fail's load of it, Fail's store of the failure and this load of it are all seq_cst, so at
  // least one of the two sends it (a second kFail is ignored).
  l.ready.store(true, std::memory_order_seq_cst);
  if (control_.failed()) QueueControl(peer, FrameType::kFail, 0, FailPayload(control_.failure()));
  doorbell().Ring();
  Read(peer);  // the peer may have sent frames right behind its handshake
}

}  // namespace chorus::internal::tcp
