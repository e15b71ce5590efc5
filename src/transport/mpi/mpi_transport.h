// MPI transport: chorus's schedules over an existing MPI's point-to-point messages, so a job
// that already runs under mpirun gets whatever fabric its MPI drives (InfiniBand, Omni-Path,
// shared memory) without chorus knowing about it.
//
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
//   auto comm = chorus::CreateMpiCommunicator(MPI_COMM_WORLD);   // chorus/mpi.h
//
// The transport works on a private duplicate of the caller's communicator, with errors
// returned rather than fatal. Each link (ordered pair of ranks) has `depth` send slots at the
// sender and `depth` receive slots at the receiver, each a 64-byte header (sequence number,
// payload bytes, CallTag) followed by slot_bytes of payload:
//
//   send   TryReserve hands out the slot of the next message once that slot's previous
//          MPI_Isend has completed (that completion is the credit); Post writes the header
//          and starts MPI_Isend(header + payload).
//   recv   `depth` MPI_Irecv stay posted into the receive slots; MPI matches messages of one
//          (source, tag, communicator) in the order the receives were posted, so slot k % depth
//          holds message k. TryPeek tests only the oldest; Release re-posts its slot.
//
// Messages are copies (zero_copy() is false): the payload a receiver reads is in its own
// receive slot. Slots of the ring neighbours (send to rank + 1, receive from rank - 1) are
// allocated and touched at setup; links that only the direct algorithms use are set up on
// first use, so memory grows with the links used, not with the number of ranks.
//
// Progress: MPI moves data only inside MPI calls, and nothing rings this rank's doorbell, so
// rings_doorbell() is false and waits poll (WaitPolicy::PollOnly). A poll is one MPI_Test on
// the request it waits for, plus one on the control receive when that was not ready.
//
// Teardown is collective, like MPI_Comm_free: each rank's destructor swaps message counts with
// the others (MPI_Ialltoall) and takes every message still addressed to it before freeing the
// duplicate, because Open MPI hands a freed communicator's context id to the next one, and a
// message left in flight would land there. It waits up to the communicator's timeout for the
// other ranks to tear down too; past that it leaks the duplicate and the buffers MPI may still
// use instead of freeing them. So every rank destroys its communicators in the same order.
//
// Group state: a private Control block (as the thread transport's, on the heap) holds this
// rank's view. Fail() and Reject() also send a small control message (its own tag) to every
// peer; each rank applies what it receives the next time it polls. MPI reports no process
// deaths (a dead rank usually takes the job down through mpirun), so PeerAlive() is always
// true and a silent peer shows up as the call's deadline.
//
// Thread safety: a transport is driven by one thread at a time, like its communicator. MPI
// itself must allow the calls: under MPI_THREAD_SINGLE or FUNNELED only the main thread may
// create and drive it; under SERIALIZED any thread may, as long as no two threads of the
// process are inside MPI at once (so one communicator at a time, and no concurrent MPI calls
// of the caller's); several communicators driven concurrently from several threads need
// MPI_THREAD_MULTIPLE. Fail() (Communicator::Abort) from a thread other than the one that last
// drove a call is recorded at once but sent to the peers only at this rank's next poll (or its
// teardown), unless MPI provides MPI_THREAD_MULTIPLE. Destroy the transport before
// MPI_Finalize: afterwards it can only free its memory.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/control.h"
#include "transport/transport.h"

namespace chorus::internal {

// An MPI error code as a Status (kUnavailable): "mpi: <what>: <MPI's text for code>".
[[nodiscard]] Status MpiError(const std::string& what, int code);

class MpiTransport final : public ControlledTransport {
 public:
  // Collective over `comm` (every rank calls it; like MPI_Comm_dup, it cannot time out): dups
  // `comm`, sets up this rank's links and posts its receives. The caller has checked that the
  // ranks agree on slot_bytes and depth. `timeout` bounds how long the destructor keeps
  // progressing sends that peers have not taken yet.
  static Result<std::unique_ptr<MpiTransport>> Connect(MPI_Comm comm, size_t slot_bytes, int depth,
                                                       std::chrono::milliseconds timeout);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  size_t slot_bytes() const override { return slot_bytes_; }
  bool zero_copy() const override { return false; }
  int ranks_on_host() const override { return ranks_on_host_; }
  bool rings_doorbell() const override { return false; }

  bool TryCredit(int peer) override;
  void* TryReserve(int peer) override;
  void Post(int peer, const Message& m) override;
  bool TryPeek(int peer, Message* m, const CallTag* expect) override;
  // A receive link exists, or a message from `peer` waits to be matched (MPI_Iprobe): a look at
  // every peer then sets up no receive slots for peers that send nothing.
  bool Linked(int peer) override;
  void Release(int peer) override;
  // True when every message posted to `peer` has completed its send: the slots are free. With
  // copies in staging nothing of the caller's is referenced, so that is all a caller needs.
  bool Drained(int peer) override;

  bool PeerAlive(int) override { return true; }
  std::string DescribeDeath(int peer) const override {
    return "rank " + std::to_string(peer) + " (MPI does not report process deaths)";
  }

  void Fail(const Status& status) override;
  void Enter(uint64_t call_index) override;
  void Reject(uint64_t call_index, const std::string& reason) override;
  // Only this rank's own progress is known here (there is no shared memory to read peers'),
  // so a timeout cannot name absent ranks and Quiesce (zero-copy only) never waits.
  bool PeerActive(int, uint64_t) const override { return false; }
  void Poll() override { PollControl(); }
  // Asks every peer for its state with a probe notice. A peer answers whenever it polls: while
  // it waits in a call, or takes a census itself. One that does not answer by `until` is busy
  // outside chorus, stopped or hung.
  std::vector<PeerState> Census(uint64_t call_index, Deadline until) override {
    return Ask(call_index, until, true);
  }
  std::vector<PeerState> Glance(uint64_t call_index) override {
    return Ask(call_index, Clock::now(), false);
  }

 private:
  struct FreeBytes {
    void operator()(void* p) const { std::free(p); }
  };
  using Bytes = std::unique_ptr<std::byte, FreeBytes>;

  // One direction of one ordered pair: `depth` slots and their requests.
  struct Link {
    Bytes slots;                        // depth x stride bytes, page-aligned
    std::vector<MPI_Request> requests;  // per slot; MPI_REQUEST_NULL when idle
    uint64_t next = 0;        // send: messages posted; recv: the oldest unreleased message
    bool head_ready = false;  // recv: message `next` has arrived and is described by `head`
    Message head;
  };

  // A Fail or Reject notice on its way to every peer; the buffer lives until all sends end.
  struct Notice;
  struct Outgoing {
    std::unique_ptr<Notice> notice;
    std::vector<MPI_Request> requests;
  };

  MpiTransport(Bytes control_memory, MPI_Comm comm, int rank, int size, size_t slot_bytes,
               int depth, int ranks_on_host, bool thread_multiple,
               std::chrono::milliseconds timeout);

  // Allocates and touches a link's slots; null when out of memory.
  Bytes AllocateSlots() const;
  std::byte* SlotAt(Link& link, uint64_t index) const;
  // Sets up the link to (send) or from (!send) `peer` unless it exists; a receiving link posts
  // its receives. False when out of memory.
  bool SetUpLink(int peer, bool send);
  // The link to or from `peer`, set up on first use; null (and the group failed) if it cannot.
  Link* SendLink(int peer);
  Link* RecvLink(int peer);
  // Starts the receive of message `index` from `peer` into its slot.
  void PostRecv(int peer, Link& link, uint64_t index);

  // Teardown (see the destructor): true when every message sent on the communicator, by any
  // rank, has been taken, so that it may be freed.
  bool Quiesce(Deadline give_up);
  // Takes messages from `peer` until `due` have arrived in all.
  bool DrainLink(int peer, uint64_t due, Deadline give_up);
  // Tests `request` until it finishes (true) or `give_up` passes or MPI reports an error.
  static bool Progress(MPI_Request* request, Deadline give_up);
  void Abandon();

  // Applies peers' notices, retires finished notices and sends a deferred failure.
  void PollControl();
  void PollControlLocked();
  // To every peer, or to `only` alone.
  void SendNoticeLocked(const Notice& notice, int only = -1);
  // Records a failure; true when it is the group's first as far as this rank knows.
  bool RecordFailure(const Status& status);
  // Records an MPI error as the group's failure ("mpi: MPI_Isend to rank 3: <MPI's text>").
  void FailMpi(const std::string& what, int code);
  bool MayCallMpiHere() const {
    return thread_multiple_ ||
           driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  Bytes control_memory_;  // the heap Control block (ControlledTransport holds a reference)
  MPI_Comm comm_;
  const size_t slot_bytes_;
  const size_t stride_;  // header + slot_bytes, rounded up to 64
  const int depth_;
  const int ranks_on_host_;
  const bool thread_multiple_;
  const std::chrono::milliseconds timeout_;
  std::atomic<std::thread::id> driver_;  // the thread that last drove a call
  std::vector<std::unique_ptr<Link>> send_;
  std::vector<std::unique_ptr<Link>> recv_;

  // The control plane: one receive of any peer's notice stays posted.
  std::mutex control_mutex_;  // contended only when another thread fails the group
  std::unique_ptr<Notice> incoming_;
  MPI_Request incoming_request_ = MPI_REQUEST_NULL;
  std::vector<Outgoing> outgoing_;
  std::vector<uint64_t> notices_sent_;      // per peer, for teardown
  std::vector<uint64_t> notices_received_;  // per peer
  // Answers to this rank's census: per peer the state and the call it answered about, + 1.
  std::vector<PeerState> answers_;
  std::vector<uint64_t> answered_;
  std::vector<uint64_t> replies_;  // answers received per peer: a census takes only later ones
  // Probes every peer and waits for their answers until `until`; with `fresh_only` (a census)
  // an answer counts only if it came after this probe, else (a glance) any answer about the call.
  std::vector<PeerState> Ask(uint64_t call_index, Deadline until, bool fresh_only);
  bool closing_ = false;  // teardown counted the notices: send no more
  std::atomic<bool> failure_unsent_{false};
};

}  // namespace chorus::internal
