// Group control state and message queues that every rank of a group maps.
//
// The same structures serve ranks that share an address space (thread transport: they live on
// the heap) and ranks that share only a memory segment (shm transport: they live in the
// segment, and the futex doorbells wake across processes). So everything here is fixed-size,
// position-independent (no pointers, no std::string) and uses only lock-free atomics.
//
//   Control      doorbells, the first failure, rejection notices, per-rank progress
//   Mailbox      one ordered pair's queue of message descriptors with credits
//
// Thread safety: every member is safe to use from any rank; see the comments for who writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/wait.h"
#include "chorus/status.h"
#include "transport/transport.h"

namespace chorus::internal {

inline constexpr int kMaxPipelineDepth = 16;

// A message as it sits in a mailbox: `where` is a pointer (thread transport) or an offset into
// the shared segment (shm transport).
struct WireMessage {
  uint64_t where = 0;
  uint64_t bytes = 0;
  CallTag tag;
};

// Single producer (the sender), single consumer (the receiver), `depth` credits.
//
// Each entry of the ring fills one cache line and carries a stamp (message number + 1) stored
// after the descriptor, so a receiver learns that a message came and reads what it is in one
// line: it polls the stamp, not `head`. The sender keeps the last `tail` it read beside `head`
// and reads `tail` again only when that one shows no credit. Releases also travel back inside
// the entries of the reverse mailbox: each entry carries `ack`, the `tail` its sender had
// reached on the mailbox in the other direction, so ranks that exchange messages both ways
// (most collectives) learn of their credits without reading `tail`. A message then costs one
// cache-line transfer, the entry to its receiver, where reading `head`, the entry and `tail`
// on every message cost three. 2 ranks on 2 cores, 32-byte all-reduce: 1.1 us; with the stamp
// 0.83 us (Open MPI: 0.58 us); with the acks see docs/waiting.md.
//
// A message of at most kInlineBytes travels inside its entry (PostInline): the receiver reads
// it from the line it polled instead of fetching a slot line after it, one cache-line transfer
// fewer on the path of every small call (docs/waiting.md, "A small message's cost"). The stamp
// and the ack keep their low 32 bits to make room: the stamp an entry holds differs from the
// one awaited by `depth`, and an ack lies within `depth` of `head`, so neither is ambiguous.
// The entry carries the call tag as its call index and a digest of the rest (TagDigest), which
// leaves room for 32 bytes, a 2-rank 32-byte all-reduce's whole message. The whole tag waits in
// `tags`, on lines the receiver reads only when the entry is not of the call it expects.
struct Mailbox {
  static constexpr size_t kInlineBytes = 32;

  struct alignas(64) Entry {
    std::atomic<uint32_t> stamp{0};  // low 32 bits of message number + 1, stored last
    uint32_t ack = 0;                // low 32 bits of the sender's `tail` on the mailbox back to it
    uint64_t bytes = 0;       // with kInline set, the payload is `body`; else `body` holds `where`
    uint64_t call_index = 0;  // the message's tag: its call index
    uint64_t digest = 0;      // and TagDigest of the rest
    alignas(8) std::byte body[kInlineBytes] = {};
  };
  static_assert(sizeof(Entry) == 64, "a ring entry is one cache line");
  static constexpr uint64_t kInline = uint64_t{1} << 63;

  // The sender's line: messages posted, and the `tail` it last read (the sender's alone).
  alignas(64) std::atomic<uint64_t> head{0};
  mutable uint64_t tail_seen = 0;
  alignas(64) std::atomic<uint64_t> tail{0};  // messages released; written by the receiver
  Entry ring[kMaxPipelineDepth];
  CallTag tags[kMaxPipelineDepth];  // the whole tag of the message in ring[i]

  // Sender side.
  bool HasCredit(int depth) const {
    const uint64_t h = head.load(std::memory_order_relaxed);
    if (h - tail_seen < static_cast<uint64_t>(depth)) return true;
    tail_seen = tail.load(std::memory_order_acquire);
    return h - tail_seen < static_cast<uint64_t>(depth);
  }
  uint64_t next() const { return head.load(std::memory_order_relaxed); }
  // `ack` is the reverse mailbox's released() (this sender is its receiver).
  void Post(const WireMessage& m, uint64_t ack, int depth) {
    CHORUS_CHECK_LT(m.bytes, kInline);
    Entry& entry = Claim(depth);
    entry.bytes = m.bytes;
    SetTag(entry, m.tag);
    std::memcpy(entry.body, &m.where, sizeof m.where);
    Stamp(entry, ack);
  }
  // Posts `bytes` (at most kInlineBytes) from `data` inside the entry itself.
  void PostInline(const void* data, uint64_t bytes, const CallTag& tag, uint64_t ack, int depth) {
    CHORUS_CHECK_LE(bytes, kInlineBytes);
    Entry& entry = Claim(depth);
    entry.bytes = bytes | kInline;
    SetTag(entry, tag);
    if (bytes > 0) std::memcpy(entry.body, data, bytes);
    Stamp(entry, ack);
  }
  bool Drained() const {
    return tail.load(std::memory_order_acquire) == head.load(std::memory_order_relaxed);
  }
  // The receiver had released `ack` messages when it posted the entry of the reverse mailbox
  // that carried it (so the releases happened before, and the acquire of that entry's stamp
  // orders them before this sender's reuse of the slots). Only its low 32 bits travel; the
  // count they stand for is the one within 2^32 below `head`. An ack beyond head is ignored.
  void Acked(uint64_t ack) const {
    const uint64_t h = head.load(std::memory_order_relaxed);
    const uint64_t full =
        h - static_cast<uint32_t>(static_cast<uint32_t>(h) - static_cast<uint32_t>(ack));
    if (full > tail_seen && full <= h) tail_seen = full;
  }

  // Receiver side.
  // `*ack` is the entry's ack for the reverse mailbox (see Acked). A message posted inline
  // comes with `*inline_data` pointing at its bytes inside the entry, which stay there until
  // Release; otherwise `*inline_data` is null and `m->where` says where the message is.
  // `expect`, if not null, is the tag the receiver expects: an entry of that call whose digest
  // matches it takes it as its tag, and any other reads the whole tag from `tags`.
  bool Peek(WireMessage* m, uint64_t* ack, int depth, const void** inline_data = nullptr,
            const CallTag* expect = nullptr) const {
    const uint64_t t = tail.load(std::memory_order_relaxed);
    const uint64_t i = t % static_cast<uint64_t>(depth);
    const Entry& entry = ring[i];
    if (entry.stamp.load(std::memory_order_acquire) != static_cast<uint32_t>(t + 1)) return false;
    *ack = entry.ack;
    const bool expected = expect != nullptr && entry.call_index == expect->call_index &&
                          entry.digest == TagDigest(*expect);
    m->tag = expected ? *expect : tags[i];
    m->bytes = entry.bytes & ~kInline;
    const bool in_entry = (entry.bytes & kInline) != 0;
    CHORUS_CHECK(!in_entry || inline_data != nullptr);
    if (inline_data != nullptr) *inline_data = in_entry ? entry.body : nullptr;
    m->where = 0;
    if (!in_entry) std::memcpy(&m->where, entry.body, sizeof m->where);
    return true;
  }
  // Messages this receiver released so far, the ack it sends back (the receiver's alone).
  uint64_t released() const { return tail.load(std::memory_order_relaxed); }
  void Release(int depth) {
    const uint64_t t = tail.load(std::memory_order_relaxed);
    CHORUS_CHECK_EQ(ring[t % static_cast<uint64_t>(depth)].stamp.load(std::memory_order_relaxed),
                    static_cast<uint32_t>(t + 1));  // a message was there to release
    tail.store(t + 1, std::memory_order_release);
  }

 private:
  Entry& Claim(int depth) {
    CHORUS_CHECK(HasCredit(depth));  // callers reserve first
    return ring[head.load(std::memory_order_relaxed) % static_cast<uint64_t>(depth)];
  }
  // The sender writes `tags` before the stamp that publishes the entry, and again only after
  // the receiver released it.
  void SetTag(Entry& entry, const CallTag& tag) {
    entry.call_index = tag.call_index;
    entry.digest = TagDigest(tag);
    tags[&entry - ring] = tag;
  }
  void Stamp(Entry& entry, uint64_t ack) {
    const uint64_t h = head.load(std::memory_order_relaxed);
    entry.ack = static_cast<uint32_t>(ack);
    entry.stamp.store(static_cast<uint32_t>(h + 1), std::memory_order_release);
    head.store(h + 1, std::memory_order_relaxed);  // read by the sender only
  }
};

class Control {
 public:
  // Bytes needed for a group of `size` ranks (a multiple of 64).
  static size_t Bytes(int size);
  // Constructs the control block in `memory` (Bytes(size) bytes, 64-byte aligned).
  static Control* Create(void* memory, int size);
  // The control block that Create() put at `memory` (possibly in another process).
  static Control* At(void* memory) { return static_cast<Control*>(memory); }

  int size() const { return size_; }
  Doorbell& bell(int rank) { return ranks()[rank].bell; }
  void RingAll();

  // The first failure wins; every rank's waits are interrupted.
  void Fail(const Status& status);
  bool failed() const { return fail_state_.load(std::memory_order_seq_cst) != 0; }
  Status failure() const;

  // Brackets the time a rank runs call `call_index`'s algorithm (and may read peers' memory).
  void Enter(int rank, uint64_t call_index);
  void Leave(int rank) { ranks()[rank].active.store(0, std::memory_order_release); }
  // True while `rank` runs call `call_index`.
  bool Active(int rank, uint64_t call_index) const {
    return ranks()[rank].active.load(std::memory_order_acquire) == call_index + 1;
  }
  // The call `rank` is running, or -1.
  int64_t active(int rank) const {
    return static_cast<int64_t>(ranks()[rank].active.load(std::memory_order_acquire)) - 1;
  }
  uint64_t started(int rank) const { return ranks()[rank].started.load(std::memory_order_acquire); }
  Beacon& beacon(int rank) { return ranks()[rank].beacon; }
  // The state of `rank` as its control block shows it (census.h), seen at `now`.
  PeerState StateOf(int rank, Clock::time_point now);

  // A rank whose communicator is gone (thread ranks only; processes are watched by pid).
  void Depart(int rank);
  bool Departed(int rank) const { return ranks()[rank].departed.load(std::memory_order_acquire); }

  // `rank` refused call `call_index` (its arguments were invalid) and will not take part.
  void Reject(int rank, uint64_t call_index, const std::string& reason);
  // kInvalidArgument naming a rank other than `rank` that rejected `call_index`; OK if none.
  Status Rejection(int rank, uint64_t call_index) const;
  // Cheap form of !Rejection(rank, call_index).ok().
  bool Rejected(int rank, uint64_t call_index) const;
  // True when any rank, `rank` included, rejected `call_index`: its messages are stale.
  bool Abandoned(uint64_t call_index) const;

  void SetPid(int rank, int pid) { ranks()[rank].pid.store(pid, std::memory_order_release); }
  int pid(int rank) const { return ranks()[rank].pid.load(std::memory_order_acquire); }

 private:
  static constexpr size_t kMessageWords = 64;  // failure and rejection texts: 512 bytes

  // Text stored in relaxed atomic words, so a reader racing a writer reads garbage at worst,
  // never undefined behaviour.
  struct Text {
    std::atomic<uint64_t> words[kMessageWords];
    void Store(const std::string& s);
    std::string Load() const;
  };

  // A rank's last kRejections rejected calls, so that stale messages of an abandoned call are
  // recognised calls later; the reasons of the last kReasons, for peers still waiting in an
  // older call to learn why, even if the rank rejected more calls since.
  static constexpr int kRejections = 64;
  static constexpr int kReasons = 4;

  struct alignas(64) RankControl {
    Doorbell bell;
    std::atomic<uint64_t> started{0};  // calls started, for diagnostics
    std::atomic<uint64_t> active{0};   // call index + 1 while running it, else 0
    std::atomic<uint64_t> rejections{0};
    std::atomic<uint64_t> rejected_call[kRejections] = {};  // call index + 1, by rejection #
    std::atomic<uint64_t> reason_call[kReasons] = {};       // call index + 1, by rejection #
    std::atomic<int32_t> pid{0};
    std::atomic<bool> departed{false};
    Text rejected_why[kReasons];
    alignas(64) Beacon beacon;  // a line of its own: written by the rank, read on timeouts
  };

  bool RejectedBy(int rank, uint64_t call_index) const;
  // Where `rank` recorded the reason it rejected `call_index`, or -1.
  int ReasonSlot(int rank, uint64_t call_index) const;

  explicit Control(int size) : size_(size) {}
  RankControl* ranks() { return reinterpret_cast<RankControl*>(this + 1); }
  const RankControl* ranks() const { return reinterpret_cast<const RankControl*>(this + 1); }

  int size_;
  // 0 = healthy, 1 = a failure is being written, 2 = failure readable.
  alignas(64) std::atomic<uint32_t> fail_state_{0};
  std::atomic<int32_t> fail_code_{0};
  std::atomic<uint64_t> latest_rejection_{0};  // max rejected_call, to skip the scan
  Text fail_message_;
};

// The group-state half of the Transport interface, for transports whose ranks share a Control
// block (thread and shm): only data movement and liveness are left to them.
class ControlledTransport : public Transport {
 public:
  ControlledTransport(Control& control, int rank) : control_(control), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return control_.size(); }
  Doorbell& doorbell() override { return control_.bell(rank_); }

  void Fail(const Status& status) override { control_.Fail(status); }
  bool failed() const override { return control_.failed(); }
  Status failure() const override { return control_.failure(); }

  void Enter(uint64_t call_index) override { control_.Enter(rank_, call_index); }
  void Leave() override { control_.Leave(rank_); }
  bool PeerActive(int peer, uint64_t call_index) const override {
    return control_.Active(peer, call_index);
  }
  Beacon& beacon() override { return control_.beacon(rank_); }
  // Meaningful where the Control block is shared (thread and shm ranks: sees_peers_enter()).
  bool Entered(int peer, uint64_t call_index) const override {
    return control_.started(peer) > call_index;
  }
  bool PeerCall(int peer, CallTag* tag) const override {
    return ReadCall(control_.beacon(peer), tag);
  }
  void RingPeers() override { control_.RingAll(); }
  std::vector<PeerState> Census(uint64_t call_index, Deadline until) override;

  void Reject(uint64_t call_index, const std::string& reason) override {
    control_.Reject(rank_, call_index, reason);
  }
  Status Rejection(uint64_t call_index) const override {
    return control_.Rejection(rank_, call_index);
  }
  bool Rejected(uint64_t call_index) const override { return control_.Rejected(rank_, call_index); }
  bool Abandoned(uint64_t call_index) const override { return control_.Abandoned(call_index); }

 protected:
  Control& control_;
  const int rank_;
};

}  // namespace chorus::internal
