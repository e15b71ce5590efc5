// The fused primitives every algorithm is written with, over a pair of links: data arrives from
// `recv_peer` and leaves for `send_peer`. Each call moves one segment (one message):
//
//   Send(src)                     src ──▶ send_peer
//   Recv(dst)                     recv_peer ──▶ dst
//   RecvReduceSend(local)         (recv_peer ⊕ local) ──▶ send_peer      partial sums
//   RecvReduceCopy(local, dst)    (recv_peer ⊕ local) ──▶ dst            last reduce step
//   RecvReduceCopySend(local,dst) (recv_peer ⊕ local) ──▶ dst, send_peer all-reduce's turn
//   RecvCopySend(dst)             recv_peer ──▶ dst, send_peer           gather forwarding
//
// On a zero-copy transport a forwarded segment is published straight from the rank's own
// buffer (src or dst); otherwise it is written into a staging slot. Partial sums always go to a
// staging slot, so the caller's buffers only ever hold inputs and final results.
// The "last" reduce steps (…Copy…) apply the kernel's finish (kAvg divides by the ranks).
//
// Every wait honours the call's deadline and the group's failure state; the first error is
// returned and the group is failed, so the caller just propagates it.
// Thread safety: one per rank per call, on that rank's thread.
#pragma once

#include <bitset>
#include <cstddef>
#include <span>

#include "base/slot_writer.h"
#include "base/wait.h"
#include "chorus/communicator.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

namespace chorus::internal {

class PointToPoint;

// Everything one rank knows about the call it is running.
struct CallContext {
  Transport* transport = nullptr;
  const reduce::Kernel* kernel = nullptr;  // null for data movement only
  CallTag tag;
  size_t elem_size = 0;
  size_t segment_elems = 0;  // elements per message
  // A varied collective's block lengths (CallArgs::send_counts and recv_counts), and this
  // rank's buffers' counts.
  std::span<const size_t> send_counts;
  std::span<const size_t> recv_counts;
  // Where those blocks start (CallArgs::send_displs and recv_displs); empty: back to back.
  std::span<const size_t> send_displs;
  std::span<const size_t> recv_displs;
  size_t send_elems = 0;
  size_t recv_elems = 0;
  // The rank's waits: policy, learnt spin and this call's deadline (Waiter::StartCall).
  Waiter* waiter = nullptr;
  std::byte* scratch = nullptr;     // segment_elems elements of this rank's own
  const void** operands = nullptr;  // room for one pointer per rank
  Message* messages = nullptr;      // room for one message per rank
  Traffic* traffic = nullptr;       // counters of this call's kind
  // The rank's choice of stores for copies into staging slots; null: ordinary stores.
  SlotWriter* slot_writer = nullptr;
  // Where point-to-point messages found ahead of this call's data go (algo/p2p.h); null: none
  // are expected.
  PointToPoint* p2p = nullptr;
};

// Per-peer operations with waiting, checking and counting; the building block of every
// algorithm. A message is one segment.
class Channel {
 public:
  explicit Channel(const CallContext& ctx);

  // Where the schedule is, for error messages: "step 3 of 6, segment 2 of 4".
  void SetStep(int step, int steps) {
    step_ = step;
    steps_ = steps;
  }
  void SetSegment(size_t segment, size_t segments) {
    segment_ = segment;
    segments_ = segments;
  }
  // Starts segment `segment` of a schedule with `steps` steps per segment; NextStep() then
  // numbers them 0, 1, ...
  void StartSegment(size_t segment, size_t segments, int steps) {
    SetSegment(segment, segments);
    SetStep(-1, steps);
  }
  void NextStep() { ++step_; }
  // Varied collectives whose counts differ by rank: the elements the next messages to or from
  // a peer carry in all (both sides set it, and a message whose count differs fails the call).
  void SetPairCount(size_t n) { tag_.layout = n; }

  // The next message from `peer`, which must hold `n` elements of this call.
  Status Await(int peer, size_t n, Message* m);
  // Waits until `peer` has entered this call or a later one (Transport::Entered, thread and shm
  // ranks); if it shows this call, its arguments must be this rank's, else the group fails as
  // when a message's tag differs.
  Status AwaitEntered(int peer);
  // Releases the message Await(peer) returned.
  void Done(int peer, const Message& m);
  // A staging slot for the next message to `peer`.
  Status Reserve(int peer, void** slot);
  // A credit on the link to `peer`: room in its ring for one more message, so the oldest
  // message on it, and the staging slot that message used, are released. Enough for a message
  // that takes no slot (one held inline in its entry, or one the peer reads in place).
  Status AwaitCredit(int peer);
  // Posts `n` elements at `data` (the reserved slot, or on a zero-copy transport memory that
  // stays unchanged until Flush(peer)) to `peer`.
  void Publish(int peer, const void* data, size_t n);
  // Sends `n` elements through a staging slot: the caller may reuse `src` at once.
  Status SendCopy(int peer, const void* src, size_t n);
  // Sends `n` elements at `src`: by reference on a zero-copy transport (then `src` must stay
  // unchanged until Flush(peer)), else through a staging slot.
  Status SendRef(int peer, const void* src, size_t n);
  // SendCopy for small segments (the copy is cheaper than waiting for the release at the
  // end), SendRef for large ones.
  Status Send(int peer, const void* src, size_t n);
  // Sends the same `n` elements to every other rank. On a staging transport that shares slots
  // the data is copied once, into the slot for the next rank, and that slot is posted to all.
  Status SendToAll(const void* src, size_t n);
  // Waits until `peer` has released every message, so the caller's buffers may be reused.
  Status Flush(int peer);
  // Flush(peer) for every peer this channel posted to, once a message pointed at the caller's
  // memory; what an algorithm that sent by reference does before it returns. (Not every peer:
  // one this call sent nothing may hold point-to-point messages it has not received yet, and
  // its FIFO drains only at its Recv.)
  Status FlushReferenced();
  // True once a message pointed at the caller's memory (then Flush before returning).
  bool referenced() const { return referenced_; }

  const CallContext& ctx() const { return ctx_; }
  Transport& transport() const { return t_; }
  // Copies into the caller's output buffer (streamed for large calls).
  void CopyOut(void* dst, const void* src, size_t bytes) const;
  // Copies a message into a staging slot for `peer` (ctx().slot_writer's stores where the peer
  // reads the slot from memory, Transport::slots_read_in_memory).
  void CopyIn(int peer, void* slot, const void* src, size_t bytes) const;
  // True when CopyIn would stream `bytes` to `peer` now: a result bound for its slot is then
  // better written to the rank's own buffer and copied in.
  bool StreamsIn(int peer, size_t bytes) const {
    const SlotWriter* writer = WriterFor(peer);
    return writer != nullptr && writer->Streams(bytes);
  }

 private:
  // ctx().slot_writer when `peer` reads its slots from memory, else null (ordinary stores).
  SlotWriter* WriterFor(int peer) const {
    return t_.slots_read_in_memory(peer) ? ctx_.slot_writer : nullptr;
  }
  // Waits until ready(), the group fails, a rank rejects this call, `peer` dies or the
  // deadline passes; `what` completes "waiting for <what> rank <peer>" in errors.
  template <typename Ready>
  Status WaitFor(int peer, Ready&& ready, const char* what);
  // Turns a wait that did not succeed into the call's error and fails the group.
  Status WaitFailed(WaitResult result, const char* what, int peer);
  // Asked while a wait lasts (Waiter::kLastingAfter): a glance at the group (Transport::Glance)
  // for a rank in this call with other arguments, which no message may ever show when the two
  // wait on each other (ranks that disagree on a Gather's root). Fails the group and keeps the
  // error in disagreement_ if it finds one.
  bool FindDisagreement();
  Status FailGroup(Status status);
  // Fails the group: `peer` is in call `theirs` where this rank is in `mine` (the same index,
  // other arguments), "ranks disagree on the call", both calls described.
  Status CallsDiffer(int peer, const CallTag& theirs, const CallTag& mine);
  // The error for a message of this call whose counts (CallTag::layout) differ from ours.
  Status CountsDisagree(int peer, uint64_t theirs) const;
  // Called when a peer's message belongs to a later call: waits up to kRejectionGrace for the
  // notice that some rank rejected this call. True if it came (and the group has not failed).
  bool AwaitRejection();
  static constexpr std::chrono::milliseconds kRejectionGrace{2000};
  // Called when `peer` died before its link was up (Transport::DiedUnheard): the cause it sent
  // its other peers may still come through them. Waits up to kDeathNoticeGrace for the group's
  // failure; true if it came.
  bool AwaitFailureNotice();
  static constexpr std::chrono::milliseconds kDeathNoticeGrace{2000};
  // Sleeps (or yields, on transports without a doorbell) until known() or `until`.
  template <typename Known>
  void AwaitNotice(Known&& known, Deadline until);

  Status disagreement_;  // set by FindDisagreement
  const CallContext& ctx_;
  CallTag tag_;  // the call's, with this pair's count where the collective has one
  Transport& t_;
  int step_ = 0;
  int steps_ = 0;
  size_t segment_ = 0;
  size_t segments_ = 0;
  bool referenced_ = false;
  // The peers Publish posted to; beyond kTrackedPeers ranks every peer counts as posted to.
  static constexpr int kTrackedPeers = 1024;
  std::bitset<kTrackedPeers> posted_;
  const bool stream_;
};

// The fused ring primitives over a fixed pair of neighbours.
class Primitives : public Channel {
 public:
  Primitives(const CallContext& ctx, int recv_peer, int send_peer);

  Status Send(const void* src, size_t n);
  Status Recv(void* dst, size_t n);
  Status RecvReduceSend(const void* local, size_t n);
  Status RecvReduceCopy(const void* local, void* dst, size_t n);
  Status RecvReduceCopySend(const void* local, void* dst, size_t n);
  Status RecvCopySend(void* dst, size_t n);
  // Waits until send_peer has released every message, so the caller's buffers may be reused.
  Status Flush() { return Channel::Flush(send_peer_); }

 private:
  const int recv_peer_;
  const int send_peer_;
};

}  // namespace chorus::internal
