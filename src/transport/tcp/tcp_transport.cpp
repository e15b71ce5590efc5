// TCP transport (see tcp_transport.h for the design).
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
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

#include "base/check.h"
#include "base/errno_text.h"
#include "base/log_limit.h"
#include "base/pages.h"
#include "base/unique_fd.h"
#include "transport/control.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/wire.h"

namespace chorus::internal {
namespace {

using tcp::FrameHeader;
using tcp::FrameType;
using tcp::kFrameHeaderBytes;

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
// How long a closing rank keeps finishing handshakes, writing what it queued (a kFail above
// all) and waiting for its peers to take it.
constexpr std::chrono::milliseconds kLastFlush{500};
// Up to kTcpDialAllUpTo ranks, each rank dials all its higher peers as soon as its transport
// starts, not at their first message: a census (Census) can then ask every peer, a lower one
// too (only the lower rank of a pair dials), even one stopped before its first call. Each link
// holds 2 x depth x slot_bytes of staging (8 MiB by default), which a one-shot all-reduce or an
// all-to-all would connect anyway. Above that size links are made as calls need them, and a
// census may find a lower rank it cannot ask.
std::atomic<int> dial_all_up_to{kTcpDialAllUpTo};

std::string Errno(const char* what) { return std::string(what) + ": " + ErrnoText(errno); }

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

// A frame on its way out: header bytes, then payload bytes from a slot or from `owned`. It
// stays where it was made (`payload` may point into `owned`, whose short-string characters
// would move with it).
struct Outgoing {
  Outgoing() = default;
  Outgoing(const Outgoing&) = delete;
  Outgoing& operator=(const Outgoing&) = delete;
  uint8_t header[kFrameHeaderBytes];
  const std::byte* payload = nullptr;
  size_t payload_bytes = 0;
  size_t done = 0;  // bytes of header + payload (+ tag) written
  bool data = false;
  std::string owned;  // a control frame's payload
  uint8_t tag[tcp::kTagBytes];
  size_t tag_bytes = 0;  // kTagBytes when the link protects its frames (wire.h)
  size_t total() const { return kFrameHeaderBytes + payload_bytes + tag_bytes; }
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

  TouchedPages send_slots;
  TouchedPages recv_slots;

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
  bool broken_frame = false;  // ... and it was a frame that failed its check (under recv_mu)
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
  uint8_t in_tag[tcp::kTagBytes];
  size_t in_tag_bytes = 0;

  // Frame protection (CommOptions::wire), one seal per direction: null under kAuthenticate.
  std::unique_ptr<tcp::WireSeal> send_seal;  // under send_mu
  std::unique_ptr<tcp::WireSeal> recv_seal;  // under recv_mu

  // The peer's answer to this rank's last census probe (kProbeReply), written by whichever
  // thread read it, before `answered` is set to the probed call + 1.
  std::atomic<uint64_t> answered{0};
  std::atomic<uint64_t> reply_started{0};
  std::atomic<int64_t> reply_active{-1};
  std::atomic<int32_t> reply_waiting_for{-1};
  std::atomic<int64_t> reply_idle_ms{-1};
  std::atomic<bool> reply_failed{false};
  // The call the peer showed in that answer: whole, or not at all.
  std::mutex reply_call_mu;
  bool reply_has_call = false;  // under reply_call_mu
  CallTag reply_call;           // under reply_call_mu
};

// An accepted or dialed connection that has not finished its handshake.
struct Pending {
  UniqueFd fd;
  int peer = -1;  // dialed: the peer; accepted: unknown until the claim is read
  int claimed = -1;  // accepted: the peer rank its claim names, once read
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
  bool DiedUnheard(int peer) const override {
    const Link& l = *links_[Index(peer)];
    return l.dead.load(std::memory_order_acquire) && !l.ready.load(std::memory_order_acquire);
  }

  void Fail(const Status& status) override;
  void Reject(uint64_t call_index, const std::string& reason) override;
  Doorbell& doorbell() override { return bell_ != nullptr ? *bell_ : control_.bell(rank_); }
  bool PeerActive(int, uint64_t) const override { return false; }
  Beacon& beacon() override { return beacon_ != nullptr ? *beacon_ : control_.beacon(rank_); }
  // Asks every peer's progress thread (kProbe) and waits for the answers until `until`.
  std::vector<PeerState> Census(uint64_t call_index, Deadline until) override;
  // Asks the peers whose links are up, and reads the answers to the last question.
  std::vector<PeerState> Glance(uint64_t call_index) override;

 private:
  static size_t Index(int peer) { return static_cast<size_t>(peer); }
  Link& link(int peer) { return *links_[Index(peer)]; }
  bool Usable(int peer);  // ready, or asks for the connection
  void Wake();

  // Both threads: writes what is queued on `l` (under send_mu) until the socket is full. The
  // newest posted frame's payload comes from `newest_from` if given (the caller's memory).
  Flush FlushLocked(Link& l, const std::byte* newest_from = nullptr);
  // Under send_mu: makes the next control frame, or the next posted data frame, l.current.
  void StartControlFrame(Link& l);
  void StartDataFrame(Link& l, const std::byte* newest_from);
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
  // Accepted connections that have not claimed a peer yet.
  size_t Strangers() const;
  void PushOutStranger();
  void DropOldest(bool (*which)(const Pending& p, int claimed), int claimed, const char* why);
  // Checks an acceptor's claim as soon as it is read: a claim for this communicator from a
  // lower rank not yet connected keeps its place; anything else is dropped at once.
  bool Claimed(uint64_t id, Pending& p);
  // accept() or socket() found no descriptor: pause accepting, and give up when it lasts.
  void OutOfDescriptors(const std::string& what);
  // Progress thread, at the end, for at most kLastFlush in all: a rank that failed finishes
  // the handshakes under way (so that those peers get its kFail too), writes what is queued,
  // and waits until its peers have it before the sockets close.
  void CloseGracefully();
  void FinishHandshakes(Clock::time_point until);
  void Dispatch(const epoll_event& event);
  void FlushBeforeClosing(Clock::time_point until);
  void Linger(Clock::time_point until);
  enum class ReadOutcome { kBlocked, kFull, kClosed, kBroken, kBadFrame };
  // Either thread, under recv_mu: reads frames until the socket is empty, the slots are full or
  // the connection breaks (`why` says how).
  ReadOutcome ReadLocked(int peer, std::string* why);
  void Read(int peer);          // progress thread
  void ReadFromRank(int peer);  // rank thread
  void OnControl(int peer, const FrameHeader& h, const std::string& payload);
  // The group's failure for a frame from `peer` that failed validation.
  Status BadFrame(int peer, const std::string& why) const;
  // This rank's own entry of a census.
  PeerState OwnState();
  // The answers about `call_index` the askable peers gave so far, into `states`.
  template <typename Askable>
  void ReadAnswers(uint64_t call_index, Askable&& askable, std::vector<PeerState>* states);
  void KillLink(int peer, const std::string& why);
  // KillLink for a link this rank gives up while the peer still sends (a bad frame): what is
  // queued for the peer (the group's failure) is written first, then the socket says it is
  // done writing, drops what comes in, and is closed once the peer has taken every byte, or at
  // `until`. Closed at once with unread input, it would reset the connection, and the reset
  // throws away what the peer has not yet taken: the failure, whose reason it needs. Blocks
  // the progress thread until then, on a failure path only.
  void RetireLink(int peer, const std::string& why, Clock::time_point until);
  static constexpr std::chrono::milliseconds kRetireFor{1000};
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
  Beacon* const beacon_;
  const tcp::WireCipher cipher_;
  UniqueFd listener_;
  UniqueFd wake_;
  UniqueFd epoll_;
  std::vector<std::unique_ptr<Link>> links_;
  std::map<uint64_t, Pending> pending_;  // progress thread; ids grow, so oldest first
  uint64_t next_pending_ = 0;
  LogLimiter log_;                                      // progress thread
  std::optional<Clock::time_point> accept_paused_until_;  // progress thread
  std::optional<Clock::time_point> short_of_descriptors_since_;
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
      beacon_(config.beacon),
      cipher_(config.cipher),
      listener_(std::move(listener)),
      wake_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      epoll_(epoll_create1(EPOLL_CLOEXEC)),
      log_("chorus tcp rank " + std::to_string(config.connect.rank)) {
  for (Address& a : addresses) {
    links_.push_back(std::make_unique<Link>());
    links_.back()->address = std::move(a);
  }
  Watch(listener_.get(), static_cast<uint64_t>(Source::kListener), EPOLLIN, true);
  Watch(wake_.get(), static_cast<uint64_t>(Source::kWake), EPOLLIN, true);
  if (size() <= dial_all_up_to.load(std::memory_order_relaxed) && rank_ + 1 < size()) {
    for (int peer = rank_ + 1; peer < size(); ++peer) {
      link(peer).wanted.store(true, std::memory_order_relaxed);
    }
    Wake();  // the progress thread's first wait ends at once and dials them
  }
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
    const size_t done = std::min(
        bytes, l.current->done > kFrameHeaderBytes ? l.current->done - kFrameHeaderBytes : 0);
    if (done < bytes) std::memcpy(slot + done, caller + done, bytes - done);
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

void TcpTransport::StartControlFrame(Link& l) {
  ControlFrame& c = l.control_out.front();
  Outgoing& out = l.current.emplace();  // in place: `payload` will point into `owned`
  FrameHeader h;
  h.type = c.type;
  h.comm_id = comm_id_;
  h.sequence = l.send_sequence++;  // the frame's place on the wire, known only now
  h.tag.call_index = c.call_index;
  h.length = c.payload.size();
  tcp::EncodeFrameHeader(h, out.header);
  out.owned = std::move(c.payload);
  l.control_out.pop_front();
  out.payload = reinterpret_cast<const std::byte*>(out.owned.data());
  out.payload_bytes = out.owned.size();
  if (l.send_seal) {
    auto* text = reinterpret_cast<std::byte*>(out.owned.data());
    l.send_seal->Seal(h.sequence, out.header, text, text, out.payload_bytes, out.tag);
    out.tag_bytes = tcp::kTagBytes;
  }
}

void TcpTransport::StartDataFrame(Link& l, const std::byte* newest_from) {
  Outgoing& out = l.current.emplace();
  const uint64_t index = l.data_started % static_cast<uint64_t>(depth_);
  const PostedMessage& pm = l.posted_messages[index];
  const uint64_t sequence = l.send_sequence++;
  tcp::EncodeFrameHeader({FrameType::kData, comm_id_, sequence, pm.tag, pm.bytes}, out.header);
  const bool newest = l.data_started + 1 == l.posted.load(std::memory_order_relaxed);
  std::byte* slot = l.send_slots.get() + index * slot_bytes_;
  out.payload = newest && newest_from != nullptr ? newest_from : slot;
  out.payload_bytes = pm.bytes;
  out.data = true;
  if (l.send_seal) {
    // Sealed now, while the caller's memory (if that is the source) is still valid; an
    // encrypted payload goes out of the slot, which then holds the ciphertext.
    const bool encrypt = l.send_seal->cipher() != tcp::WireCipher::kPoly1305;
    l.send_seal->Seal(sequence, out.header, out.payload, encrypt ? slot : nullptr,
                      out.payload_bytes, out.tag);
    if (encrypt) out.payload = slot;
    out.tag_bytes = tcp::kTagBytes;
  }
  ++l.data_started;
}

Flush TcpTransport::FlushLocked(Link& l, const std::byte* newest_from) {
  while (l.fd >= 0) {
    if (!l.current) {
      if (!l.control_out.empty()) {
        StartControlFrame(l);
      } else if (l.data_started < l.posted.load(std::memory_order_acquire)) {
        StartDataFrame(l, newest_from);
      } else {
        return Flush::kDone;
      }
    }
    Outgoing& out = *l.current;
    iovec iov[3];
    int count = 0;
    if (out.done < kFrameHeaderBytes) {
      iov[count++] = {out.header + out.done, kFrameHeaderBytes - out.done};
    }
    const size_t payload_done =
        std::min(out.payload_bytes, out.done > kFrameHeaderBytes ? out.done - kFrameHeaderBytes : 0);
    if (payload_done < out.payload_bytes) {
      iov[count++] = {const_cast<std::byte*>(out.payload + payload_done),
                      out.payload_bytes - payload_done};
    }
    const size_t tag_done = out.done > kFrameHeaderBytes + out.payload_bytes
                                ? out.done - kFrameHeaderBytes - out.payload_bytes
                                : 0;
    if (tag_done < out.tag_bytes) iov[count++] = {out.tag + tag_done, out.tag_bytes - tag_done};
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
  control_.Fail(status);  // seq_cst, against Adopt's check of it (see there)
  doorbell().Ring();
  // Only ranks that are connected need telling: the others learn it from their neighbours, or
  // at their own next wait on this rank.
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank_ && link(peer).ready.load(std::memory_order_seq_cst)) {
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

PeerState TcpTransport::OwnState() {
  PeerState me;
  me.started = control_.started(rank_);
  me.active = control_.active(rank_);
  const Beacon& b = beacon();
  me.waiting_for = b.waiting_for.load(std::memory_order_relaxed) - 1;
  const int64_t beat = b.beat_ns.load(std::memory_order_relaxed);
  if (beat != 0) {
    me.idle_seconds = std::max(
        0.0, std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(beat))
                 .count());
  }
  me.has_call = ReadCall(b, &me.call);
  return me;
}

std::vector<PeerState> TcpTransport::Census(uint64_t call_index, Deadline until) {
  std::vector<PeerState> states(static_cast<size_t>(size()));
  states[Index(rank_)] = OwnState();
  // Only the lower rank of a pair dials, so a lower peer not connected yet cannot be asked (up
  // to kTcpDialAllUpTo ranks, it dialled at the start); a higher one is dialled now (a stopped
  // process accepts in the kernel but never answers).
  auto askable = [&](int peer) {
    const Link& l = link(peer);
    return peer != rank_ && !l.dead.load(std::memory_order_acquire) &&
           (peer > rank_ || l.ready.load(std::memory_order_acquire));
  };
  for (int peer = 0; peer < size(); ++peer) {
    if (!askable(peer)) continue;
    link(peer).wanted.store(true, std::memory_order_release);
    QueueControl(peer, FrameType::kProbe, call_index, "");
  }
  Wake();
  auto all_answered = [&] {
    for (int peer = 0; peer < size(); ++peer) {
      if (askable(peer) && link(peer).answered.load(std::memory_order_acquire) != call_index + 1) {
        return false;
      }
    }
    return true;
  };
  while (!all_answered() && Clock::now() < until) {
    doorbell().Sleep(all_answered, std::min(until, Clock::now() + std::chrono::milliseconds(10)));
  }
  ReadAnswers(call_index, askable, &states);
  return states;
}

std::vector<PeerState> TcpTransport::Glance(uint64_t call_index) {
  std::vector<PeerState> states(static_cast<size_t>(size()));
  states[Index(rank_)] = OwnState();
  auto askable = [&](int peer) {
    const Link& l = link(peer);
    return peer != rank_ && !l.dead.load(std::memory_order_acquire) &&
           l.ready.load(std::memory_order_acquire);
  };
  ReadAnswers(call_index, askable, &states);
  for (int peer = 0; peer < size(); ++peer) {
    if (askable(peer)) QueueControl(peer, FrameType::kProbe, call_index, "");
  }
  Wake();
  return states;
}

template <typename Askable>
void TcpTransport::ReadAnswers(uint64_t call_index, Askable&& askable,
                               std::vector<PeerState>* states) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    Link& l = link(peer);
    PeerState& s = (*states)[Index(peer)];
    if (l.dead.load(std::memory_order_acquire)) {
      s.alive = false;
    } else if (!askable(peer)) {
      s.known = false;
    } else if (l.answered.load(std::memory_order_acquire) != call_index + 1) {
      s.answered = false;
    } else {
      s.started = l.reply_started.load(std::memory_order_relaxed);
      s.active = l.reply_active.load(std::memory_order_relaxed);
      s.waiting_for = l.reply_waiting_for.load(std::memory_order_relaxed);
      const int64_t idle = l.reply_idle_ms.load(std::memory_order_relaxed);
      s.idle_seconds = idle < 0 ? -1.0 : static_cast<double>(idle) / 1000;
      s.failed = l.reply_failed.load(std::memory_order_relaxed);
      std::lock_guard lock(l.reply_call_mu);
      s.has_call = l.reply_has_call;
      s.call = l.reply_call;
    }
  }
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
    if (accept_paused_until_) wake_at = std::min(wake_at, *accept_paused_until_);
    if (const auto flush = log_.NextFlush()) wake_at = std::min(wake_at, *flush);
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(wake_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
    }
    const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) Dispatch(events[i]);
    const Clock::time_point now = Clock::now();
    std::vector<uint64_t> expired;
    for (const auto& [id, p] : pending_) {
      if (now >= p.deadline) expired.push_back(id);
    }
    for (uint64_t id : expired) Drop(id, "did not finish its handshake in time");
    if (accept_paused_until_ && now >= *accept_paused_until_) {
      accept_paused_until_.reset();
      Watch(listener_.get(), static_cast<uint64_t>(Source::kListener), EPOLLIN, true);
      Accept();
    }
    log_.Flush(now);
    poll_soon = ServiceLinks();
  }
  CloseGracefully();
}

// A rank that fails and returns at once must not leave its peers with only its hang-up: the
// kFail naming the cause goes out first, to every peer it can reach.
void TcpTransport::CloseGracefully() {
  const Clock::time_point until = Clock::now() + kLastFlush;
  if (control_.failed()) FinishHandshakes(until);
  FlushBeforeClosing(until);
  Linger(until);
}

// A peer whose link is still in its handshake (or still queued on the listener) would
// otherwise see only a reset, and, if no other link of its own reaches a rank that knows, wait
// for its deadline. Adopt() queues the kFail on each link it completes. Strangers are handled
// as always, and can hold this up no longer than `until`.
void TcpTransport::FinishHandshakes(Clock::time_point until) {
  Accept();
  epoll_event events[64];
  while (!pending_.empty()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    const int n =
        epoll_wait(epoll_.get(), events, 64, static_cast<int>(std::min<int64_t>(left, 10)));
    for (int i = 0; i < n; ++i) {
      Dispatch(events[i]);
      // Loop() flushes every link after its events; here only the ones that became writable
      // (the level would wake this loop again and again otherwise), and nothing is dialled.
      const uint64_t id = events[i].data.u64;
      if (id >= kLinkBase && id < kPendingBase && (events[i].events & EPOLLOUT)) {
        const int peer = static_cast<int>(id - kLinkBase);
        if (link(peer).dead.load(std::memory_order_relaxed)) continue;
        Flush result;
        {
          std::lock_guard<std::mutex> lock(link(peer).send_mu);
          result = FlushLocked(link(peer));
        }
        Interest(peer, result == Flush::kBlocked);
      }
    }
  }
}

// One epoll event: a connection to accept, the wake-up, a handshake's step, or a link's input.
// A link's output is flushed by the caller.
void TcpTransport::Dispatch(const epoll_event& event) {
  const uint64_t id = event.data.u64;
  if (id == static_cast<uint64_t>(Source::kListener)) {
    Accept();
  } else if (id == static_cast<uint64_t>(Source::kWake)) {
    uint64_t count;
    [[maybe_unused]] ssize_t r = read(wake_.get(), &count, sizeof(count));
  } else if (id >= kPendingBase) {
    Advance(id, event.events);
  } else if (event.events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) {
    Read(static_cast<int>(id - kLinkBase));
  }
}

void TcpTransport::FlushBeforeClosing(Clock::time_point until) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    Link& l = link(peer);
    if (!l.ready.load(std::memory_order_acquire) || l.dead.load(std::memory_order_acquire)) {
      continue;
    }
    for (;;) {
      Flush result;
      {
        std::lock_guard<std::mutex> lock(l.send_mu);
        result = FlushLocked(l);
      }
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (result != Flush::kBlocked || left <= 0) break;
      pollfd writable{.fd = l.fd, .events = POLLOUT, .revents = 0};
      if (poll(&writable, 1, static_cast<int>(left)) <= 0) break;
    }
  }
}

// A socket closed with unread input resets its connection, and a reset throws away what the
// peer has not yet been sent: its kFail, say. So each link says it is done writing, drops what
// still comes in, and is closed only when the peer has acknowledged every byte written to it.
namespace {

// Drops what `fd` has to read; true when the peer has closed it (or it broke).
bool DrainedToTheEnd(int fd) {
  char scratch[4096];
  ssize_t n;
  do {
    n = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
  } while (n > 0);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

// Drops what `fd` has to read. True once the peer has closed it or has acknowledged every byte
// written to it: then closing it resets nothing the peer still needs.
bool DrainedAndAcknowledged(int fd) {
  int unacknowledged = 0;
  return DrainedToTheEnd(fd) || (ioctl(fd, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0);
}

}  // namespace

void TcpTransport::Linger(Clock::time_point until) {
  std::vector<pollfd> open;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || link(peer).fd < 0) continue;
    shutdown(link(peer).fd, SHUT_WR);
    open.push_back({.fd = link(peer).fd, .events = POLLIN, .revents = 0});
  }
  while (!open.empty()) {
    for (size_t i = 0; i < open.size();) {
      if (DrainedAndAcknowledged(open[i].fd)) {
        open[i] = open.back();
        open.pop_back();
      } else {
        ++i;
      }
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (open.empty() || left <= 0) return;
    poll(open.data(), open.size(), static_cast<int>(std::min<int64_t>(left, 5)));
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
      std::sscanf(claim.c_str() + expected_head.size(), "%d %d", &from, &to) != 2 ||
      to != rank_ || from < 0 || from >= rank_ ||
      link(from).ready.load(std::memory_order_relaxed) ||
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
      Drop(id, p.peer >= 0 ? "closed the connection during the handshake (it exited, or it has a different secret)"
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

void TcpTransport::RetireLink(int peer, const std::string& why, Clock::time_point until) {
  Link& l = link(peer);
  {
    std::lock_guard<std::mutex> lock(l.recv_mu);
    if (l.broken.empty()) l.broken = why;  // the rank thread reads no more from it
  }
  const auto left_ms = [&] {
    return std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  };
  for (;;) {
    Flush result;
    int fd;
    {
      std::lock_guard<std::mutex> lock(l.send_mu);
      fd = l.fd;
      if (fd < 0) return KillLink(peer, why);
      result = FlushLocked(l);
    }
    if (result != Flush::kBlocked || left_ms() <= 0) break;
    // Blocked: the path may be full because nobody reads what the peer sends us; drain it.
    if (DrainedToTheEnd(fd)) break;  // closed by the peer: nothing more to write
    pollfd writable{.fd = fd, .events = POLLOUT, .revents = 0};
    poll(&writable, 1, static_cast<int>(std::min<int64_t>(left_ms(), 5)));
  }
  const int fd = l.fd;  // only this thread closes it (KillLink)
  shutdown(fd, SHUT_WR);
  while (!DrainedAndAcknowledged(fd) && left_ms() > 0) {
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    poll(&readable, 1, static_cast<int>(std::min<int64_t>(left_ms(), 5)));
  }
  KillLink(peer, why);
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
    if (l.recv_seal) {
      while (l.in_tag_bytes < tcp::kTagBytes) {
        const ssize_t n =
            recv(l.fd, l.in_tag + l.in_tag_bytes, tcp::kTagBytes - l.in_tag_bytes, MSG_DONTWAIT);
        if (n == 0) return ReadOutcome::kClosed;
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
          *why = "lost its connection (" + Errno("recv") + ")";
          return ReadOutcome::kBroken;
        }
        l.in_tag_bytes += static_cast<size_t>(n);
      }
      l.in_tag_bytes = 0;
      // l.in_header still holds this frame's header bytes: the next header is read only now.
      if (!l.recv_seal->Open(h.sequence, l.in_header, target, h.length, l.in_tag)) {
        *why = "frame " + std::to_string(h.sequence) +
               " fails its integrity check (changed on the way, or not sent by that rank)";
        return ReadOutcome::kBadFrame;
      }
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
      outcome = l.broken_frame ? ReadOutcome::kBadFrame : ReadOutcome::kBroken;
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
      // The group's failure goes out first, on this link too (through whatever sits on the
      // path), so that the sender learns why; then the link is closed.
      Fail(BadFrame(peer, why));
      return RetireLink(peer, why, Clock::now() + kRetireFor);
  }
}

Status TcpTransport::BadFrame(int peer, const std::string& why) const {
  const std::string what =
      "tcp: rank " + std::to_string(rank_) + " got from rank " + std::to_string(peer) + ": " + why;
  // A frame that fails its check was changed on the way: the link cannot be trusted, which is
  // not a bug in chorus.
  return why.find("integrity") != std::string::npos ? Unavailable(what) : Internal(what);
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
      l.broken_frame = true;  // the progress thread sends the failure before it closes the link
      lock.unlock();
      Fail(BadFrame(peer, why));
      break;
  }
  l.has_broken.store(true, std::memory_order_release);
  Wake();
}

void TcpTransport::OnControl(int peer, const FrameHeader& h, const std::string& payload) {
  if (h.type == FrameType::kProbe) {
    // Answered by whichever thread reads it, so a rank busy outside chorus still answers.
    const PeerState me = OwnState();
    std::string reply = std::to_string(me.started) + " " + std::to_string(me.active) + " " +
                        std::to_string(me.waiting_for) + " " +
                        std::to_string(static_cast<int64_t>(me.idle_seconds * 1000)) +
                        (control_.failed() ? " 1" : " 0");
    if (me.has_call) {  // the call it is in, as Beacon::call's words
      uint64_t words[Beacon::kCallWords];
      PackTag(me.call, words);
      for (uint64_t w : words) reply += " " + std::to_string(w);
    }
    QueueControl(peer, FrameType::kProbeReply, h.tag.call_index, reply);
    Wake();
    return;
  }
  if (h.type == FrameType::kProbeReply) {
    Link& l = link(peer);
    unsigned long long started = 0;
    long long active = -1;
    int waiting_for = -1;
    long long idle_ms = -1;
    int failed = 0;
    unsigned long long words[Beacon::kCallWords] = {};
    const int fields =
        std::sscanf(payload.c_str(), "%llu %lld %d %lld %d %llu %llu %llu %llu", &started, &active,
                    &waiting_for, &idle_ms, &failed, &words[0], &words[1], &words[2], &words[3]);
    if (fields != 5 && fields != 5 + Beacon::kCallWords) {
      return;  // an authenticated peer of another version: no verdict from it
    }
    {
      std::lock_guard lock(l.reply_call_mu);
      uint64_t call[Beacon::kCallWords];
      std::copy(std::begin(words), std::end(words), call);
      l.reply_has_call = fields == 5 + Beacon::kCallWords && UnpackTag(call, &l.reply_call);
    }
    l.reply_started.store(started, std::memory_order_relaxed);
    l.reply_active.store(active, std::memory_order_relaxed);
    l.reply_waiting_for.store(waiting_for, std::memory_order_relaxed);
    l.reply_idle_ms.store(idle_ms, std::memory_order_relaxed);
    l.reply_failed.store(failed != 0, std::memory_order_relaxed);
    l.answered.store(h.tag.call_index + 1, std::memory_order_release);
    doorbell().Ring();
    return;
  }
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

void SetTcpDialAllUpToForTesting(int ranks) {
  dial_all_up_to.store(ranks, std::memory_order_relaxed);
}

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
