// chorus/communicator.h: a group of ranks and the collectives they run together.
//
//   auto group = chorus::CreateLocalGroup(4);          // 4 ranks as threads of this process
//   // on the thread that drives rank r:
//   chorus::Communicator& comm = (*group)[r];
//   std::vector<float> grad(8, float(r));
//   chorus::Status s = comm.AllReduce(std::span<float>(grad), chorus::ReduceOp::kSum);
//
// Count semantics follow NCCL:
//   AllReduce      send.count == recv.count
//   ReduceScatter  send.count == size() * recv.count; rank r gets elements [r*n, (r+1)*n)
//   AllGather      recv.count == size() * send.count; rank r's input lands at [r*n, (r+1)*n)
//   Broadcast      send.count == recv.count; the root's send lands in every rank's recv (the
//                  root's too); send is used on the root only and ignored elsewhere
//   Reduce         send.count == recv.count; the reduction of every rank's send lands in the
//                  root's recv; on the other ranks recv is neither checked, read nor written
//   Barrier        no buffers: returns once every rank has entered it
//   Gather         recv.count == size() * send.count on the root; rank r's send lands at
//                  [r*n, (r+1)*n) of the root's recv; recv is used on the root only
//   Scatter        send.count == size() * recv.count on the root; elements [r*n, (r+1)*n) of
//                  the root's send land in rank r's recv; send is used on the root only
//   AllToAll       send.count == recv.count == size() * n; block q of rank r's send (elements
//                  [q*n, (q+1)*n)) lands in block r of rank q's recv
// The v-variants take per-rank counts (size() of them, zeros allowed); blocks lie back to back
// in rank order, block q at offset counts[0] + ... + counts[q-1] (no displacements):
//   AllGatherV     counts on every rank, the same; send.count == counts[rank()],
//                  recv.count == sum of counts; rank q's send lands in block q of every recv
//   ReduceScatterV counts on every rank, the same; send.count == sum of counts,
//                  recv.count == counts[rank()]; rank r gets block r of the reduction
//   AllToAllV      send_counts[q]: elements to rank q; recv_counts[q]: from rank q (rank q's
//                  send_counts[r] must equal rank r's recv_counts[q]); send.count and
//                  recv.count are their sums; block q of rank r's send lands in block r of rank
//                  q's recv. Never in place.
//   AllToAllV with displacements (MPI's MPI_Alltoallv): block q of send starts at element
//                  send_displs[q] and block q of recv at recv_displs[q] instead (size() entries
//                  each, any order, gaps allowed). Each block must lie inside its buffer
//                  (displs[q] + counts[q] <= count); send blocks may overlap, recv blocks of
//                  nonzero count may not; send and recv may not overlap. Elements of recv
//                  outside its blocks are left as they were.
//   GatherV        counts on the root only (ignored elsewhere): rank q's send (counts[q]
//                  elements) lands in block q of the root's recv (sum of counts)
//   ScatterV       counts on the root only (ignored elsewhere): block q of the root's send (sum
//                  of counts) lands in rank q's recv (counts[q] elements)
// A v-variant's counts that disagree between ranks fail the call on every rank with
// kFailedPrecondition, naming a pair of ranks and what each passed.
// A call is in place when recv.data == send.data (AllReduce, Broadcast, Reduce, AllToAll), or
// when the rank's own block of the large buffer is the small one (send.data == recv.data +
// rank*n*elem for AllGather and the root's Gather, recv.data == send.data + rank*n*elem for
// ReduceScatter and the root's Scatter; for the v-variants the rank's block offset instead of
// rank*n). Any other overlap is rejected. Every rank must pass the
// same root, in [0, size()).
//
// Every rank must make the same calls in the same order with matching counts, types, ops and
// roots; a mismatch is detected in the call and fails it with kFailedPrecondition, naming both
// ranks' calls, rather than corrupt data. The first message each rank receives carries the
// call's fingerprint; where no message can show it (two ranks that each think they are a
// Gather's root wait on each other), a wait that lasts 20 ms looks at the call its peers are in
// (read from shared memory, or asked over TCP and MPI), so the call fails within about 0.1 s,
// not at its deadline. It fails in the call on every rank of the symmetric collectives and the
// barrier; a rank of a rooted one that had already done its part and returned (a root over TCP
// once its sends are out, a leaf of a Reduce or Gather once it has sent) gets the same failure
// from its next call, since catching it in the call would cost every valid call a round trip.
// A call with count 0 still meets the peers, so a rank passing 0 where the others pass 8 fails
// that call like any other mismatch.
//
// Errors: arguments are checked before anything is sent. A rejected call returns
// kInvalidArgument on the rank that rejected it and on every rank that waits for it in that
// call (naming the rejecting rank and its reason); all abandon it and the communicator stays
// usable on every rank. Every rank of the symmetric collectives and the barrier waits for every
// other, so there every rank gets kInvalidArgument; in a rooted one, a rank whose part needed
// nothing from the rejecting rank (a leaf of a Reduce or Gather that only sends, a Scatter's or
// Broadcast's receiver fed by the root) may complete its part, correctly, and return OK. Any
// other failure (deadline, abort, a peer's death, a mismatch) is sticky: this and every later
// call return it, and health() reports it. status.h says what each code means.
//
// Thread safety: a Communicator belongs to one rank and must be driven by one thread at a time.
// Abort() may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "chorus/export.h"
#include "chorus/options.h"
#include "chorus/status.h"
#include "chorus/types.h"

namespace chorus {
CHORUS_API_BEGIN

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kBarrier,
  kGather,
  kScatter,
  kAllToAll,
  kAllGatherV,
  kReduceScatterV,
  kAllToAllV,
  kGatherV,
  kScatterV,
};
inline constexpr int kNumCollectiveKinds = 14;
std::string_view CollectiveKindName(CollectiveKind kind);  // "allreduce", ...

// Payload bytes this rank handed to / took from its peers (headers are not counted).
struct Traffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t calls = 0;  // completed calls

  Traffic& operator+=(const Traffic& o) {
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    calls += o.calls;
    return *this;
  }
};

struct TrafficCounters {
  std::array<Traffic, kNumCollectiveKinds> by_kind{};
  Traffic messages;  // point-to-point: Send and Recv
  Traffic total;

  const Traffic& of(CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
};

class Communicator;
CHORUS_API_END
namespace internal {
class CommState;
struct CallArgs;
// Runs any collective from its descriptor (base/collectives.h): for tools and tests that walk
// the collective table (not exported by the shared library).
CHORUS_HIDDEN Status RunCollective(Communicator& comm, const CallArgs& call,
                                   const CallOptions& options);
}  // namespace internal
CHORUS_API_BEGIN

class Communicator {
 public:
  // The library's own (not exported by the shared library).
  CHORUS_HIDDEN explicit Communicator(std::unique_ptr<internal::CommState> state);
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  // Joins a communicator of options.size ranks as options.rank, meeting the others through
  // options.store (or options.store_url) and picking a transport (see TransportKind). Every
  // rank calls it with the same size, name and store; it returns once all have joined, or
  // kDeadlineExceeded naming the ranks that did not within options.timeout.
  static Result<Communicator> Create(const CommOptions& options);

  int rank() const;
  int size() const;
  // The transport this communicator runs on (never kAuto).
  TransportKind transport() const;

  Status AllReduce(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                   const CallOptions& options = {});
  Status ReduceScatter(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                       const CallOptions& options = {});
  Status AllGather(ConstBuffer send, MutableBuffer recv, const CallOptions& options = {});
  Status Broadcast(ConstBuffer send, MutableBuffer recv, int root, const CallOptions& options = {});
  Status Reduce(ConstBuffer send, MutableBuffer recv, ReduceOp op, int root,
                const CallOptions& options = {});
  Status Barrier(const CallOptions& options = {});
  Status Gather(ConstBuffer send, MutableBuffer recv, int root, const CallOptions& options = {});
  Status Scatter(ConstBuffer send, MutableBuffer recv, int root, const CallOptions& options = {});
  Status AllToAll(ConstBuffer send, MutableBuffer recv, const CallOptions& options = {});
  Status AllGatherV(ConstBuffer send, MutableBuffer recv, std::span<const size_t> counts,
                    const CallOptions& options = {});
  Status ReduceScatterV(ConstBuffer send, MutableBuffer recv, std::span<const size_t> counts,
                        ReduceOp op, const CallOptions& options = {});
  Status AllToAllV(ConstBuffer send, std::span<const size_t> send_counts, MutableBuffer recv,
                   std::span<const size_t> recv_counts, const CallOptions& options = {});
  Status AllToAllV(ConstBuffer send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_displs, MutableBuffer recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                   const CallOptions& options = {});
  Status GatherV(ConstBuffer send, MutableBuffer recv, std::span<const size_t> counts, int root,
                 const CallOptions& options = {});
  Status ScatterV(ConstBuffer send, std::span<const size_t> counts, MutableBuffer recv, int root,
                  const CallOptions& options = {});

  // Typed overloads; T is deduced from the recv span, and a non-const send span converts.
  template <Element T>
  Status AllReduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
                   const CallOptions& options = {}) {
    return AllReduce(MakeBuffer(send), MakeBuffer(recv), op, options);
  }
  template <Element T>  // in place
  Status AllReduce(std::span<T> inout, ReduceOp op, const CallOptions& options = {}) {
    return AllReduce(MakeBuffer(inout), MakeBuffer(inout), op, options);
  }
  template <Element T>
  Status ReduceScatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                       ReduceOp op, const CallOptions& options = {}) {
    return ReduceScatter(MakeBuffer(send), MakeBuffer(recv), op, options);
  }
  template <Element T>
  Status AllGather(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                   const CallOptions& options = {}) {
    return AllGather(MakeBuffer(send), MakeBuffer(recv), options);
  }
  template <Element T>
  Status Broadcast(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                   const CallOptions& options = {}) {
    return Broadcast(MakeBuffer(send), MakeBuffer(recv), root, options);
  }
  template <Element T>  // in place
  Status Broadcast(std::span<T> inout, int root, const CallOptions& options = {}) {
    return Broadcast(MakeBuffer(inout), MakeBuffer(inout), root, options);
  }
  template <Element T>
  Status Reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
                int root, const CallOptions& options = {}) {
    return Reduce(MakeBuffer(send), MakeBuffer(recv), op, root, options);
  }
  template <Element T>  // in place
  Status Reduce(std::span<T> inout, ReduceOp op, int root, const CallOptions& options = {}) {
    return Reduce(MakeBuffer(inout), MakeBuffer(inout), op, root, options);
  }
  template <Element T>
  Status Gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                const CallOptions& options = {}) {
    return Gather(MakeBuffer(send), MakeBuffer(recv), root, options);
  }
  template <Element T>
  Status Scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                 const CallOptions& options = {}) {
    return Scatter(MakeBuffer(send), MakeBuffer(recv), root, options);
  }
  template <Element T>
  Status AllToAll(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                  const CallOptions& options = {}) {
    return AllToAll(MakeBuffer(send), MakeBuffer(recv), options);
  }
  template <Element T>  // in place
  Status AllToAll(std::span<T> inout, const CallOptions& options = {}) {
    return AllToAll(MakeBuffer(inout), MakeBuffer(inout), options);
  }
  template <Element T>
  Status AllGatherV(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                    std::span<const size_t> counts, const CallOptions& options = {}) {
    return AllGatherV(MakeBuffer(send), MakeBuffer(recv), counts, options);
  }
  template <Element T>
  Status ReduceScatterV(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                        std::span<const size_t> counts, ReduceOp op,
                        const CallOptions& options = {}) {
    return ReduceScatterV(MakeBuffer(send), MakeBuffer(recv), counts, op, options);
  }
  template <Element T>
  Status AllToAllV(std::span<const std::type_identity_t<T>> send,
                   std::span<const size_t> send_counts, std::span<T> recv,
                   std::span<const size_t> recv_counts, const CallOptions& options = {}) {
    return AllToAllV(MakeBuffer(send), send_counts, MakeBuffer(recv), recv_counts, options);
  }
  template <Element T>
  Status AllToAllV(std::span<const std::type_identity_t<T>> send,
                   std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                   std::span<T> recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_displs, const CallOptions& options = {}) {
    return AllToAllV(MakeBuffer(send), send_counts, send_displs, MakeBuffer(recv), recv_counts,
                     recv_displs, options);
  }
  template <Element T>
  Status GatherV(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                 std::span<const size_t> counts, int root, const CallOptions& options = {}) {
    return GatherV(MakeBuffer(send), MakeBuffer(recv), counts, root, options);
  }
  template <Element T>
  Status ScatterV(std::span<const std::type_identity_t<T>> send, std::span<const size_t> counts,
                  std::span<T> recv, int root, const CallOptions& options = {}) {
    return ScatterV(MakeBuffer(send), counts, MakeBuffer(recv), root, options);
  }

  // Refuses this rank's next call, a `kind` call, as if its arguments were invalid: nothing
  // is sent; this rank gets kInvalidArgument "<kind>: <reason>", and every rank that enters
  // that call gets kInvalidArgument naming this rank and the reason; all abandon it and the
  // communicator stays usable. For bindings that check arguments the library cannot see (a
  // read-only or non-contiguous array), so that the peers hear of it instead of waiting out
  // their deadline. A failed communicator returns its failure instead.
  Status RejectCall(CollectiveKind kind, const std::string& reason);

  // Point-to-point. Send sends `data` to rank `peer` and returns once it is out of `data` (the
  // caller may reuse it), whether or not `peer` has called Recv yet; Recv receives the next
  // message from `peer` into `data`. Between two ranks messages arrive in the order sent; a
  // Recv's count, type and tag must be its message's, else the call fails on this rank with
  // kFailedPrecondition naming both and the group fails. A message to this rank itself waits
  // for its Recv. Messages and collectives may interleave as in MPI: a message sent before a
  // collective may be received after it (the receiver keeps it meanwhile), and ranks that all
  // send before they receive (an exchange, a ring shift) do not deadlock. A Recv that finds its
  // peer's data of a collective first (the peer sent nothing before that collective) fails with
  // kFailedPrecondition rather than wait; one whose peer is in a collective that sends this rank
  // nothing waits to its deadline. On TCP links made on demand (more than 16 ranks, or between
  // hosts), see src/algo/p2p.h. Sizes are not limited
  // by the transport: large messages go in segments. A bad argument (a peer out of range, a
  // null buffer) returns kInvalidArgument and sends nothing; any other failure (deadline, a
  // peer's death) is sticky, as for collectives. The other ranks take no part.
  Status Send(ConstBuffer data, int peer, const MessageOptions& options = {});
  Status Recv(MutableBuffer data, int peer, const MessageOptions& options = {});
  template <Element T>  // T may be const
  Status Send(std::span<T> data, int peer, const MessageOptions& options = {}) {
    return Send(MakeBuffer(std::span<const std::remove_cv_t<T>>(data)), peer, options);
  }
  template <Element T>
  Status Recv(std::span<T> data, int peer, const MessageOptions& options = {}) {
    return Recv(MakeBuffer(data), peer, options);
  }
  // Sends `send` to rank `to` and receives the next message from rank `from` into `recv`, both
  // at once (MPI_Sendrecv, a step of a ring or pipeline shift): the two move together as room
  // and data allow, so neither waits for the other to finish, and the message received goes
  // straight into `recv`. The same as Send then Recv in every other respect (order, matching,
  // errors, the tag applies to both); `to` and `from` may be the same rank or this one. send
  // and recv must not overlap. On thread ranks a message over 16 KiB goes by reference (copied
  // once, straight into the receiver's buffer): the call then also waits until `to`, or
  // anything `to` waits in, has taken it.
  Status SendRecv(ConstBuffer send, int to, MutableBuffer recv, int from,
                  const MessageOptions& options = {});
  template <Element T, Element U>  // T may be const
  Status SendRecv(std::span<T> send, int to, std::span<U> recv, int from,
                  const MessageOptions& options = {}) {
    return SendRecv(MakeBuffer(std::span<const std::remove_cv_t<T>>(send)), to, MakeBuffer(recv),
                    from, options);
  }

  // Whether a Recv from `peer` would go ahead now without waiting for `peer` to send: the next
  // message from `peer` has begun to arrive (MPI_Iprobe), or the Recv would fail at once (a
  // peer out of range or gone, a failed communicator). Never waits and never fails.
  bool Probe(int peer);
  // Waits until Probe holds for one of `peers`, WakeAwaitMessage() is called or `timeout`
  // passes; returns whether Probe holds for one of them. Meanwhile it takes in, as Recv does,
  // what other ranks send, so their sends go on. For a thread that serves receives as they
  // come among other work (the torch backend's irecv), and sleeps here while it has nothing
  // else to do.
  bool AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout);
  // Ends the AwaitMessage under way, or the next one to start, at once. Safe from any thread.
  void WakeAwaitMessage();

  // Splits the ranks into disjoint communicators by `color` (MPI_Comm_split, ncclCommSplit):
  // every rank of this communicator calls it; those that pass the same color >= 0 form a new
  // communicator, ranked by `key` (ties by their rank here), and a rank that passes kNoColor
  // gets none (an empty optional). Split(0, rank()) duplicates. A new communicator has this
  // one's options and is independent of it: its own transport (picked afresh from where its
  // ranks are: thread ranks stay threads, ranks of one host of a TCP job meet over shared
  // memory), calls, failures and Abort, and either may outlive the other. Thread, shm and TCP
  // ranks meet through the store this communicator met through (CreateLocalGroup's ranks
  // through one of their own in this process), which must still be served for later splits: a
  // store that rank 0 serves (torchrun's MASTER_PORT) lives as long as a communicator of rank
  // 0's made from it. It is collective over this communicator, as a call: two all-gathers on
  // it, counted in its traffic, which no call of the API can match (a rank in another call fails
  // the group as any mismatch does). options.timeout bounds the new group's meeting; the
  // closing all-gather waits as long again for ranks that started late. A color below kNoColor
  // returns kInvalidArgument on every rank, and all stay usable; any other failure (a peer's,
  // or a rank that cannot make its new communicator, named) fails this communicator on every
  // rank, as a call's would. MPI ranks split by MPI_Comm_split on a duplicate of their MPI
  // communicator: every step is an MPI collective, which, as CreateMpiCommunicator, blocks until
  // every rank has called it (no deadline), and counts no traffic here.
  static constexpr int kNoColor = -1;
  Result<std::optional<Communicator>> Split(int color, int key, const CallOptions& options = {});
  // A new communicator of this one's ranks but those in `exclude`, in the same order
  // (ncclCommShrink, MPIX_Comm_shrink): for going on after ranks failed or left. Every rank not
  // excluded calls it with the same list (any order); excluded ranks do not call it. It runs no
  // call on this communicator, so it works on a failed one (a peer died, a deadline passed, an
  // Abort), which it leaves as it is: destroy it when done. Thread, shm and TCP ranks meet
  // through the store this communicator met through, which must still be served (chorus
  // launch's is; torchrun's, served by rank 0, goes with rank 0). The transport is picked
  // afresh, as for Split. kInvalidArgument for a rank out of range or listed twice, this rank
  // listed, or a timeout that is not positive (nothing changes); any other failure fails this
  // communicator too, if it had not failed. After options.timeout, kDeadlineExceeded naming the
  // ranks that did not join: ranks that pass different lists meet apart, and so time out. A
  // retry after a failed attempt meets afresh. MPI ranks shrink by MPI_Comm_create_group among
  // the ranks kept, which has no deadline (ranks that disagree on the list make an erroneous MPI
  // program) and needs an MPI that survived the failure; destroying the old communicator then
  // waits up to its timeout for an excluded rank that is gone.
  Result<Communicator> Shrink(std::span<const int> exclude, const CallOptions& options = {});
  Result<Communicator> Shrink(std::initializer_list<int> exclude,
                              const CallOptions& options = {}) {
    return Shrink(std::span<const int>(exclude.begin(), exclude.size()), options);
  }

  // Fails this communicator and every rank of its group with kAborted; waiting calls return
  // promptly. Safe from any thread; idempotent.
  void Abort();
  // OK, or the sticky failure that later calls will return.
  Status health() const;

  // Payload bytes moved by this rank, per collective kind and in total.
  TrafficCounters traffic() const;
  void ResetTraffic();

 private:
  friend Status internal::RunCollective(Communicator& comm, const internal::CallArgs& call,
                                        const CallOptions& options);
  std::unique_ptr<internal::CommState> state_;
};

// Options for Communicator::Create from the environment a launcher set, on top of `base`.
// Precedence, first match wins for each of rank and size (a rank not below the size is an error
// naming both variables):
//   1. chorus launch / by hand: CHORUS_RANK, CHORUS_WORLD_SIZE
//   2. torchrun: RANK, WORLD_SIZE
//   3. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   4. MPICH / PMI: PMI_RANK, PMI_SIZE
//   5. Slurm: SLURM_PROCID, SLURM_NTASKS
// The store, first match wins: CHORUS_STORE (tcp://host:port or file:///path); MASTER_ADDR and
// MASTER_PORT (rank 0 serves the store; under torchrun itself, whose agent holds MASTER_PORT,
// on MASTER_PORT + 1; a torchrun job with every rank on one host (LOCAL_WORLD_SIZE =
// WORLD_SIZE) and no secret given bootstraps as below, with a fresh secret, on loopback); else,
// under mpirun, MPICH or Slurm (whose job id names the file),
// a bootstrap:// store: rank 0 serves one and publishes its address in a 0600 file in
// CHORUS_BOOTSTRAP_DIR (default /tmp; across hosts a shared directory).
// Also: CHORUS_SECRET or CHORUS_SECRET_FILE (the job's secret), CHORUS_SOCKET_IFNAME (where TCP
// ranks listen), CHORUS_TRANSPORT (auto, thread, shm, tcp), the job id (CHORUS_JOB_ID, else
// TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID or OMPI_MCA_ess_base_jobid), and what
// LocalOptionsFromEnvironment reads. Values already set in `base` (rank >= 0, size > 0, a store,
// a secret, a job id, a transport other than kAuto, ...) are kept. Errors name the variable and
// its value.
Result<CommOptions> CommOptionsFromEnvironment(CommOptions base = {});

// The environment's settings that apply to any communicator, thread groups included, on top of
// `base`: CHORUS_TIMEOUT_MS (overrides base.timeout), CHORUS_ALGO, CHORUS_WAIT (auto, sleep,
// sleep-checked), CHORUS_SLOT_STORES (auto, cached, stream) and the tuning file
// (CHORUS_TUNING_FILE, which must exist, or "builtin" for the built-in defaults; else
// $XDG_CONFIG_HOME/chorus/tuning.conf or ~/.config/chorus/tuning.conf when it exists).
//   auto group = chorus::CreateLocalGroup(4, *chorus::LocalOptionsFromEnvironment());
Result<CommOptions> LocalOptionsFromEnvironment(CommOptions base = {});

// Creates `n` ranks as threads of this process: element r is rank r. Drive each from its own
// thread. Requires 1 <= n <= 1024 and valid options.
Result<std::vector<Communicator>> CreateLocalGroup(int n, const CommOptions& options = {});

CHORUS_API_END
}  // namespace chorus
