// StoreServer's connections: listening, the event loop, reading and writing, the hello and the
// handshake, and closing (see tcp_store_server.h). Requests are tcp_store_requests.cpp's.
#include "rendezvous/tcp_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <system_error>

#include "rendezvous/tcp_store_wire.h"

namespace chorus::internal::tcp_store {
namespace {

namespace proto = internal::tcp_store;

// "127.0.0.1:40312", "[::1]:40312": how the server's log names a client.
std::string PeerName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "unknown peer";
}

// A claim is the peer's text: printable ASCII survives, the rest is shown as '?'.
std::string Printable(std::string_view text) {
  std::string out(text.substr(0, 64));
  for (char& ch : out) {
    if (ch < 0x20 || ch > 0x7e) ch = '?';
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> StoreServer::Start(const Options& options) {
  const std::string where = "store server " + internal::TcpUrl(options.host, options.port);
  if (options.host.empty()) {
    return InvalidArgument(where + ": empty host (use 0.0.0.0 or :: for every interface)");
  }
  if (options.secret.empty()) {
    return InvalidArgument(where +
                           ": options.secret is empty: set it to the job's secret (CHORUS_SECRET),"
                           " which every client must prove it knows");
  }
  if (options.handshake_timeout.count() <= 0) {
    return InvalidArgument(where + ": options.handshake_timeout must be positive, not " +
                           std::to_string(options.handshake_timeout.count()) + " ms");
  }
  auto secret = internal::Secret::FromText(options.secret, "TcpStoreServer::Options::secret");
  if (!secret.ok()) return InvalidArgument(where + ": " + secret.status().message());
  std::string error;
  AddrInfoList addrs = Resolve(options.host, options.port, /*passive=*/true, &error);
  if (!addrs)
    return InvalidArgument(where + ": cannot resolve host " + options.host + ": " + error);
  UniqueFd listener;
  for (const addrinfo* ai = addrs.get(); ai != nullptr && !listener; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      error = "socket: " + ErrnoText(errno);
      continue;
    }
    // A restarted server must not wait out TIME_WAIT connections of its predecessor.
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      error = "bind: " + ErrnoText(errno);
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      error = "listen: " + ErrnoText(errno);
      continue;
    }
    listener = std::move(fd);
  }
  if (!listener) return Unavailable(where + ": " + error);

  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return Unavailable(where + ": getsockname: " + ErrnoText(errno));
  }
  const uint16_t port = bound.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                            : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  auto server = std::make_unique<StoreServer>(options.host, port, std::move(listener),
                                              std::move(secret).value(), options.handshake_timeout);
  if (Status s = server->Init(); !s.ok()) return Unavailable(where + ": " + s.message());
  return std::unique_ptr<TcpStoreServer>(std::move(server));
}

Status StoreServer::Init() {
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return Unavailable("epoll_create1: " + ErrnoText(errno));
  wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) return Unavailable("eventfd: " + ErrnoText(errno));
  for (const auto& [fd, id] : {std::pair<int, uint64_t>{listen_.get(), kListenId},
                               std::pair<int, uint64_t>{wake_.get(), kWakeId}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Unavailable("epoll_ctl: " + ErrnoText(errno));
    }
  }
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return Unavailable(std::string("cannot start the server thread: ") + e.what());
  }
  return Status::Ok();
}

void StoreServer::Run() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  while (!stop_.load(std::memory_order_acquire)) {
    const int n = epoll_wait(epoll_.get(), events, kMaxEvents, WaitTimeoutMs());
    if (n < 0 && errno != EINTR) return;  // only a bug can get here; the destructor still joins
    if (accept_paused_until_ && StoreClock::now() >= *accept_paused_until_) {
      accept_paused_until_.reset();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev);
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = ::read(wake_.get(), &count, sizeof(count));
        continue;
      }
      if (id == kListenId) {
        Accept();
        continue;
      }
      auto it = conns_.find(id);
      if (it == conns_.end() || it->second->dead) continue;
      OnEvent(*it->second, events[i].events);
      DrainRunnable();
    }
    ExpireHandshakes();
    log_.Flush(internal::Clock::now());
    Reap();
  }
}

// Until the earliest of: the end of an accept pause, the first handshake deadline.
int StoreServer::WaitTimeoutMs() const {
  std::optional<StoreClock::time_point> wake = accept_paused_until_;
  if (!handshakes_.empty() && (!wake || handshakes_.front().first < *wake)) {
    wake = handshakes_.front().first;
  }
  if (const auto flush = log_.NextFlush(); flush && (!wake || *flush < *wake)) wake = *flush;
  if (!wake) return -1;
  return static_cast<int>(
      std::clamp<int64_t>(internal::MillisecondsLeft(*wake), 1, std::numeric_limits<int>::max()));
}

void StoreServer::ExpireHandshakes() {
  const auto now = StoreClock::now();
  while (!handshakes_.empty()) {
    const auto [deadline, id] = handshakes_.front();
    auto it = conns_.find(id);
    const bool pending =
        it != conns_.end() && !it->second->dead && it->second->stage != Stage::kRequests;
    if (pending && deadline > now) return;
    handshakes_.pop_front();
    if (pending) {
      Drop(*it->second,
           "did not finish the handshake within " + internal::FormatWaited(handshake_timeout_));
    }
  }
}

void StoreServer::Accept() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    UniqueFd fd(accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &addr_len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays queued and would wake a level-triggered loop forever:
        // stop listening for a moment and let existing clients finish.
        rlimit limit{};
        getrlimit(RLIMIT_NOFILE, &limit);
        log_.Note("this process:0",
                  "out of file descriptors (accept: " + ErrnoText(errno) + ", " +
                      std::to_string(conns_.size()) + " connections, limit " +
                      std::to_string(limit.rlim_cur) + "); accepting paused",
                  "connection");
        epoll_event ev{};
        ev.data.u64 = kListenId;
        epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listen_.get(), &ev);
        accept_paused_until_ = StoreClock::now() + kAcceptPause;
      }
      return;
    }
    SetNoDelay(fd.get());
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd = std::move(fd);
    c->peer = PeerName(addr);
    c->handshake_deadline = internal::DeadlineAfter(handshake_timeout_);
    c->last_heard = StoreClock::now();
    c->interest = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->interest;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->fd.get(), &ev) != 0) continue;
    handshakes_.emplace_back(c->handshake_deadline, c->id);
    conns_.emplace(c->id, std::move(c));
    if (Strangers() > kMaxStrangers) PushOutStranger();
  }
}

size_t StoreServer::Strangers() const { return conns_.size() - clients_ - doomed_.size(); }

void StoreServer::PushOutStranger() {
  // Bounded: each pass either drops one or finds one that is busy and moves on.
  for (size_t tries = 0; tries < 8; ++tries) {
    Connection* quietest = nullptr;
    for (auto& [id, c] : conns_) {
      if (c->dead || c->stage == Stage::kRequests) continue;
      if (quietest == nullptr || c->last_heard < quietest->last_heard) quietest = c.get();
    }
    if (quietest == nullptr) return;
    const StoreClock::time_point before = quietest->last_heard;
    ReadFrom(*quietest);  // what it sent but we did not read yet
    Process(*quietest);
    if (quietest->dead || quietest->stage == Stage::kRequests) return;
    if (quietest->last_heard == before) {
      return Drop(*quietest, "pushed out by newer connections while it sent nothing");
    }
  }
}

void StoreServer::OnEvent(Connection& c, uint32_t events) {
  if (events & (EPOLLHUP | EPOLLERR)) {
    if (c.stage == Stage::kAuth) return Drop(c, "connection lost during the handshake");
    return Kill(c);
  }
  if (events & EPOLLOUT) Flush(c);
  if (events & (EPOLLIN | EPOLLRDHUP)) ReadFrom(c);
  Process(c);
  // Requests the peer sent before closing have been served; clients never half-close. A client
  // that gives up during the handshake has usually found that the secrets differ.
  if ((events & EPOLLRDHUP) || c.peer_closed) {
    if (c.stage == Stage::kAuth) {
      return Drop(c, "closed the connection during the handshake (wrong secret?)");
    }
    Kill(c);
  }
}

bool StoreServer::WantsInput(const Connection& c) const {
  if (c.dead || c.close_after_flush || c.peer_closed) return false;
  const bool blocked = c.parked.has_value() || c.out_pos < c.out.size();
  return !blocked || c.in.size() - c.in_pos < kReadAhead;
}

void StoreServer::ReadFrom(Connection& c) {
  size_t total = 0;
  while (total < kReadPerEvent && WantsInput(c)) {
    // Into the server's buffer, then only what came into the connection's: an idle or slow
    // connection costs bytes, not a chunk.
    const ssize_t n = ::recv(c.fd.get(), read_buffer_.get(), kReadChunk, MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(read_buffer_.get(), static_cast<size_t>(n));
      c.last_heard = StoreClock::now();
      total += static_cast<size_t>(n);
    } else if (n == 0) {
      c.peer_closed = true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      return Kill(c);
    }
  }
}

// Runs the connection's buffered requests until one parks, its reply cannot be sent at once,
// or the input runs out.
void StoreServer::Process(Connection& c) {
  while (!c.dead && !c.parked && !c.close_after_flush && c.out_pos == c.out.size()) {
    if (c.stage == Stage::kHello) {
      if (!HandleHello(c)) break;
      continue;
    }
    if (c.stage == Stage::kAuth) {
      if (!HandleAuth(c)) break;
      continue;
    }
    const size_t avail = c.in.size() - c.in_pos;
    if (avail < proto::kLengthBytes) break;
    const uint32_t len = proto::LoadU32(c.in.data() + c.in_pos);
    if (len == 0 || len > proto::kMaxFrameBytes) {
      return Drop(c, "frame length " + std::to_string(len) + " outside 1.." +
                         std::to_string(proto::kMaxFrameBytes));
    }
    if (avail < proto::kLengthBytes + len) {
      c.in.reserve(c.in_pos + proto::kLengthBytes + len);
      break;
    }
    const std::string_view body(c.in.data() + c.in_pos + proto::kLengthBytes, len);
    c.in_pos += proto::kLengthBytes + len;
    if (!HandleRequest(c, body)) {
      return Drop(c, "malformed request (op " +
                         std::to_string(static_cast<unsigned char>(body[0])) + ", " +
                         std::to_string(body.size()) + " bytes)");
    }
  }
  if (c.dead) return;
  // Drop consumed input; give back the memory of a large request once it is done.
  if (c.in_pos == c.in.size()) {
    if (c.in.capacity() > kKeepCapacity) std::string().swap(c.in);
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > c.in.size() / 2) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
  UpdateInterest(c);
}

// Stage 1. The magic is compared as soon as its first byte arrives; a stranger is closed
// before anything it sent is read as a length. Returns true when the stage is complete.
bool StoreServer::HandleHello(Connection& c) {
  static_assert(proto::kHelloBytes == 8);
  const std::string expected = proto::Hello(proto::kMagic, proto::kVersion, 0);
  const size_t avail = c.in.size() - c.in_pos;
  const char* p = c.in.data() + c.in_pos;
  if (std::memcmp(p, expected.data(), std::min<size_t>(avail, 4)) != 0) {
    Drop(c, "not a chorus store client (wrong magic in its hello)");
    return false;
  }
  if (avail < proto::kHelloBytes) return false;
  const uint16_t version = proto::LoadU16(p + 4);
  c.in_pos += proto::kHelloBytes;
  if (version != proto::kVersion) {
    std::fprintf(stderr,
                 "chorus store: closing %s: it speaks store protocol version %u, this "
                 "server version %u\n",
                 c.peer.c_str(), static_cast<unsigned>(version),
                 static_cast<unsigned>(proto::kVersion));
    c.out += proto::Hello(proto::kMagic, proto::kVersion,
                          static_cast<uint16_t>(proto::HelloStatus::kBadVersion));
    c.close_after_flush = true;
    Flush(c);
    return false;
  }
  c.out += proto::Hello(proto::kMagic, proto::kVersion,
                        static_cast<uint16_t>(proto::HelloStatus::kAccepted));
  c.stage = Stage::kAuth;
  c.auth.emplace(secret_, Handshake::Role::kAcceptor);
  Flush(c);
  return true;
}

// Stage 2. Feeds the handshake what it wants of the input and queues what it says. Returns true
// when the client has proved itself and claimed the store: requests may follow.
bool StoreServer::HandleAuth(Connection& c) {
  Handshake& h = *c.auth;
  while (h.wanted() > 0 && c.in_pos < c.in.size()) {
    const size_t n = std::min(h.wanted(), c.in.size() - c.in_pos);
    const Status s = h.Feed(c.in.data() + c.in_pos, n);
    c.in_pos += n;
    if (!s.ok()) {
      Drop(c, s.message());
      return false;
    }
  }
  // The claim is known once the first message is in, which is when the challenge appears: a
  // dialer that wants something else (a rank that dialed the store's port) is dropped before
  // it is challenged.
  if (const std::string_view out = h.output(); !out.empty()) {
    if (h.claim() != kStoreClaim) {
      Drop(c, "claims \"" + Printable(h.claim()) + "\", not \"store\"");
      return false;
    }
    c.out.append(out);
    h.Sent(out.size());
  }
  if (!h.done()) {
    Flush(c);
    return false;
  }
  c.auth.reset();
  if (clients_ >= kMaxClients) {
    Drop(c, "too many clients (" + std::to_string(clients_) + " connected, the limit is " +
                std::to_string(kMaxClients) + ")");
    return false;
  }
  c.stage = Stage::kRequests;
  ++clients_;
  Flush(c);
  return true;
}

void StoreServer::Flush(Connection& c) {
  while (!c.dead && c.out_pos < c.out.size()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      c.out_pos += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;  // EPOLLOUT resumes; UpdateInterest asks for it
    } else if (errno != EINTR) {
      return Kill(c);
    }
  }
  if (c.dead) return;
  if (c.out.capacity() > kKeepCapacity) std::string().swap(c.out);
  c.out.clear();
  c.out_pos = 0;
  if (c.close_after_flush) Kill(c);
}

void StoreServer::UpdateInterest(Connection& c) {
  if (c.dead) return;
  uint32_t want = EPOLLRDHUP;
  if (WantsInput(c)) want |= EPOLLIN;
  if (c.out_pos < c.out.size()) want |= EPOLLOUT;
  if (want == c.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) return Kill(c);
  c.interest = want;
}

void StoreServer::Drop(Connection& c, std::string_view reason) {
  if (c.dead) return;
  log_.Note(c.peer, std::string(reason));
  Kill(c);
}

void StoreServer::Kill(Connection& c) {
  if (c.dead) return;
  c.dead = true;
  if (c.stage == Stage::kRequests) --clients_;
  doomed_.push_back(c.id);
}

void StoreServer::Reap() {
  for (const uint64_t id : doomed_) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    const Connection& c = *it->second;
    if (c.parked) {
      if (auto w = waiters_.find(c.parked->waiting_on); w != waiters_.end()) {
        std::erase(w->second, id);
        if (w->second.empty()) waiters_.erase(w);
      }
    }
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    conns_.erase(it);  // closes the socket
  }
  doomed_.clear();
}

}  // namespace chorus::internal::tcp_store

namespace chorus {

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const Options& options) {
  return internal::tcp_store::StoreServer::Start(options);
}

}  // namespace chorus
