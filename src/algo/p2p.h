// Point-to-point messages (Communicator::Send and Recv), over the per-pair FIFOs the
// collectives use (transport/transport.h).
//
// A message is the sender's buffer cut into segments of at most slot_bytes(), each copied into
// a staging slot and posted, all under one tag (MessageTag): the pair's message number with the
// top bit set, which no collective call has, the element count, the type and the caller's tag.
// A message of no elements is one empty segment. The receiver copies the segments out in order
// until it has the whole count.
//
// Order: between a pair of ranks messages arrive in the order sent, and a Recv takes the next
// one from its peer; there is no matching by tag (a tag, count or type that differs from the
// Recv's fails the group, as collective arguments that differ do). Collectives and messages
// share each pair's FIFO, yet neither waits for the other: a rank that finds a message at the
// head of a peer's FIFO where it expects collective data, or while it waits to send or to
// receive a message, moves it into its stash (heap memory) and releases its slot, and a later
// Recv takes it from there. So a Send returns once its data is out of the caller's buffer,
// whether or not the peer has called Recv yet; ranks that all send before they receive (an
// exchange, a ring shift) do not deadlock, and a message sent before a collective may be
// received after it. A Recv that finds its peer's collective data first fails instead: the peer
// went into a collective that this rank has not reached, and sent nothing before it.
// What the stash costs: a message stashed is copied twice and held in memory until received.
// What it cannot do: on TCP links made on demand (groups of more than 16 ranks, and between
// hosts) only the lower rank of a pair dials, so a message from a higher rank to a lower one
// that has no link to it yet waits until that rank's Recv or a collective between the two; a
// sender that meanwhile waits for that rank in a collective waits out its deadline.
//
// Thread safety: used by the rank's thread, as its collectives are.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/wait.h"
#include "chorus/communicator.h"
#include "chorus/status.h"
#include "transport/transport.h"

namespace chorus::internal {

// Point-to-point messages carry this bit in CallTag::call_index; a collective's never has it.
inline constexpr uint64_t kMessageBit = uint64_t{1} << 63;
inline bool IsMessage(const CallTag& tag) { return (tag.call_index & kMessageBit) != 0; }
// The tag of message `number` (from 0) from one rank to another. The kind is a placeholder
// that every transport's header check accepts; IsMessage tells a message apart.
inline CallTag MessageTag(uint64_t number, size_t count, DataType dtype, uint32_t tag) {
  return CallTag{
      kMessageBit | number, count, CollectiveKind::kBroadcast, dtype, ReduceOp::kSum, 0, 0, tag};
}
// "message #3 (count 8, float32, tag 0)"
std::string DescribeMessage(const CallTag& tag);

class PointToPoint {
 public:
  PointToPoint(Transport& transport, Waiter& waiter);

  // Sends `count` elements of `dtype` at `data` to `peer` (this rank itself included) and
  // returns once they are out of `data`. Arguments are checked by the caller. The waits run
  // under the waiter's current call (Waiter::StartCall). An error other than a bad argument
  // has failed the group.
  Status Send(const void* data, size_t count, DataType dtype, int peer, uint32_t tag,
              Traffic* traffic);
  // Receives the next message from `peer` into `data`, which must be `count` elements of
  // `dtype` under `tag`.
  Status Recv(void* data, size_t count, DataType dtype, int peer, uint32_t tag, Traffic* traffic);
  // Send to `to` and Recv from `from` at once (MPI_Sendrecv): the segments of both move as
  // slots and messages allow, so neither waits for the other, and the message from `from`
  // goes straight into `recv` rather than through the stash. Where either peer is this rank,
  // Send then Recv.
  Status SendRecv(const void* send, size_t send_count, DataType send_dtype, int to, void* recv,
                  size_t recv_count, DataType recv_dtype, int from, uint32_t tag,
                  Traffic* traffic);

  // Whether the next message from `peer` has begun to arrive (in the stash, or at the head of
  // its FIFO). Communicator::Probe.
  bool Probe(int peer);
  // Probe, or a Recv from `peer` would fail at once: the group failed or `peer` is gone.
  bool Settled(int peer);
  // Communicator::AwaitMessage and WakeAwaitMessage (the latter from any thread).
  bool AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout);
  void WakeAwaitMessage();

  // If `peer`'s oldest message is a point-to-point one, moves it to the stash and releases its
  // slot. True if it did.
  bool StashHead(int peer);
  // StashHead for every peer but those in `except`, as long as any has one; true if any had.
  bool StashArrivals(std::span<const int> except);
  bool StashArrivals(int except = -1) {
    return except < 0 ? StashArrivals(std::span<const int>()) : StashArrivals({&except, 1});
  }
  // StashArrivals, and once it found one, on for as long as more keep coming (each release lets
  // a sender post its next segment), up to kTakeInFor: for a collective's wait that lasts,
  // which would otherwise take in one pipeline of a large message per look.
  void TakeIn();
  static constexpr std::chrono::milliseconds kTakeInFor{100};
  static constexpr std::chrono::milliseconds kTakeInQuiet{2};

 private:
  // Heap memory of a stashed segment. Buffers of segments received are kept for the next ones
  // (up to kSpareBytes): a fresh one would cost a page fault per 4 KiB touched.
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t capacity = 0;
  };
  struct Stashed {
    CallTag tag;
    Buffer buffer;
    size_t bytes = 0;
  };
  static constexpr size_t kSpareBytes = size_t{64} << 20;
  // A message on its way out: the part not yet posted.
  struct Outgoing {
    const std::byte* src;
    size_t bytes;
    int peer;
    CallTag tag;
    size_t done = 0;
    bool started = false;  // a message of no bytes is one empty segment
    bool by_reference = false;  // posted from `src` itself (Transport::zero_copy)
    bool finished() const { return started && done == bytes; }
  };
  // SendRecv sends larger messages by reference where the transport is zero-copy.
  static constexpr size_t kByReferenceFrom = 16 << 10;
  // A message on its way in: the part not yet taken.
  struct Incoming {
    std::byte* dst;
    size_t bytes;
    int peer;
    CallTag want;
    size_t done = 0;
    bool started = false;
    bool finished() const { return started && done == bytes; }
  };
  // SendRecv's loop: `step` moves what can move; `error` is its error.
  template <typename Step>
  Status SendRecvSteps(Outgoing& out, Incoming& in, Step& step, Status& error);
  // Posts `out`'s next segment if `out.peer` has room; true if it did.
  bool PostNext(Outgoing& out, Traffic* traffic);
  // Takes `in`'s next segment, from the stash or the FIFO, if one is there (*moved: it did). An
  // error has failed the group, except a mismatch on a message to itself (nothing is taken).
  Status TakeNext(Incoming& in, Traffic* traffic, bool* moved);
  Status CheckSegment(const Incoming& in, const CallTag& got, size_t got_bytes);
  Buffer Spare(size_t bytes);
  void Recycle(Buffer buffer);
  void Stash(int peer, const CallTag& tag, const void* data, size_t bytes);
  // The wait's outcome as the call's error; fails the group. `what` completes "waiting for".
  Status WaitFailed(WaitResult result, const char* op, const std::string& what, int peer);
  Status Fail(Status status);

  Transport& t_;
  Waiter& waiter_;
  std::vector<std::deque<Stashed>> stash_;  // by sender
  std::vector<uint64_t> sent_;              // messages sent to each rank
  std::vector<uint64_t> received_;          // messages taken from each rank
  std::vector<Buffer> spare_;               // buffers of received segments, for the next
  size_t spare_bytes_ = 0;
  std::atomic<bool> wake_{false};  // WakeAwaitMessage was called
};

}  // namespace chorus::internal
