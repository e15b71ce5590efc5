// TCP transport (see tcp_transport.h for the design).
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/unique_fd.h"
#include "transport/control.h"
#include "transport/tcp/frame.h"

namespace chorus::internal {
namespace {

using tcp::FrameHeader;
using tcp::FrameType;
using tcp::kFrameHeaderBytes;

constexpr char kClaimPrefix[] = "chorus-tcp/1";
// Handshakes in progress beyond the group's own dials before new connections are turned away.
constexpr size_t kMaxStrangers = 64;

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

struct Address {
  sockaddr_in addr{};
  std::string text;  // "10.0.0.2:4242"
};

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

// A frame on its way out: header bytes, then payload bytes from a slot or from `owned`.
struct Outgoing {
  uint8_t header[kFrameHeaderBytes];
  const std::byte* payload = nullptr;
  size_t payload_bytes = 0;
  size_t done = 0;  // bytes of header + payload written
  bool data = false;
  std::string owned;  // a control frame's payload
  size_t total() const { return kFrameHeaderBytes + payload_bytes; }
};

struct PostedMessage {
  uint64_t bytes = 0;
  CallTag tag;
};

struct ControlFrame {
  FrameType type;
  uint64_t call_index;
  std::string payload;
};

enum class Flush { kDone, kBlocked, kError };

// One peer's connection and slots. The rank thread and the progress thread share it through
// the atomics; the send side is written by whoever holds send_mu.
struct Link {
  std::atomic<bool> wanted{false};  // the rank thread asked for the connection
  std::atomic<bool> ready{false};   // authenticated, slots allocated (progress thread sets)
  std::atomic<bool> dead{false};    // the connection is gone; `death` says why
  std::atomic<bool> paused{false};  // reading stopped: every receive slot is full
  std::string death;                // written before dead = true
  Address address;

  std::unique_ptr<std::byte[]> send_slots;
  std::unique_ptr<std::byte[]> recv_slots;

  // Send side.
  std::mutex send_mu;
  int fd = -1;                       // under send_mu once ready; -1 after close
  std::atomic<uint64_t> posted{0};   // rank thread
  std::atomic<uint64_t> written{0};  // frames fully handed to the kernel: the credits
  PostedMessage posted_messages[kMaxPipelineDepth];
  std::deque<ControlFrame> control_out;  // waiting for the current frame to end (under send_mu)
  std::optional<Outgoing> current;       // frame being written (under send_mu)
  uint64_t data_started = 0;             // data frames started (under send_mu)
  uint64_t send_sequence = 0;            // frames started (under send_mu)
  uint32_t events = 0;                   // epoll interest; 0 = not registered (progress thread)

  // Receive side: whoever holds recv_mu reads the socket; the rank thread reads slots up to
  // `received`.
  std::mutex recv_mu;
  std::string broken;  // why the rank thread found the connection broken (under recv_mu)
  std::atomic<bool> has_broken{false};
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> released{0};
  FrameHeader arrived[kMaxPipelineDepth];
  uint8_t in_header[kFrameHeaderBytes];
  size_t in_header_bytes = 0;
  bool in_payload = false;
  FrameHeader in_frame;
  size_t in_payload_bytes = 0;
  std::string control_in;
  uint64_t recv_sequence = 0;
};

// An accepted or dialed connection that has not finished its handshake.
struct Pending {
  UniqueFd fd;
  int peer = -1;  // dialed: the peer; accepted: unknown until the claim is read
  bool connecting = false;
  std::unique_ptr<Handshake> handshake;
  Clock::time_point deadline;
  std::string name;
};

// What an epoll event refers to.
enum class Source : uint64_t { kListener = 1, kWake = 2 };
constexpr uint64_t kLinkBase = 1ull << 32;     // + peer
constexpr uint64_t kPendingBase = 1ull << 48;  // + pending id

class TcpTransport final : public ControlledTransport {
 public:
  TcpTransport(std::unique_ptr<void, decltype(&std::free)> control_memory, Control& control,
               const TcpConfig& config, UniqueFd listener, std::vector<Address> addresses,
               uint64_t comm_id);
  ~TcpTransport() override;

  size_t slot_bytes() const override { return slot_bytes_; }
  bool zero_copy() const override { return false; }
  bool copies_at_post() const override { return true; }
  int ranks_on_host() const override { return ranks_on_host_; }

  bool TryCredit(int peer) override;
  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m) override;
  void Release(int peer) override;
  bool Drained(int peer) override;
  bool PeerAlive(int peer) override {
    return !links_[Index(peer)]->dead.load(std::memory_order_acquire);
  }
  std::string DescribeDeath(int peer) const override;

  void Fail(const Status& status) override;
  void Reject(uint64_t call_index, const std::string& reason) override;
  Doorbell& doorbell() override { return bell_ != nullptr ? *bell_ : control_.bell(rank_); }
  bool PeerActive(int, uint64_t) const override { return false; }
  // Which ranks have not started a call is not visible across hosts without extra traffic.
  std::string Absentees(uint64_t) const override { return ""; }

 private:
  static size_t Index(int peer) { return static_cast<size_t>(peer); }
  Link& link(int peer) { return *links_[Index(peer)]; }
  bool Usable(int peer);  // ready, or asks for the connection
  void Wake();

  // Both threads: writes what is queued on `l` (under send_mu) until the socket is full. The
  // newest posted frame's payload comes from `newest_from` if given (the caller's memory).
  Flush FlushLocked(Link& l, const std::byte* newest_from = nullptr);
  // Rank thread, under send_mu, after FlushLocked(l, caller): makes frame `frame` stop
  // referring to the caller's memory by copying what is not yet written into its slot.
  void KeepRestInSlot(Link& l, uint64_t frame, const std::byte* caller, std::byte* slot);
  void QueueControl(int peer, FrameType type, uint64_t call_index, const std::string& payload);
  void Broadcast(FrameType type, uint64_t call_index, const std::string& payload, int except);

  // Progress thread.
  void Loop();
  void Accept();
  void Dial(int peer);
  void Advance(uint64_t id, uint32_t events);
  void Adopt(int fd, int peer);
  bool Dialing(int peer) const;
  void Drop(uint64_t id, const std::string& why);
  enum class ReadOutcome { kBlocked, kFull, kClosed, kBroken, kBadFrame };
  // Either thread, under recv_mu: reads frames until the socket is empty, the slots are full or
  // the connection breaks (`why` says how).
  ReadOutcome ReadLocked(int peer, std::string* why);
  void Read(int peer);          // progress thread
  void ReadFromRank(int peer);  // rank thread
  void OnControl(int peer, const FrameHeader& h, const std::string& payload);
  void KillLink(int peer, const std::string& why);
  void Watch(int fd, uint64_t id, uint32_t events, bool add);
  // Registers the events `peer`'s link needs: input unless paused, output while blocked.
  void Interest(int peer, bool output);
  // Dials wanted links, resumes paused ones, flushes blocked ones. True while a link is paused
  // with output blocked (then the loop polls it, as it watches neither direction).
  bool ServiceLinks();

  std::unique_ptr<void, decltype(&std::free)> control_memory_;
  const size_t slot_bytes_;
  const int depth_;
  const int ranks_on_host_;
  const Secret secret_;
  const std::chrono::milliseconds handshake_timeout_;
  const uint64_t comm_id_;
  Doorbell* const bell_;
  UniqueFd listener_;
  UniqueFd wake_;
  UniqueFd epoll_;
  std::vector<std::unique_ptr<Link>> links_;
  std::map<uint64_t, Pending> pending_;  // progress thread
  uint64_t next_pending_ = 0;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

TcpTransport::TcpTransport(std::unique_ptr<void, decltype(&std::free)> control_memory,
                           Control& control, const TcpConfig& config, UniqueFd listener,
                           std::vector<Address> addresses, uint64_t comm_id)
    : ControlledTransport(control, config.connect.rank),
      control_memory_(std::move(control_memory)),
      slot_bytes_(config.connect.slot_bytes),
      depth_(config.connect.depth),
      ranks_on_host_(config.ranks_on_host),
      secret_(config.secret),
      handshake_timeout_(config.handshake_timeout),
      comm_id_(comm_id),
      bell_(config.bell),
      listener_(std::move(listener)),
      wake_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  for (Address& a : addresses) {
    links_.push_back(std::make_unique<Link>());
    links_.back()->address = std::move(a);
  }
  Watch(listener_.get(), static_cast<uint64_t>(Source::kListener), EPOLLIN, true);
  Watch(wake_.get(), static_cast<uint64_t>(Source::kWake), EPOLLIN, true);
  progress_ = std::thread([this] { Loop(); });
}

TcpTransport::~TcpTransport() {
  stop_.store(true, std::memory_order_release);
  Wake();
  progress_.join();
  for (auto& l : links_) {
    if (l->fd >= 0) close(l->fd);
  }
}

void TcpTransport::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_.get(), &one, sizeof(one));
}

void TcpTransport::Watch(int fd, uint64_t id, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  epoll_ctl(epoll_.get(), add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

bool TcpTransport::Usable(int peer) {
  Link& l = link(peer);
  if (l.ready.load(std::memory_order_acquire)) return true;
  if (!l.wanted.exchange(true, std::memory_order_acq_rel)) Wake();
  return false;
}

bool TcpTransport::TryCredit(int peer) {
  if (!Usable(peer)) return false;
  Link& l = link(peer);
  return l.posted.load(std::memory_order_relaxed) - l.written.load(std::memory_order_acquire) <
         static_cast<uint64_t>(depth_);
}

void* TcpTransport::TryReserve(int peer) {
  if (!TryCredit(peer)) return nullptr;
  Link& l = link(peer);
  const uint64_t index = l.posted.load(std::memory_order_relaxed) % static_cast<uint64_t>(depth_);
  return l.send_slots.get() + index * slot_bytes_;
}

void TcpTransport::Post(int peer, const Message& m) {
  Link& l = link(peer);
  const uint64_t n = l.posted.load(std::memory_order_relaxed);
  CHORUS_CHECK(n - l.written.load(std::memory_order_acquire) < static_cast<uint64_t>(depth_));
  CHORUS_CHECK_LE(m.bytes, slot_bytes_);
  const uint64_t index = n % static_cast<uint64_t>(depth_);
  std::byte* slot = l.send_slots.get() + index * slot_bytes_;
  l.posted_messages[index] = {m.bytes, m.tag};
  // Written now if the socket takes it: the common case costs no thread hand-off. The
  // caller's own memory (copies_at_post) is sent from directly; what the socket does not take
  // now is copied into the reserved slot before Post returns. The frame is published under the
  // lock, so the progress thread cannot start it from the slot before that copy.
  const auto* caller = static_cast<const std::byte*>(m.data);
  Flush result;
  {
    std::lock_guard<std::mutex> lock(l.send_mu);
    l.posted.store(n + 1, std::memory_order_release);
    result = FlushLocked(l, caller == slot ? nullptr : caller);
    if (caller != slot) KeepRestInSlot(l, n, caller, slot);
  }
  if (result != Flush::kDone) Wake();
}

void TcpTransport::KeepRestInSlot(Link& l, uint64_t frame, const std::byte* caller,
                                  std::byte* slot) {
  const size_t bytes = l.posted_messages[frame % static_cast<uint64_t>(depth_)].bytes;
  if (l.data_started <= frame) {  // not started: frames ahead of it still wait
    if (bytes > 0) std::memcpy(slot, caller, bytes);
  } else if (l.current && l.current->payload == caller) {  // partly written
    const size_t done =
        l.current->done > kFrameHeaderBytes ? l.current->done - kFrameHeaderBytes : 0;
    std::memcpy(slot + done, caller + done, bytes - done);
    l.current->payload = slot;
  }
}

bool TcpTransport::TryPeek(int peer, Message* m) {
  if (!Usable(peer)) return false;
  Link& l = link(peer);
  const uint64_t next = l.released.load(std::memory_order_relaxed);
  if (next == l.received.load(std::memory_order_acquire)) {
    ReadFromRank(peer);
    if (next == l.received.load(std::memory_order_acquire)) return false;
  }
  const uint64_t index = next % static_cast<uint64_t>(depth_);
  const FrameHeader& h = l.arrived[index];
  *m = Message{l.recv_slots.get() + index * slot_bytes_, h.length, h.tag};
  return true;
}

void TcpTransport::Release(int peer) {
  Link& l = link(peer);
  CHORUS_CHECK_LT(l.released.load(std::memory_order_relaxed),
                  l.received.load(std::memory_order_acquire));
  l.released.fetch_add(1, std::memory_order_seq_cst);
  if (l.paused.load(std::memory_order_seq_cst)) Wake();
}

bool TcpTransport::Drained(int peer) {
  Link& l = link(peer);
  return l.written.load(std::memory_order_acquire) == l.posted.load(std::memory_order_relaxed);
}

std::string TcpTransport::DescribeDeath(int peer) const {
  const Link& l = *links_[Index(peer)];
  if (!l.dead.load(std::memory_order_acquire)) return "";
  return "rank " + std::to_string(peer) + " (" + l.address.text + ") " + l.death;
}

Flush TcpTransport::FlushLocked(Link& l, const std::byte* newest_from) {
  while (l.fd >= 0) {
    if (!l.current) {
      Outgoing out;
      // The sequence number is the frame's place on the wire, known only now.
      if (!l.control_out.empty()) {
        ControlFrame& c = l.control_out.front();
        FrameHeader h;
        h.type = c.type;
        h.comm_id = comm_id_;
        h.sequence = l.send_sequence++;
        h.tag.call_index = c.call_index;
        h.length = c.payload.size();
        tcp::EncodeFrameHeader(h, out.header);
        out.owned = std::move(c.payload);
        l.control_out.pop_front();
        out.payload = reinterpret_cast<const std::byte*>(out.owned.data());
        out.payload_bytes = out.owned.size();
      } else if (l.data_started < l.posted.load(std::memory_order_acquire)) {
        const uint64_t index = l.data_started % static_cast<uint64_t>(depth_);
        const PostedMessage& pm = l.posted_messages[index];
        tcp::EncodeFrameHeader({FrameType::kData, comm_id_, l.send_sequence++, pm.tag, pm.bytes},
                               out.header);
        const bool newest = l.data_started + 1 == l.posted.load(std::memory_order_relaxed);
        out.payload = newest && newest_from != nullptr ? newest_from
                                                       : l.send_slots.get() + index * slot_bytes_;
        out.payload_bytes = pm.bytes;
        out.data = true;
        ++l.data_started;
      } else {
        return Flush::kDone;
      }
      l.current = std::move(out);
    }
    Outgoing& out = *l.current;
    iovec iov[2];
    int count = 0;
    if (out.done < kFrameHeaderBytes) {
      iov[count++] = {out.header + out.done, kFrameHeaderBytes - out.done};
    }
    const size_t payload_done = out.done > kFrameHeaderBytes ? out.done - kFrameHeaderBytes : 0;
    if (payload_done < out.payload_bytes) {
      iov[count++] = {const_cast<std::byte*>(out.payload + payload_done),
                      out.payload_bytes - payload_done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(l.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Flush::kBlocked;
      if (errno == EINTR) continue;
      return Flush::kError;
    }
    out.done += static_cast<size_t>(n);
    if (out.done == out.total()) {
      const bool data = out.data;
      l.current.reset();
      if (data) {
        l.written.fetch_add(1, std::memory_order_acq_rel);
        doorbell().Ring();  // a credit came back
      }
    }
  }
  return Flush::kDone;
}

void TcpTransport::QueueControl(int peer, FrameType type, uint64_t call_index,
                                const std::string& payload) {
  Link& l = link(peer);
  std::lock_guard<std::mutex> lock(l.send_mu);
  l.control_out.push_back({type, call_index, payload});
}

void TcpTransport::Broadcast(FrameType type, uint64_t call_index, const std::string& payload,
                             int except) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || peer == except) continue;
    QueueControl(peer, type, call_index, payload);
  }
  Wake();
}

std::string FailPayload(const Status& s) {
  std::string text = s.message().substr(0, tcp::kMaxControlBytes - 4);
  std::string payload(4, '\0');
  payload[3] = static_cast<char>(s.code());
  return payload + text;
}

void TcpTransport::Fail(const Status& status) {
  if (control_.failed()) return;
  control_.Fail(status);
  doorbell().Ring();
  // Only ranks that are connected need telling: the others learn it from their neighbours, or
  // at their own next wait on this rank.
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank_ && link(peer).ready.load(std::memory_order_acquire)) {
      QueueControl(peer, FrameType::kFail, 0, FailPayload(status));
    }
  }
  Wake();
}

void TcpTransport::Reject(uint64_t call_index, const std::string& reason) {
  control_.Reject(rank_, call_index, reason);
  // Any peer may be waiting for this rank in this call, connected or not: connect to all.
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    link(peer).wanted.store(true, std::memory_order_release);
  }
  Broadcast(FrameType::kReject, call_index, reason.substr(0, tcp::kMaxControlBytes), -1);
}

// ---------------------------------------------------------------- progress thread

void TcpTransport::Loop() {
  epoll_event events[64];
  bool poll_soon = false;
  while (!stop_.load(std::memory_order_acquire)) {
    // Sleep until an event, the next handshake deadline, or (rarely) a short poll.
    Clock::time_point wake_at =
        poll_soon ? Clock::now() + std::chrono::milliseconds(1) : Clock::time_point::max();
    for (const auto& [id, p] : pending_) wake_at = std::min(wake_at, p.deadline);
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(wake_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
    }
    const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == static_cast<uint64_t>(Source::kListener)) {
        Accept();
      } else if (id == static_cast<uint64_t>(Source::kWake)) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = read(wake_.get(), &count, sizeof(count));
      } else if (id >= kPendingBase) {
        Advance(id, events[i].events);
      } else if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) {
        Read(static_cast<int>(id - kLinkBase));
      }
    }
    const Clock::time_point now = Clock::now();
    std::vector<uint64_t> expired;
    for (const auto& [id, p] : pending_) {
      if (now >= p.deadline) expired.push_back(id);
    }
    for (uint64_t id : expired) Drop(id, "did not finish its handshake in time");
    poll_soon = ServiceLinks();
  }
}

void TcpTransport::Interest(int peer, bool output) {
  Link& l = link(peer);
  if (l.fd < 0) return;
  const bool paused = l.paused.load(std::memory_order_relaxed);
  const uint32_t events = (paused ? 0u : EPOLLIN | EPOLLRDHUP) | (output ? EPOLLOUT : 0u);
  if (events == l.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = kLinkBase + static_cast<uint64_t>(peer);
  // A paused link is taken out of the set: a hang-up would otherwise be reported again and
  // again while the rank has no slot to read into.
  const int op = events == 0 ? EPOLL_CTL_DEL : l.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  epoll_ctl(epoll_.get(), op, l.fd, &ev);
  l.events = events;
}

bool TcpTransport::ServiceLinks() {
  bool poll_soon = false;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    Link& l = link(peer);
    if (l.dead.load(std::memory_order_relaxed)) continue;
    if (!l.ready.load(std::memory_order_relaxed)) {
      if (peer > rank_ && l.wanted.load(std::memory_order_acquire) && !Dialing(peer)) Dial(peer);
      continue;
    }
    if (l.has_broken.load(std::memory_order_acquire)) {
      Read(peer);  // turns what the rank thread found into the link's death
      continue;
    }
    if (l.paused.load(std::memory_order_relaxed) &&
        l.received.load(std::memory_order_relaxed) - l.released.load(std::memory_order_acquire) <
            static_cast<uint64_t>(depth_)) {
      l.paused.store(false, std::memory_order_release);
      Read(peer);
      if (l.dead.load(std::memory_order_relaxed)) continue;
    }
    Flush result;
    {
      std::lock_guard<std::mutex> lock(l.send_mu);
      result = FlushLocked(l);
    }
    if (result == Flush::kError) {
      KillLink(peer, "lost its connection (" + Errno("send") + ")");
      continue;
    }
    Interest(peer, result == Flush::kBlocked);
    poll_soon =
        poll_soon || (result == Flush::kBlocked && l.paused.load(std::memory_order_relaxed));
  }
  return poll_soon;
}

bool TcpTransport::Dialing(int peer) const {
  for (const auto& [id, p] : pending_) {
    if (p.peer == peer) return true;
  }
  return false;
}

void TcpTransport::Accept() {
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: the next event retries
    Pending p;
    p.fd = UniqueFd(fd);
    p.name = PeerName(fd);
    // A flood of connections that never finish their handshake must not grow without bound;
    // every genuine peer dials at most once, so a few more than the group size suffice.
    if (pending_.size() >= static_cast<size_t>(size()) + kMaxStrangers) {
      std::fprintf(stderr,
                   "chorus tcp rank %d: dropped connection from %s: %zu handshakes already "
                   "pending\n",
                   rank_, p.name.c_str(), pending_.size());
      continue;
    }
    p.handshake = std::make_unique<Handshake>(secret_, Handshake::Role::kAcceptor);
    p.deadline = Clock::now() + handshake_timeout_;
    const uint64_t id = kPendingBase + next_pending_++;
    Watch(fd, id, EPOLLIN | EPOLLRDHUP, true);
    pending_.emplace(id, std::move(p));
  }
}

void TcpTransport::Dial(int peer) {
  Link& l = link(peer);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
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
    std::fprintf(stderr, "chorus tcp rank %d: dropped connection from %s: %s\n", rank_,
                 p.name.c_str(), why.c_str());
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
      Drop(id, std::string("refused the connection (") + std::strerror(error) + ")");
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
      Drop(id, p.peer >= 0 ? "closed the connection during the handshake (a different secret?)"
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
  }
  // Authenticated. An acceptor checks what the dialer claims to be.
  int peer = p.peer;
  if (peer < 0) {
    const std::string expected_head = std::string(kClaimPrefix) + " " + Hex64(comm_id_) + " ";
    const std::string& claim = h.claim();
    int from = -1;
    int to = -1;
    if (claim.rfind(expected_head, 0) == 0 &&
        std::sscanf(claim.c_str() + expected_head.size(), "%d %d", &from, &to) == 2 &&
        to == rank_ && from >= 0 && from < rank_ &&
        !link(from).ready.load(std::memory_order_relaxed) &&
        !link(from).dead.load(std::memory_order_relaxed)) {
      peer = from;
    } else {
      Drop(id, "unexpected claim \"" + claim + "\"");
      return;
    }
  }
  // The link owns the socket from now on.
  const int fd = p.fd.Release();
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  pending_.erase(it);
  Adopt(fd, peer);
}

void TcpTransport::Adopt(int fd, int peer) {
  Link& l = link(peer);
  TuneSocket(fd);
  const size_t bytes = slot_bytes_ * static_cast<size_t>(depth_);
  l.send_slots = std::make_unique<std::byte[]>(bytes);
  l.recv_slots = std::make_unique<std::byte[]>(bytes);
  std::memset(l.send_slots.get(), 0, bytes);  // first touch now, not mid-call
  std::memset(l.recv_slots.get(), 0, bytes);
  {
    std::lock_guard<std::mutex> lock(l.send_mu);
    l.fd = fd;
  }
  Interest(peer, false);
  l.ready.store(true, std::memory_order_release);
  doorbell().Ring();
  Read(peer);  // the peer may have sent frames right behind its handshake
}

void TcpTransport::KillLink(int peer, const std::string& why) {
  Link& l = link(peer);
  if (l.dead.load(std::memory_order_relaxed)) return;
  l.death = why;
  {
    std::scoped_lock lock(l.recv_mu, l.send_mu);
    if (l.fd >= 0) {
      if (l.events != 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.fd, nullptr);
      l.events = 0;
      close(l.fd);
      l.fd = -1;
    }
  }
  l.dead.store(true, std::memory_order_release);
  doorbell().Ring();
}

TcpTransport::ReadOutcome TcpTransport::ReadLocked(int peer, std::string* why) {
  Link& l = link(peer);
  for (;;) {
    if (l.fd < 0) return ReadOutcome::kBlocked;
    if (!l.in_payload) {
      const ssize_t n = recv(l.fd, l.in_header + l.in_header_bytes,
                             kFrameHeaderBytes - l.in_header_bytes, MSG_DONTWAIT);
      if (n == 0) return ReadOutcome::kClosed;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
        *why = "lost its connection (" + Errno("recv") + ")";
        return ReadOutcome::kBroken;
      }
      l.in_header_bytes += static_cast<size_t>(n);
      if (l.in_header_bytes < kFrameHeaderBytes) continue;
      l.in_header_bytes = 0;
      const Status s = tcp::DecodeFrameHeader(l.in_header, {comm_id_, l.recv_sequence, slot_bytes_},
                                              &l.in_frame);
      if (!s.ok()) {
        *why = "sent a bad frame (" + s.message() + ")";
        return ReadOutcome::kBadFrame;
      }
      ++l.recv_sequence;
      l.in_payload = true;
      l.in_payload_bytes = 0;
      l.control_in.clear();
    }
    const FrameHeader& h = l.in_frame;
    std::byte* target;
    const uint64_t received = l.received.load(std::memory_order_relaxed);
    if (h.type == FrameType::kData) {
      if (received - l.released.load(std::memory_order_seq_cst) >= static_cast<uint64_t>(depth_)) {
        return ReadOutcome::kFull;
      }
      target = l.recv_slots.get() + (received % static_cast<uint64_t>(depth_)) * slot_bytes_;
    } else {
      l.control_in.resize(h.length);
      target = reinterpret_cast<std::byte*>(l.control_in.data());
    }
    while (l.in_payload_bytes < h.length) {
      const ssize_t n =
          recv(l.fd, target + l.in_payload_bytes, h.length - l.in_payload_bytes, MSG_DONTWAIT);
      if (n == 0) return ReadOutcome::kClosed;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
        *why = "lost its connection (" + Errno("recv") + ")";
        return ReadOutcome::kBroken;
      }
      l.in_payload_bytes += static_cast<size_t>(n);
    }
    l.in_payload = false;
    if (h.type == FrameType::kData) {
      l.arrived[received % static_cast<uint64_t>(depth_)] = h;
      l.received.store(received + 1, std::memory_order_release);
      doorbell().Ring();
    } else {
      OnControl(peer, h, l.control_in);
    }
  }
}

void TcpTransport::Read(int peer) {
  Link& l = link(peer);
  std::string why;
  ReadOutcome outcome;
  {
    std::lock_guard<std::mutex> lock(l.recv_mu);
    outcome = ReadLocked(peer, &why);
    if (!l.broken.empty() && outcome == ReadOutcome::kBlocked) {
      why = l.broken;  // the rank thread met it first
      outcome = ReadOutcome::kBroken;
    }
  }
  switch (outcome) {
    case ReadOutcome::kBlocked:
      return;
    case ReadOutcome::kFull:
      // Every slot is full: stop reading until the rank releases one (TCP holds the rest).
      // Paused before the re-check, so a release in between is not missed (Release wakes this
      // thread when it sees paused).
      l.paused.store(true, std::memory_order_seq_cst);
      if (l.received.load(std::memory_order_relaxed) - l.released.load(std::memory_order_seq_cst) <
          static_cast<uint64_t>(depth_)) {
        l.paused.store(false, std::memory_order_relaxed);
        return Read(peer);
      }
      Interest(peer, (l.events & EPOLLOUT) != 0);
      return;
    case ReadOutcome::kClosed:
      return KillLink(peer, "closed its connection (exited?)");
    case ReadOutcome::kBroken:
      return KillLink(peer, why);
    case ReadOutcome::kBadFrame:
      KillLink(peer, why);
      Fail(Internal("tcp: rank " + std::to_string(peer) + " " + why));
      return;
  }
}

void TcpTransport::ReadFromRank(int peer) {
  // The rank reads for itself while it polls: no hand-off through the progress thread on the
  // path of a small message. Anything but data or "nothing yet" is left to the progress thread.
  Link& l = link(peer);
  std::unique_lock<std::mutex> lock(l.recv_mu, std::try_to_lock);
  if (!lock.owns_lock() || !l.broken.empty()) return;
  std::string why;
  switch (ReadLocked(peer, &why)) {
    case ReadOutcome::kBlocked:
    case ReadOutcome::kFull:
      return;
    case ReadOutcome::kClosed:
      l.broken = "closed its connection (exited?)";
      break;
    case ReadOutcome::kBroken:
      l.broken = why;
      break;
    case ReadOutcome::kBadFrame:
      l.broken = why;
      lock.unlock();
      Fail(Internal("tcp: rank " + std::to_string(peer) + " " + why));
      break;
  }
  l.has_broken.store(true, std::memory_order_release);
  Wake();
}

void TcpTransport::OnControl(int peer, const FrameHeader& h, const std::string& payload) {
  if (h.type == FrameType::kReject) {
    control_.Reject(peer, h.tag.call_index, payload);
    doorbell().Ring();
    return;
  }
  // kFail: record the first failure and pass it on, so it floods the connected ranks.
  if (control_.failed() || payload.size() < 4) return;
  const auto code = static_cast<StatusCode>(static_cast<uint8_t>(payload[3]));
  const Status status(code == StatusCode::kOk ? StatusCode::kAborted : code, payload.substr(4));
  control_.Fail(status);
  doorbell().Ring();
  for (int other = 0; other < size(); ++other) {
    if (other != rank_ && other != peer && link(other).ready.load(std::memory_order_relaxed)) {
      QueueControl(other, FrameType::kFail, 0, payload);
    }
  }
}

// ---------------------------------------------------------------- setup

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

}  // namespace

Result<std::unique_ptr<Transport>> ConnectTcp(Store& store, const TcpConfig& config) {
  const ConnectConfig& c = config.connect;
  std::string published;
  auto listener = Listen(config.listen_address, &published);
  if (!listener.ok()) return listener.status();
  CHORUS_RETURN_IF_ERROR(store.Set("tcp/addr/" + std::to_string(c.rank), published));

  uint64_t comm_id = 0;
  if (c.rank == 0) {
    while (comm_id == 0) {
      if (getrandom(&comm_id, sizeof(comm_id), 0) != sizeof(comm_id)) {
        return Internal("tcp: " + Errno("getrandom"));
      }
    }
    CHORUS_RETURN_IF_ERROR(store.Set("tcp/id", Hex64(comm_id)));
  } else {
    auto id = store.Get("tcp/id", Remaining(c.deadline));
    if (!id.ok()) return id.status();
    comm_id = std::strtoull(id->c_str(), nullptr, 16);
  }
  std::vector<Address> addresses;
  for (int r = 0; r < c.size; ++r) {
    auto text = store.Get("tcp/addr/" + std::to_string(r), Remaining(c.deadline));
    if (!text.ok()) return text.status();
    auto address = ParseAddress(*text);
    if (!address.ok()) return address.status();
    addresses.push_back(std::move(address).value());
  }

  std::unique_ptr<void, decltype(&std::free)> memory(std::aligned_alloc(64, Control::Bytes(c.size)),
                                                     &std::free);
  if (!memory) return Internal("tcp: out of memory for the control block");
  Control* control = Control::Create(memory.get(), c.size);
  return std::unique_ptr<Transport>(
      std::make_unique<TcpTransport>(std::move(memory), *control, config,
                                     std::move(listener).value(), std::move(addresses), comm_id));
}

}  // namespace chorus::internal
