// TcpTransport, the TCP transport behind ConnectTcp (see tcp_transport.h for the design). Its
// members are defined by theme: the framed links (link.cpp: credits, posting, writing and
// reading frames, control frames, a link's death), the connector (connector.cpp: accepting,
// dialing, handshakes, adopting a connection as a link) and the rest (tcp_transport.cpp: the
// Transport calls, the census, the progress loop, closing and setup).
//
// Thread safety: as Transport; plus the progress thread, which shares only atomics and the
// per-link locks with the rank thread (see each member's comment).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/log_limit.h"
#include "base/unique_fd.h"
#include "base/wait.h"
#include "chorus/status.h"
#include "net/auth.h"
#include "transport/control.h"
#include "transport/tcp/connector.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/link.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace chorus::internal::tcp {

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
  bool TryPeek(int peer, Message* m, const CallTag* expect) override;
  bool Linked(int peer) override { return link(peer).ready.load(std::memory_order_acquire); }
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

  // True once a send to `peer` failed: it hung up (tests).
  bool PeerHungUp(int peer) { return link(peer).hung_up.load(std::memory_order_acquire); }

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
  // Under send_mu, once the peer hung up: forgets the frames under way and queued, and gives
  // the posted ones' credits back.
  void DropOutputLocked(Link& l);
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
  // The answers about `call_index` the askable peers gave so far, into `states`; with `asked` (a
  // census), only an answer that came after the first asked[peer] of that peer's.
  template <typename Askable>
  void ReadAnswers(uint64_t call_index, Askable&& askable, std::vector<PeerState>* states,
                   const std::vector<uint64_t>* asked = nullptr);
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
  LogLimiter log_;                                        // progress thread
  std::optional<Clock::time_point> accept_paused_until_;  // progress thread
  std::optional<Clock::time_point> short_of_descriptors_since_;
  // Held while the first failure is recorded and its kFail frames queued (Fail, and OnControl
  // for a peer's kFail): a caller that finds the failure already recorded returns only once its
  // frames are queued, so a link retired or closed right after (RetireLink) carries them.
  std::mutex fail_mu_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace chorus::internal::tcp
