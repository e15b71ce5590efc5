// TCP transport (see tcp_transport.h for the design): the Transport calls, the census, the
// progress loop, closing, and setup. The links are link.cpp's, the connector connector.cpp's
// (see tcp_transport_internal.h).
#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "transport/tcp/tcp_transport_internal.h"

namespace chorus::internal {
namespace {

using tcp::Address;
using tcp::Hex64;
using tcp::Listen;
using tcp::ParseAddress;
using tcp::TcpTransport;

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

}  // namespace

namespace tcp {

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

void TcpTransport::Fail(const Status& status) {
  {
    // Two threads may fail at once (the rank thread and the progress thread both meet a bad
    // frame): the one that loses waits here until the winner's frames are queued, because it
    // goes on to retire the link, and a frame queued after that would never leave.
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (control_.failed()) return;
    control_.Fail(status);  // seq_cst, against Adopt's check of it (see there)
    doorbell().Ring();
    // Only ranks that are connected need telling: the others learn it from their neighbours,
    // or at their own next wait on this rank.
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank_ && link(peer).ready.load(std::memory_order_seq_cst)) {
        QueueControl(peer, FrameType::kFail, 0, FailPayload(status));
      }
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
    return peer != rank_ && !l.gone() && (peer > rank_ || l.ready.load(std::memory_order_acquire));
  };
  // Only answers to this census count: one given earlier in the call (to a glance) may be from
  // before the peer stopped, and would show it waiting.
  std::vector<uint64_t> asked(static_cast<size_t>(size()));
  for (int peer = 0; peer < size(); ++peer) {
    if (!askable(peer)) continue;
    asked[Index(peer)] = link(peer).replies.load(std::memory_order_acquire);
    link(peer).wanted.store(true, std::memory_order_release);
    QueueControl(peer, FrameType::kProbe, call_index, "");
  }
  Wake();
  auto all_answered = [&] {
    for (int peer = 0; peer < size(); ++peer) {
      if (askable(peer) && !link(peer).AnsweredAfter(call_index, asked[Index(peer)])) return false;
    }
    return true;
  };
  for (Clock::time_point now = Clock::now(); !all_answered() && now < until; now = Clock::now()) {
    beacon().Beat(now);  // alive, and asking: peers' censuses must not find this rank idle
    doorbell().Sleep(all_answered, std::min(until, now + std::chrono::milliseconds(10)));
  }
  ReadAnswers(call_index, askable, &states, &asked);
  return states;
}

std::vector<PeerState> TcpTransport::Glance(uint64_t call_index) {
  std::vector<PeerState> states(static_cast<size_t>(size()));
  states[Index(rank_)] = OwnState();
  auto askable = [&](int peer) {
    const Link& l = link(peer);
    return peer != rank_ && !l.gone() && l.ready.load(std::memory_order_acquire);
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
                               std::vector<PeerState>* states, const std::vector<uint64_t>* asked) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    Link& l = link(peer);
    PeerState& s = (*states)[Index(peer)];
    if (l.gone()) {
      s.alive = false;
    } else if (!askable(peer)) {
      s.known = false;
    } else if (!l.AnsweredAfter(call_index, asked != nullptr ? (*asked)[Index(peer)] : 0)) {
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
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      if (result != Flush::kBlocked || left <= 0) break;
      pollfd writable{.fd = l.fd, .events = POLLOUT, .revents = 0};
      if (poll(&writable, 1, static_cast<int>(left)) <= 0) break;
    }
  }
}

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
    std::string send_error;
    {
      std::lock_guard<std::mutex> lock(l.send_mu);
      result = FlushLocked(l);
      if (result == Flush::kError) send_error = l.send_error;
    }
    if (result == Flush::kError) {
      // A peer that hung up, perhaps after its last message of a call (it exited), may have
      // sent what is still to be read: the link dies at the end of it (or stays paused until
      // the rank has taken its slots). It sends nothing more, so reading ends at once; if it
      // does not, or the send failed otherwise, the send's error kills the link.
      const bool hung_up = l.hung_up.load(std::memory_order_relaxed);
      if (hung_up && !l.paused.load(std::memory_order_relaxed)) Read(peer);
      if (l.dead.load(std::memory_order_relaxed)) continue;
      if (!hung_up || !l.paused.load(std::memory_order_relaxed)) {
        KillLink(peer, send_error);
        continue;
      }
      Interest(peer, false);  // paused: out of the set (its hang-up would wake the loop at once)
      continue;
    }
    Interest(peer, result == Flush::kBlocked);
    poll_soon =
        poll_soon || (result == Flush::kBlocked && l.paused.load(std::memory_order_relaxed));
  }
  return poll_soon;
}

}  // namespace tcp

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
