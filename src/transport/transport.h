// The transport interface: ordered, credit-limited message queues between ranks.
//
// Between every ordered pair of ranks there is a FIFO of at most `depth` messages in flight.
// A sender reserves a staging slot (which is also its credit), fills it (or, on a zero-copy
// transport, points at its own memory instead), and posts. A receiver peeks at the oldest
// message, reads it in place, and releases it, which returns the credit. Nothing here blocks:
// every call answers at once, and the caller waits on doorbell() between attempts (base/wait.h).
//
// Transports know nothing of reductions or algorithms; algorithms know nothing of how the bytes
// travel. Each transport lives in src/transport/<name>/ with the same file set.
//
// Thread safety: a Transport object belongs to one rank and is used by one thread, except
// Fail(), failed() and failure(), which any thread may call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/wait.h"
#include "chorus/communicator.h"
#include "chorus/status.h"
#include "transport/call_tag.h"
#include "transport/census.h"

namespace chorus::internal {

struct Message {
  const void* data = nullptr;
  size_t bytes = 0;
  CallTag tag;
};

// Where the ranks of a multi-host group are, for hierarchical schedules: every host holds
// `local_size` ranks; `local` lists this host's ranks and `cross` the ranks that have this
// rank's local index on every host (both in rank order, global ranks).
struct HostLayout {
  int hosts = 1;
  int local_size = 1;
  int local_index = 0;
  int host_index = 0;
  std::vector<int> local;
  std::vector<int> cross;
};

// What a transport needs to connect one rank to its group.
struct ConnectConfig {
  int rank = 0;
  int size = 1;
  size_t slot_bytes = 0;
  int depth = 2;
  Deadline deadline;  // for the whole setup
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Bytes in each staging slot; a message never exceeds it.
  virtual size_t slot_bytes() const = 0;
  // The segment a call uses when CallOptions::segment_bytes does not say: at most slot_bytes().
  virtual size_t default_segment_bytes() const { return slot_bytes(); }
  // True when a posted message may point at the sender's own memory (shared address space).
  virtual bool zero_copy() const = 0;
  // True when Post may also be given the caller's memory in place of the reserved slot: the
  // transport reads it only during Post (it sends what it can at once and keeps the rest in the
  // slot), so the caller may reuse it as soon as Post returns. Saves the copy into the slot.
  virtual bool copies_at_post() const { return false; }
  // Messages of at most this many bytes travel inside the mailbox entry that announces them
  // (thread and shm ranks, transport/control.h): Post copies them there, and the receiver
  // reads them from the entry, one cache line instead of the entry and then a slot's. Post may
  // then also be given the caller's memory after TryCredit(peer), read only during Post. 0
  // where every message sits in a slot.
  virtual size_t inline_bytes() const { return 0; }
  // True when a slot reserved for one peer may also be posted to other peers, each after its
  // own TryCredit succeeded; the sender then reuses the slot only once every peer it went to
  // has released it (a broadcast costs one copy into staging, not p - 1).
  virtual bool shares_slots() const { return false; }
  // True when `peer` reads this rank's staging slots straight from memory (another core of this
  // host), so the stores that fill them matter (base/slot_writer.h); false when this rank's own
  // threads read them to send them on (TCP, MPI).
  virtual bool slots_read_in_memory(int /*peer*/) const { return false; }
  // How many ranks share this host's cores (drives the wait policy).
  virtual int ranks_on_host() const = 0;

  // True when a message may be posted to `peer` now (a credit is free). For zero-copy posts
  // of the caller's memory, which need no staging slot.
  virtual bool TryCredit(int peer) = 0;
  // The staging slot for the next message to `peer`, or nullptr while all credits are used.
  virtual void* TryReserve(int peer) = 0;
  // Posts the next message to `peer`. Precondition: the last TryReserve(peer) or
  // TryCredit(peer) succeeded and nothing was posted to `peer` since. `m.data` is that slot or,
  // when zero_copy(), memory of the caller's that stays valid and unchanged until Drained(peer),
  // or when copies_at_post() (after TryReserve), or for at most inline_bytes() (after
  // TryCredit), memory of the caller's read only during Post.
  virtual void Post(int peer, const Message& m) = 0;
  // The oldest unreleased message from `peer`, if one has arrived. `expect`, if not null, is the
  // tag the caller expects: thread and shm ranks carry a digest of the tag in the message's
  // line and read the whole tag only when it is not that one. `m->tag` is the message's either
  // way.
  virtual bool TryPeek(int peer, Message* m, const CallTag* expect) = 0;
  // Releases the message TryPeek(peer) returned.
  virtual void Release(int peer) = 0;
  // False while this rank has no link to `peer` (TCP links are made when first used, and a
  // TryPeek asks for one): then `peer` has sent this rank nothing. For a look at every peer
  // that should not connect them all (PointToPoint::StashArrivals).
  virtual bool Linked(int /*peer*/) { return true; }
  // True when `peer` has released every message posted to it.
  virtual bool Drained(int peer) = 0;

  // False once `peer`'s process is known to have exited. Cheap enough to poll while waiting
  // on that peer (rate-limited where it costs a system call).
  virtual bool PeerAlive(int peer) = 0;
  // "rank 2 (pid 4242) exited", for the error when PeerAlive(peer) is false.
  virtual std::string DescribeDeath(int peer) const = 0;
  // True when `peer` died before its link to this rank was up, so that the cause it sent its
  // other peers before it went could not come this way, and may still come through them (TCP:
  // the dialler of a link in its handshake sees only a reset).
  virtual bool DiedUnheard(int) const { return false; }

  // This rank's doorbell: rung whenever a message or a credit arrives, or the group fails.
  virtual Doorbell& doorbell() = 0;
  // Moves along what a transport that progresses only when polled has to do by itself (MPI:
  // reads the group's notices). Nothing elsewhere.
  virtual void Poll() {}
  // False for a transport that progresses only when polled (nothing rings the doorbell when a
  // message arrives): waits on it then yield between polls and never sleep.
  virtual bool rings_doorbell() const { return true; }
  // The host layout when ranks span several hosts with the same number of ranks on each, and
  // ranks on a host reach each other through shared memory; else null.
  virtual const HostLayout* hosts() const { return nullptr; }

  // Group-wide failure: the first Fail() wins; every rank's waits are interrupted.
  virtual void Fail(const Status& status) = 0;
  virtual bool failed() const = 0;
  virtual Status failure() const = 0;

  // Brackets this rank's run of call `call_index`: peers use it to diagnose timeouts and to
  // know when this rank no longer reads their memory.
  virtual void Enter(uint64_t call_index) = 0;
  virtual void Leave() = 0;
  // True while `peer` runs call `call_index` (zero-copy transports, where it matters).
  virtual bool PeerActive(int peer, uint64_t call_index) const = 0;
  // True when this rank sees in shared memory which call each peer has entered (thread and shm
  // ranks): then Entered() and PeerCall() answer and RingPeers() wakes the peers, and a barrier
  // needs no messages.
  virtual bool sees_peers_enter() const { return false; }
  // True once `peer` has entered call `call_index` or a later one (sees_peers_enter() only).
  // What `peer` wrote before it entered is visible to this rank after a true answer.
  virtual bool Entered(int /*peer*/, uint64_t /*call_index*/) const { return false; }
  // The call `peer` shows in its beacon (sees_peers_enter() only), or false.
  virtual bool PeerCall(int /*peer*/, CallTag* /*tag*/) const { return false; }
  // Rings every peer's doorbell, so that their waits on Entered() look again.
  virtual void RingPeers() {}
  // Where this rank's waits leave their signs of life (census.h).
  virtual Beacon& beacon() = 0;
  // Every rank's state as far as this rank can learn it by `until` (census.h), for the verdict
  // of a wait on call `call_index` that timed out. Blocks at most until `until`.
  virtual std::vector<PeerState> Census(uint64_t call_index, Deadline until) = 0;
  // The census without waiting and without opening links: what the peers answered so far
  // (each state's call is what it showed last), and a new question for the next glance. Asked
  // by waits that last (Channel::WaitFor), to find ranks in the same call with other arguments.
  virtual std::vector<PeerState> Glance(uint64_t call_index) {
    return Census(call_index, Clock::now());
  }

  // Tells the other ranks that this rank rejected call `call_index` and will not take part.
  virtual void Reject(uint64_t call_index, const std::string& reason) = 0;
  // If another rank rejected `call_index`: kInvalidArgument naming it and its reason; else OK.
  virtual Status Rejection(uint64_t call_index) const = 0;
  // Cheap (lock-free) form of !Rejection(call_index).ok(), polled while waiting.
  virtual bool Rejected(uint64_t call_index) const = 0;
  // True when some rank, this one included, rejected `call_index`: every rank abandons such a
  // call, and messages of it that arrive later are dropped unread.
  virtual bool Abandoned(uint64_t call_index) const = 0;
};

}  // namespace chorus::internal
