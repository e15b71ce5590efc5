// The selection table (see select.h). Crossovers were measured on the 2-core development
// machine with `chorus bench`; docs/algorithms.md has the costs behind them.
#include "algo/select.h"

#include <array>
#include <string>

#include "algo/bruck.h"
#include "algo/direct.h"
#include "algo/hierarchical.h"
#include "algo/recursive.h"
#include "algo/ring.h"

namespace chorus::internal {
namespace {

constexpr size_t kOneShotMaxBytes = size_t{16} << 10;
constexpr size_t kShmDirectMaxBytes = size_t{256} << 10;

bool Always(const CallShapeForSelection&) { return true; }
bool OnRequest(const CallShapeForSelection&) { return false; }
// One message latency instead of the ring's 2(p-1). Over TCP too: on loopback, p = 2, 32 B
// takes 21-43 us one-shot against 21-60 us by ring, and p = 4 205 us against 362 us. MPI
// keeps the ring (its own small-message paths sit underneath).
bool SmallAllReduce(const CallShapeForSelection& s) {
  return s.transport != TransportKind::kMpi && s.bytes <= kOneShotMaxBytes;
}
bool MultiHost(const CallShapeForSelection& s) { return s.multi_host; }
bool ThreadRanks(const CallShapeForSelection& s) { return s.transport == TransportKind::kThread; }
// Direct RS/AG read peers' buffers in place on threads at any size; through shared memory
// every pair needs its own staging, so only for small buffers.
bool DirectFits(const CallShapeForSelection& s) {
  return s.transport == TransportKind::kThread ||
         (s.transport == TransportKind::kShm && s.bytes <= kShmDirectMaxBytes);
}

constexpr std::array<AlgorithmInfo, 11> kAlgorithms = {{
    {CollectiveKind::kAllReduce, "oneshot",
     "every rank sends its input to every peer and reduces all p inputs itself; 1 step",
     "buffer <= 16 KiB (not MPI)", SmallAllReduce, OneShotAllReduce},
    {CollectiveKind::kAllReduce, "direct",
     "direct reduce-scatter (chunks read in place) then direct all-gather; 2 steps",
     "thread ranks, larger buffers", ThreadRanks, DirectAllReduce},
    {CollectiveKind::kAllReduce, "hierarchical",
     "shm reduce-scatter in each host, TCP ring all-reduce across hosts, shm all-gather",
     "ranks on several hosts, the same number (> 1) on each", MultiHost, HierarchicalAllReduce},
    {CollectiveKind::kAllReduce, "rd",
     "recursive doubling: log2 p steps, each swapping and combining the whole buffer",
     "on request", OnRequest, RecursiveDoublingAllReduce},
    {CollectiveKind::kAllReduce, "rabenseifner",
     "recursive-halving reduce-scatter then recursive-doubling all-gather; 2 log2 p steps",
     "on request", OnRequest, RabenseifnerAllReduce},
    {CollectiveKind::kAllReduce, "ring",
     "pipelined ring reduce-scatter then ring all-gather; 2(p-1) steps, 2(p-1)/p n bytes",
     "otherwise", Always, RingAllReduce},
    {CollectiveKind::kReduceScatter, "direct",
     "rank r reduces chunk r of every input (read in place on threads); 1 step",
     "thread ranks; shm ranks with buffer <= 256 KiB", DirectFits, DirectReduceScatter},
    {CollectiveKind::kReduceScatter, "ring", "pipelined ring; p-1 steps, (p-1)/p n bytes",
     "otherwise", Always, RingReduceScatter},
    {CollectiveKind::kAllGather, "direct",
     "every rank copies every block straight from its owner; 1 step",
     "thread ranks; shm ranks with buffer <= 256 KiB", DirectFits, DirectAllGather},
    {CollectiveKind::kAllGather, "bruck",
     "Bruck: ceil(log2 p) steps, doubling the blocks each rank holds", "on request", OnRequest,
     BruckAllGather},
    {CollectiveKind::kAllGather, "ring", "pipelined ring; p-1 steps, (p-1)/p n bytes", "otherwise",
     Always, RingAllGather},
}};

}  // namespace

std::span<const AlgorithmInfo> Algorithms() { return kAlgorithms; }

Result<const AlgorithmInfo*> SelectAlgorithm(const CallShapeForSelection& shape,
                                             std::string_view requested) {
  for (const AlgorithmInfo& info : Algorithms()) {
    if (info.kind != shape.kind) continue;
    if (requested.empty() ? info.picks(shape) : info.name == requested) return &info;
  }
  // Only the error path builds strings: selection runs on every call.
  std::string names;
  for (const AlgorithmInfo& info : Algorithms()) {
    if (info.kind == shape.kind) names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  return InvalidArgument(std::string(CollectiveKindName(shape.kind)) + ": algorithm \"" +
                         std::string(requested) + "\" is not one of: " + names);
}

}  // namespace chorus::internal
