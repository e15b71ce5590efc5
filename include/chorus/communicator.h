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
// A call is in place when recv.data == send.data (AllReduce), or when the rank's own block of
// the large buffer is the small one (send.data == recv.data + rank*n*elem for AllGather,
// recv.data == send.data + rank*n*elem for ReduceScatter). Any other overlap is rejected.
//
// Every rank must make the same calls in the same order with matching counts, types and ops;
// a mismatch is detected and fails the communicator rather than corrupting data.
//
// Errors: arguments are checked before anything is sent. A rejected call returns
// kInvalidArgument; ranks that entered the same call on the other side then fail with kAborted
// naming the rank that rejected it (if every rank rejected it, the communicator stays usable).
// Any other failure (deadline, abort, a peer's failure) is sticky: this and every later call
// return it, and health() reports it.
//
// Thread safety: a Communicator belongs to one rank and must be driven by one thread at a time.
// Abort() may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "chorus/options.h"
#include "chorus/status.h"
#include "chorus/types.h"

namespace chorus {

enum class CollectiveKind : uint8_t { kAllReduce, kReduceScatter, kAllGather };
inline constexpr int kNumCollectiveKinds = 3;
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
  Traffic total;

  const Traffic& of(CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
};

namespace internal {
class CommState;
}

class Communicator {
 public:
  explicit Communicator(std::unique_ptr<internal::CommState> state);
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

  // Fails this communicator and every rank of its group with kAborted; waiting calls return
  // promptly. Safe from any thread; idempotent.
  void Abort();
  // OK, or the sticky failure that later calls will return.
  Status health() const;

  // Payload bytes moved by this rank, per collective kind and in total.
  TrafficCounters traffic() const;
  void ResetTraffic();

 private:
  std::unique_ptr<internal::CommState> state_;
};

// Options for Communicator::Create from the environment a launcher set, on top of `base`.
// Precedence, first match wins for each of rank, size and store:
//   1. chorus launch / by hand: CHORUS_RANK, CHORUS_WORLD_SIZE, CHORUS_STORE (tcp:// or file://)
//   2. torchrun: RANK, WORLD_SIZE, MASTER_ADDR + MASTER_PORT (rank 0 serves the store; under
//      torchrun itself, whose agent holds MASTER_PORT, on MASTER_PORT + 1)
//   3. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   4. MPICH / PMI: PMI_RANK, PMI_SIZE
//   5. Slurm: SLURM_PROCID, SLURM_NTASKS
// Under 3-5 without a store variable, ranks on one host meet in a file store under /tmp named
// after the launcher's job. CHORUS_TIMEOUT_MS overrides base.timeout. Values already set in
// `base` (rank >= 0, size > 0, a store) are kept. Errors name the variable and its value.
Result<CommOptions> CommOptionsFromEnvironment(CommOptions base = {});

// Creates `n` ranks as threads of this process: element r is rank r. Drive each from its own
// thread. Requires 1 <= n <= 1024 and valid options.
Result<std::vector<Communicator>> CreateLocalGroup(int n, const CommOptions& options = {});

}  // namespace chorus
