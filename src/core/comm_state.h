// The state behind a Communicator: its transport, options, sticky failure and counters.
// Thread safety: driven by the rank's thread; Abort() may come from any thread and only
// touches the transport's group failure, which is atomic.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algo/p2p.h"
#include "algo/primitives.h"
#include "algo/select.h"
#include "base/collectives.h"
#include "base/wait.h"
#include "chorus/communicator.h"
#include "chorus/store.h"
#include "model/cost_model.h"
#include "transport/transport.h"

namespace chorus::internal {

// Cache-line aligned (and so padded): thread ranks' states are allocated one after another, and
// a line shared with a neighbour's per-call writes would bounce between cores on every call.
class alignas(64) CommState {
 public:
  // `params`: the transport's calibrated costs (the tuning every rank agreed on), and `cores`
  // the cores the job's ranks share (0: count this host's), both for the selection; `own_cpu`
  // the CPU this rank has to itself (core/meet.h OwnCpu), or -1, for its waits.
  CommState(std::unique_ptr<Transport> transport, TransportKind kind, const CommOptions& options,
            const model::MachineParams& params, int cores = 0, int own_cpu = -1);

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  bool IsRank(int peer) const { return peer >= 0 && peer < size(); }
  TransportKind transport() const { return kind_; }
  // The store the ranks met through (unscoped), the job's secret and the store server this
  // rank hosts, if any: kept for Split, whose communicators meet through the same store, and
  // which keep the server alive as long as they live too.
  void KeepStore(std::shared_ptr<Store> store, std::string secret,
                 std::shared_ptr<TcpStoreServer> server) {
    store_ = std::move(store);
    secret_ = std::move(secret);
    store_server_ = std::move(server);
  }
  const std::shared_ptr<Store>& store() const { return store_; }
  const std::string& secret() const { return secret_; }
  const std::shared_ptr<TcpStoreServer>& store_server() const { return store_server_; }
  const CommOptions& options() const { return options_; }
  // How Split runs where ranks met through no store (MPI: by MPI_Comm_split). Called on every
  // rank, with its color and key as given, in place of the store's way, and does it all: the
  // checks, the agreement and the new communicator.
  using SplitFn = std::function<Result<std::optional<Communicator>>(int color, int key)>;
  void SetSplit(SplitFn fn) { split_ = std::move(fn); }
  const SplitFn& split() const { return split_; }
  // How Shrink makes the new communicator of ranks `keep` (in order) where ranks met through no
  // store (MPI: by MPI_Comm_create_group). Called on those ranks only.
  using ShrinkFn = std::function<Result<Communicator>(std::span<const int> keep)>;
  void SetShrink(ShrinkFn fn) { shrink_ = std::move(fn); }
  const ShrinkFn& shrink() const { return shrink_; }

  Status Run(const CallArgs& call, const CallOptions& options);
  Status Send(ConstBuffer data, int peer, const MessageOptions& options);
  Status Recv(MutableBuffer data, int peer, const MessageOptions& options);
  Status SendRecv(ConstBuffer send, int to, MutableBuffer recv, int from,
                  const MessageOptions& options);
  bool Probe(int peer);
  bool AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout);
  void WakeAwaitMessage();
  Status RejectCall(CollectiveKind kind, const std::string& reason);
  void Abort();
  // Fails this communicator on every rank with `status` (sticky here, and the group's failure),
  // unless it has failed already.
  void Fail(const Status& status);
  Status health() const;
  // The index the next call will have: the same on every rank, call for call.
  uint64_t next_call() const { return calls_; }

  TrafficCounters traffic() const { return traffic_; }
  void ResetTraffic() { traffic_ = {}; }

 private:
  void Quiesce(uint64_t call);
  // OK when a call of `op` may start: no sticky failure and none recorded by the group.
  Status Admit(std::string_view op);
  // A point-to-point call of `op` ("send", "recv", "sendrecv"): OK when it may start (Admit)
  // with these options; its peer argument `name` in range; its end, which adds the bytes it
  // moved since `before` to the totals and counts it, or keeps its failure.
  Status StartMessage(const char* op, const MessageOptions& options);
  // Send (recv null), Recv (send null) or SendRecv: checked, run and counted.
  Status Exchange(const char* op, const ConstBuffer* send, int to, const MutableBuffer* recv,
                  int from, const MessageOptions& options);
  Status CheckPeer(const char* op, const char* name, int peer) const;
  Status EndMessage(Status status, const Traffic& before);
  // Runs call `call` (validated) on the selected algorithm; counts its bytes, not the call.
  Status Execute(const CallArgs& args, const CallOptions& options, uint64_t call);
  // What a valid call derives from its arguments: validated, normalised, selected.
  struct Plan {
    // The key: the caller's arguments and options (algorithm empty).
    CallArgs args;
    std::optional<std::chrono::milliseconds> timeout;
    std::optional<size_t> segment_bytes;
    bool valid = false;
    // The plan: everything but the call index.
    const AlgorithmInfo* algorithm = nullptr;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t total = 0;
    bool empty = false;
    std::chrono::milliseconds call_timeout{0};
    CallContext ctx;
    // A v-call's arrays (counts, displacements), copied: the key's and the context's spans
    // point here, since the caller may change or free its own between calls. Their capacity
    // stays, so a plan remade for arrays no longer than before allocates nothing.
    std::array<std::vector<size_t>, 4> arrays;

    bool Matches(const CallArgs& a, const CallOptions& o) const;
    // Points args' and ctx's arrays at copies of their own.
    void KeepArrays();
  };
  // Checks nothing; Rejects the call when the algorithm is not found.
  Status Prepare(const CallArgs& args, const CallOptions& options, uint64_t call, Plan* plan);
  Status Launch(Plan& plan, uint64_t call);
  static bool IsIntegerAvg(DataType dtype, ReduceOp op, int size);
  // kAvg of an integer type, exactly: a uint64 sum of two lanes per element (communicator.cpp).
  Status RunIntegerAvg(const CallArgs& args, const CallOptions& options, uint64_t call);

  std::shared_ptr<TcpStoreServer> store_server_;
  std::shared_ptr<Store> store_;
  std::string secret_;
  SplitFn split_;
  ShrinkFn shrink_;
  std::unique_ptr<Transport> transport_;
  TransportKind kind_;
  CommOptions options_;
  Waiter waiter_;
  PointToPoint p2p_;
  SlotWriter slot_writer_;
  Selector selector_;
  Status sticky_;
  // Working memory of the algorithms, allocated once: one segment for reducing in place, and
  // one operand pointer and message per rank for the direct algorithms.
  // All three in one allocation of whole cache lines, for the reason CommState is aligned.
  struct alignas(64) Line {
    std::byte bytes[64];
  };
  std::unique_ptr<Line[]> workspace_;
  std::byte* scratch_ = nullptr;
  const void** operands_ = nullptr;
  Message* messages_ = nullptr;
  uint64_t calls_ = 0;                     // every call, rejected ones included: ranks agree on it
  std::unique_ptr<uint64_t[]> avg_lanes_;  // integer averages' lanes, made on first use
  std::unique_ptr<size_t[]> avg_counts_;   // ... and a reduce-scatter-v's lane counts
  TrafficCounters traffic_;
  // The last calls planned by Run, kept for the next ones with the same arguments (a training
  // loop's buckets, a benchmark's): they skip validation and selection.
  std::array<Plan, 4> plans_;
  unsigned next_plan_ = 0;
};

// Split's refusal of a color below kNoColor (core/split.cpp; the MPI split says the same).
std::string BadSplitColor(int color);

// Communicator::Create, with its deadline given: Split's communicators meet within the split's.
// `timeout` is the one its messages name (the call's, where options.timeout is the new
// communicator's default for its calls). `server`: a store server the new communicator keeps
// alive, as its parent does (when it serves none of its own).
Result<Communicator> CreateUntil(const CommOptions& options, Deadline deadline,
                                 std::chrono::milliseconds timeout,
                                 std::shared_ptr<TcpStoreServer> server = nullptr);

}  // namespace chorus::internal
