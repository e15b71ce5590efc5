// TcpStore (client) and TcpStoreServer: the store behind "tcp://host:port". Wire format in
// tcp_protocol.h.
//
// Server. One background thread runs a level-triggered epoll loop over non-blocking sockets:
// the listening socket, an eventfd that the destructor uses to wake the loop, and one entry per
// client. Each connection goes through stages (hello, the handshake of net/auth.h, then
// requests) and keeps an input and an output buffer. A request that must wait for keys (Get,
// Wait) is parked: the connection registers under the first key it still misses, and the Set or
// Add of that key re-examines it, answering or re-registering under the next missing key. So
// nobody polls, and a Set costs nothing for waiters of other keys. While a request is parked, or
// while a reply has not been fully written, the connection processes no further requests and
// reads at most 64 KiB ahead, which bounds the memory any one client can pin. Every length is
// checked against its limit before anything is allocated for it, and a connection that breaks
// the protocol is closed without disturbing the others. Connections are closed only between
// batches of events, so a handler never holds a dangling reference.
//
// Authentication. The handshake is the same incremental state machine the blocking client runs,
// fed from the input buffer, so a client reaches the request parser only after proving that it
// knows the secret. Hello and handshake together must finish within handshake_timeout. The
// connections still in them are queued in accept order, which with one timeout for all is
// deadline order, so epoll_wait sleeps at most until the first deadline and expiry looks only at
// the front. Every connection dropped for breaking the protocol (garbage, a failed proof, a
// stall) gets one line on stderr with its address and the reason.
//
// Client. The client enforces every deadline itself: it polls its socket with the time left,
// and when the time is up it closes that connection (a late answer can then never be taken for
// the reply to a later request) and takes one last look with a non-waiting request on a fresh
// connection. That look lets a timed-out Wait name exactly the keys still missing, and lets a
// key that arrived at the last moment count as arrived. Connections live in a small pool, so
// several threads can share one TcpStore and one thread's long Get never blocks another's Set
// (a single connection behind a mutex would deadlock a rank whose threads wait on each other).
// A lone thread uses exactly one connection. Every new connection says hello and runs the
// handshake as dialer (claim "store") before its first request; a server that does not know the
// secret, or that rejects ours, fails the open at once, since retrying cannot fix a secret.
// Connecting retries until StoreOptions::connect_timeout because the server may start after its
// clients; requests that do not wait for keys also get connect_timeout to be answered. Every
// send uses MSG_NOSIGNAL: a server that vanished must produce kUnavailable, not SIGPIPE.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "base/log_limit.h"
#include "net/auth.h"
#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"

namespace chorus {
namespace {

namespace proto = internal::tcp_store;
using internal::ErrnoText;
using internal::Handshake;
using internal::InStore;
using internal::StoreClock;
using internal::StoreDeadline;
using internal::UniqueFd;
using proto::Op;
using proto::ReplyStatus;
using std::chrono::milliseconds;

struct AddrInfoFree {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoFree>;

// Resolves host:port for a stream socket; on failure returns null and sets *error.
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

void SetNoDelay(int fd) {
  // Requests and replies are small and strictly alternate: Nagle would only add latency.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// ================================================================================ server

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kReadPerEvent = 4 * kReadChunk;  // then give the other clients a turn
constexpr size_t kReadAhead = 64 * 1024;          // input buffered while requests cannot run
constexpr size_t kKeepCapacity = 1 << 20;         // larger idle buffers are given back
constexpr milliseconds kAcceptPause(100);         // after running out of descriptors
// Connections still in their hello or handshake share this many places; a newer one pushes out
// the one that has been quiet longest, after a last look at what it sent. A client says hello
// and answers its challenge at once, so idle and slow strangers never keep a client out.
constexpr size_t kMaxStrangers = 128;
// Authenticated clients (they know the job's secret) beyond this are turned away, with a log
// line: a job's ranks hold a few connections each.
constexpr size_t kMaxClients = 16384;
constexpr std::string_view kStoreClaim = "store";

class StoreServer final : public TcpStoreServer {
 public:
  static Result<std::unique_ptr<TcpStoreServer>> Start(const Options& options);

  StoreServer(std::string host, uint16_t port, UniqueFd listen_fd, internal::Secret secret,
              milliseconds handshake_timeout)
      : host_(std::move(host)),
        port_(port),
        listen_(std::move(listen_fd)),
        secret_(std::move(secret)),
        handshake_timeout_(handshake_timeout) {}

  ~StoreServer() override {
    if (thread_.joinable()) {
      stop_.store(true, std::memory_order_release);
      const uint64_t one = 1;
      // The eventfd counter cannot overflow from one write; nothing useful to do on failure.
      [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
      thread_.join();
    }
    // Members now close every client socket (they see EOF at once), the listener and epoll.
  }

  uint16_t port() const override { return port_; }
  std::string url() const override { return internal::TcpUrl(host_, port_); }

 private:
  enum class Stage { kHello, kAuth, kRequests };

  struct Parked {
    Op op;
    std::vector<std::string> keys;
    std::string waiting_on;  // the key this connection is registered under in waiters_
  };

  struct Connection {
    uint64_t id = 0;
    UniqueFd fd;
    Stage stage = Stage::kHello;
    std::string peer;               // "127.0.0.1:40312", for the log
    std::optional<Handshake> auth;  // during Stage::kAuth
    StoreClock::time_point handshake_deadline;
    StoreClock::time_point last_heard;  // when it last sent something (or was accepted)
    std::string in;  // received bytes; in[in_pos..] not yet consumed
    size_t in_pos = 0;
    std::string out;  // reply bytes; out[out_pos..] not yet sent
    size_t out_pos = 0;
    std::optional<Parked> parked;
    bool close_after_flush = false;
    bool peer_closed = false;
    bool dead = false;  // closed at the end of the current batch of events
    uint32_t interest = 0;
  };

  Status Init();
  void Run();
  void Accept();
  void OnEvent(Connection& c, uint32_t events);
  void ReadFrom(Connection& c);
  void Process(Connection& c);
  bool HandleHello(Connection& c);
  bool HandleAuth(Connection& c);
  bool HandleRequest(Connection& c, std::string_view body);
  void Reply(Connection& c, ReplyStatus status, std::string_view payload);
  void Flush(Connection& c);
  void UpdateInterest(Connection& c);
  bool WantsInput(const Connection& c) const;
  void Kill(Connection& c);
  void Drop(Connection& c, std::string_view reason);
  // Makes room for a new stranger: the one quiet longest goes, unless a last read shows it busy.
  void PushOutStranger();
  size_t Strangers() const;
  void ExpireHandshakes();
  int WaitTimeoutMs() const;
  void Reap();
  void DrainRunnable();
  const std::string* FirstMissing(const std::vector<std::string>& keys) const;
  void WaitOn(Connection& c, const std::string& key);
  void KeyChanged(const std::string& key);

  const std::string host_;
  const uint16_t port_;
  UniqueFd listen_;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  const internal::Secret secret_;
  const milliseconds handshake_timeout_;

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::unordered_map<std::string, std::string> values_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
  std::deque<uint64_t> runnable_;  // unparked connections that may have buffered requests
  std::vector<uint64_t> doomed_;
  // (deadline, id) of connections still in hello or handshake, in accept order, which is
  // deadline order; entries of connections that have moved on are skipped when they surface.
  std::deque<std::pair<StoreClock::time_point, uint64_t>> handshakes_;
  std::optional<StoreClock::time_point> accept_paused_until_;
  uint64_t next_id_ = kWakeId + 1;
  size_t clients_ = 0;  // connections past their handshake
  internal::LogLimiter log_{"chorus store"};
  // Where every connection's reads land first: a connection's buffer grows by what arrived.
  std::unique_ptr<char[]> read_buffer_ = std::make_unique<char[]>(kReadChunk);

  std::thread thread_;  // last: started when everything it touches exists
};

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

// Stage 3. Returns false when the request is malformed (the caller closes the connection).
// Parsing is proto::ParseRequest, which the fuzzer drives directly.
bool StoreServer::HandleRequest(Connection& c, std::string_view body) {
  std::optional<proto::Request> req = proto::ParseRequest(body);
  if (!req) return false;
  switch (req->op) {
    case Op::kSet: {
      const std::string key(req->key);
      values_.insert_or_assign(key, std::string(req->value));
      Reply(c, ReplyStatus::kOk, {});
      KeyChanged(key);
      return true;
    }
    case Op::kGet: {
      const std::string key(req->key);
      if (auto it = values_.find(key); it != values_.end()) {
        Reply(c, ReplyStatus::kOk, it->second);
      } else if (!req->wait) {
        Reply(c, ReplyStatus::kMissing, {});
      } else {
        c.parked = Parked{Op::kGet, {key}, {}};
        WaitOn(c, key);
      }
      return true;
    }
    case Op::kAdd: {
      const std::string key(req->key);
      auto it = values_.find(key);
      auto sum = internal::ApplyAdd(key, it == values_.end() ? nullptr : &it->second, req->delta);
      if (!sum.ok()) {
        Reply(c, ReplyStatus::kError, sum.status().message());
        return true;
      }
      values_.insert_or_assign(key, std::to_string(*sum));
      std::string payload;
      proto::PutU64(&payload, static_cast<uint64_t>(*sum));
      Reply(c, ReplyStatus::kOk, payload);
      KeyChanged(key);
      return true;
    }
    case Op::kWait:
    case Op::kCheck: {
      std::vector<std::string> keys(req->keys.begin(), req->keys.end());
      if (req->op == Op::kCheck) {
        std::string payload;
        std::vector<uint32_t> missing;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (!values_.contains(keys[i])) missing.push_back(static_cast<uint32_t>(i));
        }
        proto::PutU32(&payload, static_cast<uint32_t>(missing.size()));
        for (const uint32_t i : missing) proto::PutU32(&payload, i);
        Reply(c, ReplyStatus::kOk, payload);
      } else if (const std::string* first = FirstMissing(keys); first == nullptr) {
        Reply(c, ReplyStatus::kOk, {});
      } else {
        const std::string key = *first;
        c.parked = Parked{Op::kWait, std::move(keys), {}};
        WaitOn(c, key);
      }
      return true;
    }
    case Op::kDelete: {
      const char existed = values_.erase(std::string(req->key)) > 0 ? 1 : 0;
      Reply(c, ReplyStatus::kOk, std::string_view(&existed, 1));
      return true;
    }
  }
  return false;
}

void StoreServer::Reply(Connection& c, ReplyStatus status, std::string_view payload) {
  proto::PutU32(&c.out, static_cast<uint32_t>(1 + payload.size()));
  c.out.push_back(static_cast<char>(status));
  c.out.append(payload);
  Flush(c);
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

void StoreServer::DrainRunnable() {
  while (!runnable_.empty()) {
    const uint64_t id = runnable_.front();
    runnable_.pop_front();
    auto it = conns_.find(id);
    if (it != conns_.end() && !it->second->dead) Process(*it->second);
  }
}

const std::string* StoreServer::FirstMissing(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (!values_.contains(key)) return &key;
  }
  return nullptr;
}

void StoreServer::WaitOn(Connection& c, const std::string& key) {
  c.parked->waiting_on = key;
  waiters_[key].push_back(c.id);
  UpdateInterest(c);
}

// `key` was just set: answer or re-register every request parked on it.
void StoreServer::KeyChanged(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  const std::vector<uint64_t> ids = std::move(w->second);
  waiters_.erase(w);
  for (const uint64_t id : ids) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead || !it->second->parked) continue;
    Connection& c = *it->second;
    if (c.parked->op == Op::kGet) {
      Reply(c, ReplyStatus::kOk, values_.at(key));
    } else if (const std::string* missing = FirstMissing(c.parked->keys); missing != nullptr) {
      WaitOn(c, *missing);
      continue;
    } else {
      Reply(c, ReplyStatus::kOk, {});
    }
    c.parked.reset();
    runnable_.push_back(id);  // it may have more requests buffered
  }
}

// ================================================================================ client

enum class Io { kOk, kTimedOut, kLost };

constexpr milliseconds kFirstRetry(10);
constexpr milliseconds kMaxRetry(500);
constexpr milliseconds kLastLook(2000);
constexpr size_t kMaxIdleConnections = 4;
constexpr std::string_view kSameSecret = "every rank needs the same CHORUS_SECRET";

// Waits until `fd` is ready for `events` or the deadline passes.
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

struct Exchange {
  Io io = Io::kOk;
  std::string error;  // when io == kLost
  ReplyStatus status = ReplyStatus::kOk;
  std::string payload;
};

// Sends one request frame and reads its reply.
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

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, uint16_t port, const StoreOptions& options, internal::Secret secret)
      : host_(std::move(host)),
        port_(port),
        address_(internal::TcpUrl(host_, port_)),
        options_(options),
        secret_(std::move(secret)) {}

  // Opens the first connection, so that OpenStore reports an unreachable server.
  Status Connect() {
    auto fd = Acquire(internal::DeadlineAfter(options_.connect_timeout));
    if (!fd.ok()) return fd.status();
    Release(std::move(*fd));
    return Status::Ok();
  }

  Status Set(const std::string& key, const std::string& value) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("set", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckValue(key, value)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kSet)).Bytes(key).Bytes(value).Finish();
    auto x = Immediate("set of key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    return Expect(*x, ReplyStatus::kOk, 0, "set");
  }

  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("get", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("get", timeout)));
    const std::string what = "get of key " + key;
    auto x = Waiting(what, GetFrame(key, /*wait=*/true), timeout);
    if (!x.ok()) return x.status();
    if (*x) {
      CHORUS_RETURN_IF_ERROR(Expect(**x, ReplyStatus::kOk, -1, "get"));
      return std::move((*x)->payload);
    }
    // Timed out. One last look: the key may have arrived as the deadline passed.
    auto last = Immediate(what, GetFrame(key, /*wait=*/false), LastLookBudget());
    if (last.ok() && last->status == ReplyStatus::kOk) return std::move(last->payload);
    Status timed_out = internal::WaitTimedOut(address_, timeout, {key});
    if (last.ok()) return timed_out;
    return Status(timed_out.code(),
                  timed_out.message() + " (then " + last.status().message() + ")");
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("add", key)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kAdd)).Bytes(key).I64(delta).Finish();
    auto x = Immediate("add to key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    CHORUS_RETURN_IF_ERROR(Expect(*x, ReplyStatus::kOk, 8, "add"));
    proto::FrameReader r(x->payload);
    return r.I64();
  }

  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKeys("wait", keys)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("wait", timeout)));
    if (keys.empty()) return Status::Ok();
    proto::FrameWriter wait_frame, check_frame;
    wait_frame.U8(static_cast<uint8_t>(Op::kWait)).U32(static_cast<uint32_t>(keys.size()));
    check_frame.U8(static_cast<uint8_t>(Op::kCheck)).U32(static_cast<uint32_t>(keys.size()));
    for (const std::string& key : keys) {
      wait_frame.Bytes(key);
      check_frame.Bytes(key);
    }
    if (wait_frame.body_size() > proto::kMaxFrameBytes) {
      return InvalidArgument("store " + address_ + ": wait: " + std::to_string(keys.size()) +
                             " keys are too many for one request; wait for them in groups");
    }
    const std::string what = "wait for " + internal::NameKeys(keys);
    auto x = Waiting(what, wait_frame.Finish(), timeout);
    if (!x.ok()) return x.status();
    if (*x) return Expect(**x, ReplyStatus::kOk, 0, "wait");

    // Timed out. One last look names exactly the keys still missing.
    auto last = Immediate(what, check_frame.Finish(), LastLookBudget());
    if (!last.ok() || last->status != ReplyStatus::kOk) {
      Status timed_out = internal::WaitTimedOut(address_, timeout, keys);
      const std::string why = last.ok() ? "a garbled answer" : last.status().message();
      return Status(timed_out.code(), timed_out.message() + " (then " + why + ")");
    }
    proto::FrameReader r(last->payload);
    const uint32_t m = r.U32();
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < m && r.ok(); ++i) {
      const uint32_t index = r.U32();
      if (r.ok() && index < keys.size()) missing.push_back(keys[index]);
    }
    if (!r.Done() || missing.size() != m) {
      return Internal("store " + address_ + ": wait: garbled reply to the last check");
    }
    if (missing.empty()) return Status::Ok();
    return internal::WaitTimedOut(address_, timeout, missing);
  }

  Result<bool> Delete(const std::string& key) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("delete", key)));
    std::string frame =
        proto::FrameWriter().U8(static_cast<uint8_t>(Op::kDelete)).Bytes(key).Finish();
    auto x = Immediate("delete of key " + key, frame, options_.connect_timeout);
    if (!x.ok()) return x.status();
    CHORUS_RETURN_IF_ERROR(Expect(*x, ReplyStatus::kOk, 1, "delete"));
    return x->payload[0] != 0;
  }

  std::string address() const override { return address_; }

 private:
  static std::string GetFrame(const std::string& key, bool wait) {
    return proto::FrameWriter()
        .U8(static_cast<uint8_t>(Op::kGet))
        .Bytes(key)
        .U8(wait ? 1 : 0)
        .Finish();
  }

  milliseconds LastLookBudget() const { return std::min(options_.connect_timeout, kLastLook); }

  // The reply must have `status` and, unless `payload_size` is -1, that many payload bytes.
  Status Expect(const Exchange& x, ReplyStatus status, int payload_size,
                std::string_view op) const {
    if (x.status == ReplyStatus::kError) {
      return InvalidArgument("store " + address_ + ": " + x.payload);
    }
    if (x.status != status ||
        (payload_size >= 0 && x.payload.size() != static_cast<size_t>(payload_size))) {
      return Internal("store " + address_ + ": " + std::string(op) + ": garbled reply (status " +
                      std::to_string(static_cast<int>(x.status)) + ", " +
                      std::to_string(x.payload.size()) + " bytes)");
    }
    return Status::Ok();
  }

  Status Lost(const std::string& what, const std::string& error) const {
    return Unavailable("store " + address_ + ": connection lost (" + what + ": " + error + ")");
  }

  // A request the server answers at once; `budget` covers connecting and the answer.
  Result<Exchange> Immediate(const std::string& what, const std::string& frame,
                             milliseconds budget) {
    const StoreDeadline deadline = internal::DeadlineAfter(budget);
    auto fd = Acquire(deadline);
    if (!fd.ok()) return fd.status();
    Exchange x = RoundTrip(fd->get(), frame, deadline);
    switch (x.io) {
      case Io::kOk:
        Release(std::move(*fd));
        return x;
      case Io::kTimedOut:
        return Unavailable("store " + address_ + ": no answer for " +
                           internal::FormatWaited(budget) + " (" + what + ")");
      case Io::kLost:
        break;
    }
    return Lost(what, x.error);
  }

  // A request that waits for keys. Returns nullopt when `timeout` passed; the connection is then
  // closed, since the answer may still come.
  Result<std::optional<Exchange>> Waiting(const std::string& what, const std::string& frame,
                                          milliseconds timeout) {
    const StoreDeadline deadline = internal::DeadlineAfter(timeout);
    // Connecting has its own budget: a short wait on a fresh connection must still get to ask.
    auto fd = Acquire(internal::DeadlineAfter(options_.connect_timeout));
    if (!fd.ok()) return fd.status();
    Exchange x = RoundTrip(fd->get(), frame, deadline);
    switch (x.io) {
      case Io::kOk:
        Release(std::move(*fd));
        return std::optional<Exchange>(std::move(x));
      case Io::kTimedOut:
        return std::optional<Exchange>();
      case Io::kLost:
        break;
    }
    return Lost(what, x.error);
  }

  // An idle pooled connection, or a new one.
  Result<UniqueFd> Acquire(StoreDeadline deadline) {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        UniqueFd fd = std::move(idle_.back());
        idle_.pop_back();
        return fd;
      }
    }
    return Open(deadline);
  }

  void Release(UniqueFd fd) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(fd));
  }

  // Connects and says hello, retrying (the server may not be up yet) until `deadline`.
  Result<UniqueFd> Open(StoreDeadline deadline) {
    const auto start = StoreClock::now();
    std::string error = "no address to try";
    milliseconds pause = kFirstRetry;
    while (true) {
      AddrInfoList addrs = Resolve(host_, port_, /*passive=*/false, &error);
      for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
        UniqueFd fd = ConnectTo(ai, deadline, &error);
        if (!fd) continue;
        bool fatal = false;
        if (Hello(fd.get(), deadline, &error, &fatal)) return fd;
        if (fatal) return FailedPrecondition("store " + address_ + ": " + error);
      }
      const auto left = deadline - StoreClock::now();
      if (left <= StoreClock::duration::zero()) {
        const auto tried = std::chrono::duration_cast<milliseconds>(StoreClock::now() - start);
        return Unavailable("store " + address_ + ": cannot connect (tried for " +
                           internal::FormatWaited(tried) + "; last error: " + error + ")");
      }
      std::this_thread::sleep_for(std::min<StoreClock::duration>(pause, left));
      pause = std::min(pause * 2, kMaxRetry);
    }
  }

  static UniqueFd ConnectTo(const addrinfo* ai, StoreDeadline deadline, std::string* error) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      *error = "socket: " + ErrnoText(errno);
      return {};
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *error = ErrnoText(errno);
        return {};
      }
      const Io io = WaitReady(fd.get(), POLLOUT, deadline, error);
      if (io == Io::kTimedOut) *error = "connect timed out";
      if (io != Io::kOk) return {};
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        *error = ErrnoText(err);
        return {};
      }
    }
    SetNoDelay(fd.get());
    return fd;
  }

  // Stages 1 and 2 of the protocol. False with *fatal when retrying cannot help (a different
  // service or protocol version listens there, or the secrets differ).
  bool Hello(int fd, StoreDeadline deadline, std::string* error, bool* fatal) const {
    const std::string hello = proto::Hello(proto::kMagic, proto::kVersion, 0);
    char reply[proto::kHelloBytes];
    Io io = SendAll(fd, hello, deadline, error);
    if (io == Io::kOk) io = RecvExact(fd, reply, sizeof(reply), deadline, error);
    if (io == Io::kTimedOut) *error = "no answer to the hello";
    if (io != Io::kOk) return false;
    if (proto::LoadU32(reply) != proto::kMagic) {
      *fatal = true;
      *error = "the server is not a chorus store server (wrong magic in its hello)";
      return false;
    }
    const uint16_t version = proto::LoadU16(reply + 4);
    const auto status = static_cast<proto::HelloStatus>(proto::LoadU16(reply + 6));
    if (status != proto::HelloStatus::kAccepted || version != proto::kVersion) {
      *fatal = true;
      *error = "the server speaks protocol version " + std::to_string(version) +
               ", this client version " + std::to_string(proto::kVersion);
      return false;
    }
    Handshake handshake(secret_, Handshake::Role::kDialer, std::string(kStoreClaim));
    const Status s = internal::RunHandshake(fd, handshake, deadline);
    if (s.ok()) return true;
    if (s.code() == StatusCode::kDeadlineExceeded) {
      *error = "no answer to the handshake";
      return false;
    }
    *fatal = true;
    if (s.code() == StatusCode::kFailedPrecondition) {
      // The server's proof did not verify: it holds a different secret.
      *error = "the server does not know this job's secret (" + std::string(kSameSecret) + ")";
    } else if (s.message().find("closed the connection") != std::string::npos) {
      // It heard our proof and hung up: our secret is not its secret.
      *error = "the server rejected this client's secret (" + std::string(kSameSecret) + ")";
    } else {
      *error = s.message();
    }
    return false;
  }

  const std::string host_;
  const uint16_t port_;
  const std::string address_;
  const StoreOptions options_;
  const internal::Secret secret_;
  std::mutex mu_;
  std::vector<UniqueFd> idle_;  // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const Options& options) {
  return StoreServer::Start(options);
}

namespace internal {

Result<std::shared_ptr<Store>> OpenTcpStore(const std::string& host, uint16_t port,
                                            const StoreOptions& options) {
  const std::string where = "store " + TcpUrl(host, port);
  if (options.secret.empty()) {
    return InvalidArgument(where +
                           ": StoreOptions::secret is empty: set it to the job's secret "
                           "(CHORUS_SECRET; " +
                           std::string(kSameSecret) + ")");
  }
  auto secret = Secret::FromText(options.secret, "StoreOptions::secret");
  if (!secret.ok()) return InvalidArgument(where + ": " + secret.status().message());
  auto store = std::make_shared<TcpStore>(host, port, options, std::move(secret).value());
  CHORUS_RETURN_IF_ERROR(store->Connect());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace internal
}  // namespace chorus
