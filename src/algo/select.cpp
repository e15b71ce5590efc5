// The selection table (see select.h). The rules say where an algorithm may run at all; where a
// rule has a size in it, that crossover was measured with `chorus bench` on the 2-core
// development machine. Between the allowed ones the cost model decides; docs/algorithms.md has
// the costs behind both.
#include "algo/select.h"

#include <array>
#include <string>

#include "algo/alltoall.h"
#include "algo/bruck.h"
#include "algo/direct.h"
#include "algo/hierarchical.h"
#include "algo/recursive.h"
#include "algo/ring.h"
#include "algo/rooted.h"
#include "algo/varied.h"
#include "model/tuning.h"

namespace chorus::internal {
namespace {

// Crossovers measured with `chorus bench --algo` on the development machine (2 cores; p = 2 and
// 4, so 4 ranks take turns on the cores). On thread and shm ranks each size range allows one
// algorithm: there a step's real cost is mostly waiting for a peer to be scheduled, which the
// alpha-beta-gamma model does not see (at 4 KiB on 4 thread ranks it predicts direct, 3 us,
// over one-shot, 4 us; one-shot measures 9.9 us and direct 16.1 us).
//
// One-shot against everything else: thread ranks at 16 KiB / 64 KiB, p = 4: 15.0 / 38.9 us
// against direct 19.8 / 35.7 us; shm ranks at 64 KiB: p = 2 10.1 us against the ring's 13.2,
// p = 4 40.2 us against 46.3.
constexpr size_t kThreadOneShotMaxBytes = size_t{16} << 10;
constexpr size_t kShmOneShotMaxBytes = size_t{64} << 10;
// Through shared memory every pair of ranks in a direct algorithm needs its own staging, and
// the ring's pipeline wins above this size.
constexpr size_t kShmDirectMaxBytes = size_t{256} << 10;

bool IsThread(const CallShapeForSelection& s) { return s.transport == TransportKind::kThread; }
bool IsShm(const CallShapeForSelection& s) { return s.transport == TransportKind::kShm; }
bool IsNetwork(const CallShapeForSelection& s) {
  return s.transport == TransportKind::kTcp || s.transport == TransportKind::kMpi;
}

// MPI keeps the ring and recursive algorithms: its own small-message paths sit underneath.
// Over TCP the model weighs one-shot's p - 1 copies against the others' steps.
bool OneShotFits(const CallShapeForSelection& s) {
  if (IsThread(s)) return s.bytes <= kThreadOneShotMaxBytes;
  if (IsShm(s)) return s.bytes <= kShmOneShotMaxBytes;
  return s.transport == TransportKind::kTcp;
}
bool DirectAllReduceFits(const CallShapeForSelection& s) {
  return IsThread(s) && s.bytes > kThreadOneShotMaxBytes;
}
bool MultiHost(const CallShapeForSelection& s) { return s.multi_host; }
bool RingAllReduceFits(const CallShapeForSelection& s) {
  return IsNetwork(s) || (IsShm(s) && s.bytes > kShmOneShotMaxBytes);
}
// The logarithmic algorithms pay off where a message costs tens of microseconds. Through shared
// memory the ring's fused reduce-and-forward measured faster than the halving and doubling
// exchanges (1 MiB on 4 ranks: 171 us against 212 us), and thread ranks have the direct
// algorithms. Across hosts with several ranks each, the hierarchical all-reduce and the ring
// keep the slow links for one chunk per rank.
bool Networked(const CallShapeForSelection& s) { return IsNetwork(s) && !s.multi_host; }
// Direct RS/AG read peers' buffers in place on threads at any size.
bool DirectFits(const CallShapeForSelection& s) {
  return IsThread(s) || (IsShm(s) && s.bytes <= kShmDirectMaxBytes);
}
bool RingFits(const CallShapeForSelection& s) { return !DirectFits(s); }
// From 3 shm ranks on, the direct all-gather copies each block into staging once for all
// peers (Channel::SendToAll), which beats the ring's copy per hop for large buffers: p = 4,
// 4 MiB 430 us against 680-840, 64 MiB 12.5 ms against 14.6; at 1 MiB the ring still wins
// (96 us against 299), and at p = 2 the two are level.
constexpr size_t kShmBroadcastMinBytes = size_t{4} << 20;
bool DirectAllGatherFits(const CallShapeForSelection& s) {
  return DirectFits(s) || (IsShm(s) && s.ranks >= 3 && s.bytes >= kShmBroadcastMinBytes);
}
bool RingAllGatherFits(const CallShapeForSelection& s) { return !DirectAllGatherFits(s); }
// The direct all-gather-v where one staged copy serves several peers: large shm calls from 3
// ranks, and from 4 ranks the small ones too, where its one step beats pairwise's three rounds
// (shm p = 4, medians of 3 interleaved runs of 0.3 s each: 32 B 5.2 us against 8.3, 4 KiB 5.8
// against 8.9, 64 KiB 18.5 against 19.6, 256 KiB level; at p = 3 pairwise was ahead to 4 KiB,
// 4.7-5.1 us against 5.0-5.8, and at p = 2 the two are one exchange).
bool DirectAllGatherVFits(const CallShapeForSelection& s) {
  return IsThread(s) || (IsShm(s) && s.ranks >= 4 && s.bytes <= kShmDirectMaxBytes) ||
         (IsShm(s) && s.ranks >= 3 && s.bytes >= kShmBroadcastMinBytes);
}
// Rooted collectives: on thread ranks peers read the root's buffer in place; through shared
// memory one staged copy serves every peer while the buffer is small; over the network the
// model weighs the root's p - 1 sends against the chain's p - 1 hops.
bool DirectRootedFits(const CallShapeForSelection& s) { return DirectFits(s) || IsNetwork(s); }
bool ChainFits(const CallShapeForSelection& s) { return !IsThread(s); }
// At p = 2 the reduce-scatter + gather reduce is the chain with one more dependent hop, and the
// root both sends and receives half the buffer: measured twice the chain's time (shm 1 MiB:
// 123 us against 68; TCP 16 MiB: 6.9 ms against 4.3).
bool RsGatherFits(const CallShapeForSelection& s) { return !IsThread(s) && s.ranks >= 3; }
bool OnOneHost(const CallShapeForSelection& s) { return !IsNetwork(s); }
// The flag barrier while ranks take turns on the cores; where each has a core, the direct
// barrier of empty messages, since the call after a flag barrier pays for it (a flag is a word
// its rank rewrites on every call, which the peers polled): a 32-byte all-reduce took 0.87 us
// after a flag barrier against 0.52 after a direct one (2 thread ranks, median over 200,000)
// and 0.66 against 0.52 on 2 shm ranks, the barriers themselves level (0.60-0.64 us). With 3
// and 4 thread ranks on 2 cores the flag barrier is as fast or faster, and the call after it
// level (4 ranks: 6.7 us against 7.0); docs/algorithms.md has the shm figures.
bool FlagBarrierFits(const CallShapeForSelection& s) {
  return OnOneHost(s) && s.cores > 0 && s.ranks > s.cores;
}
bool DirectBarrierFits(const CallShapeForSelection& s) {
  return OnOneHost(s) && !FlagBarrierFits(s);
}
// Direct all-to-all(-v): on thread ranks always; through shared memory too up to 1 MiB, where
// its one step beat the pairwise rounds (medians of 3 interleaved runs of 0.3 s: p = 4, 32 B
// 5.0 us against 8.0, 64 KiB 15.8 against 18.6, 1 MiB 104 against 139; p = 8, 32 B 12.4
// against 42, 1 MiB 326 against 431-500; p = 3 1 MiB 95 against 106; all-to-all-v p = 4 alike).
// At 4 MiB and 16 MiB on 4 ranks the two were level; at p = 2 both are one exchange.
constexpr size_t kShmDirectAllToAllMaxBytes = size_t{1} << 20;
bool DirectAllToAllFits(const CallShapeForSelection& s) {
  return IsThread(s) || (IsShm(s) && s.bytes <= kShmDirectAllToAllMaxBytes);
}
// Bruck's all-to-all trades p - 1 steps for ceil(log2 p) of about half the buffer each: over
// TCP from 4 ranks while the blocks are small. Loopback, medians of 2-3 interleaved runs
// (bruck / pairwise): p = 4, 32 B 171-197 / 192-256 us, 16 KiB 176-188 / 192-232, 32 KiB level,
// 64 KiB 249-309 / 180-301; p = 8, 32 B 586-694 / 1014-1185, 64 KiB 774-1009 / 1186-1338,
// 256 KiB 1542-1796 / 1332-1586. At p = 3 (2 steps against 3 rounds) pairwise won from 4 KiB
// and tied below.
constexpr size_t kBruckAllToAllMaxBlockBytes = size_t{8} << 10;
bool BruckAllToAllFits(const CallShapeForSelection& s) {
  return s.transport == TransportKind::kTcp && !s.multi_host && s.ranks >= 4 &&
         s.bytes <= kBruckAllToAllMaxBlockBytes * static_cast<size_t>(s.ranks);
}
bool PairwiseAllToAllFits(const CallShapeForSelection& s) {
  return !DirectAllToAllFits(s) && !BruckAllToAllFits(s);
}
bool PairwiseAllToAllVFits(const CallShapeForSelection& s) { return !DirectAllToAllFits(s); }

bool Anywhere(const CallShapeForSelection&) { return true; }

constexpr std::array<AlgorithmInfo, 36> kAlgorithms = {{
    {CollectiveKind::kAllReduce, "oneshot",
     "every rank sends its input to every peer and reduces all p inputs itself; 1 step",
     "thread ranks <= 16 KiB; shm ranks <= 64 KiB; TCP ranks", OneShotFits, OneShotAllReduce,
     model::OneShotAllReduceTerms},
    {CollectiveKind::kAllReduce, "direct",
     "direct reduce-scatter (chunks read in place) then direct all-gather; 2 steps",
     "thread ranks > 16 KiB", DirectAllReduceFits, DirectAllReduce, model::DirectAllReduceTerms},
    {CollectiveKind::kAllReduce, "hierarchical",
     "shm reduce-scatter in each host, TCP ring all-reduce across hosts, shm all-gather",
     "ranks on several hosts, the same number (> 1) on each", MultiHost, HierarchicalAllReduce,
     model::HierarchicalAllReduceTerms},
    {CollectiveKind::kAllReduce, "ring",
     "pipelined ring reduce-scatter then ring all-gather; 2(p-1) steps, 2(p-1)/p n bytes",
     "shm ranks > 64 KiB; TCP and MPI ranks", RingAllReduceFits, RingAllReduce,
     model::RingAllReduceTerms},
    {CollectiveKind::kAllReduce, "rabenseifner",
     "recursive-halving reduce-scatter then recursive-doubling all-gather; 2 log2 p steps",
     "TCP or MPI ranks, one per host or all on one", Networked, RabenseifnerAllReduce,
     model::RabenseifnerAllReduceTerms},
    {CollectiveKind::kAllReduce, "rd",
     "recursive doubling: log2 p steps, each swapping and combining the whole buffer",
     "TCP or MPI ranks, one per host or all on one", Networked, RecursiveDoublingAllReduce,
     model::RecursiveDoublingAllReduceTerms},
    {CollectiveKind::kReduceScatter, "direct",
     "rank r reduces chunk r of every input (read in place on threads); 1 step",
     "thread ranks; shm ranks with buffer <= 256 KiB", DirectFits, DirectReduceScatter,
     model::DirectReduceScatterTerms},
    {CollectiveKind::kReduceScatter, "ring", "pipelined ring; p-1 steps, (p-1)/p n bytes",
     "where direct is not", RingFits, RingReduceScatter, model::RingReduceScatterTerms},
    {CollectiveKind::kAllGather, "direct",
     "every rank copies every block straight from its owner; 1 step",
     "thread ranks; shm ranks <= 256 KiB, or >= 4 MiB with 3 or more ranks", DirectAllGatherFits,
     DirectAllGather, model::DirectAllGatherTerms},
    {CollectiveKind::kAllGather, "ring", "pipelined ring; p-1 steps, (p-1)/p n bytes",
     "where direct is not", RingAllGatherFits, RingAllGather, model::RingAllGatherTerms},
    {CollectiveKind::kAllGather, "bruck",
     "Bruck: ceil(log2 p) steps, doubling the blocks each rank holds",
     "TCP or MPI ranks, one per host or all on one", Networked, BruckAllGather,
     model::BruckAllGatherTerms},
    {CollectiveKind::kBroadcast, "direct",
     "the root sends every segment to all peers at once (read in place on threads); 1 step",
     "thread ranks; shm ranks <= 256 KiB; TCP and MPI ranks", DirectRootedFits, DirectBroadcast,
     model::DirectBroadcastTerms},
    {CollectiveKind::kBroadcast, "chain",
     "pipelined chain from the root; p-1 hops, n bytes per rank", "all but thread ranks", ChainFits,
     ChainBroadcast, model::ChainBroadcastTerms},
    {CollectiveKind::kBroadcast, "binomial",
     "binomial tree from the root, pipelined by segment; ceil(log2 p) steps", "TCP and MPI ranks",
     IsNetwork, BinomialBroadcast, model::BinomialBroadcastTerms},
    {CollectiveKind::kBroadcast, "scatter_allgather",
     "the root scatters one chunk per rank, then a ring all-gather; p steps, 2(p-1)/p n bytes",
     "TCP and MPI ranks", IsNetwork, ScatterAllGatherBroadcast,
     model::ScatterAllGatherBroadcastTerms},
    {CollectiveKind::kReduce, "direct",
     "every rank sends its input to the root, which combines them in rank order; 1 step",
     "thread ranks; shm ranks <= 256 KiB; TCP and MPI ranks", DirectRootedFits, DirectReduce,
     model::DirectReduceTerms},
    {CollectiveKind::kReduce, "chain",
     "pipelined chain of partial sums ending at the root; p-1 hops, n bytes per rank",
     "all but thread ranks", ChainFits, ChainReduce, model::ChainReduceTerms},
    {CollectiveKind::kReduce, "binomial",
     "binomial tree of partial sums ending at the root, pipelined by segment; ceil(log2 p) "
     "steps",
     "TCP and MPI ranks", IsNetwork, BinomialReduce, model::BinomialReduceTerms},
    {CollectiveKind::kReduce, "rs_gather",
     "Rabenseifner: a ring reduce-scatter whose ranks send their reduced chunk to the root; p "
     "steps, 2(p-1)/p n bytes at the root",
     "all but thread ranks, from 3 ranks", RsGatherFits, ReduceScatterGatherReduce,
     model::ReduceScatterGatherReduceTerms},
    {CollectiveKind::kBarrier, "flag",
     "every rank raises its flag in shared memory and waits for its peers' (elsewhere: direct); "
     "1 step, no messages",
     "thread and shm ranks that outnumber the cores", FlagBarrierFits, FlagBarrier,
     model::FlagBarrierTerms},
    {CollectiveKind::kBarrier, "direct", "an empty message to and from every peer; 1 step",
     "thread and shm ranks with a core each", DirectBarrierFits, DirectBarrier,
     model::DirectBarrierTerms},
    {CollectiveKind::kBarrier, "dissemination",
     "round k signals rank r+2^k and waits for r-2^k; ceil(log2 p) steps", "TCP and MPI ranks",
     IsNetwork, DisseminationBarrier, model::DisseminationBarrierTerms},
    {CollectiveKind::kGather, "direct",
     "every rank sends its block to the root (read in place on threads); 1 step", "every transport",
     Anywhere, DirectGather, model::DirectGatherTerms},
    {CollectiveKind::kScatter, "direct",
     "the root sends block q to rank q (read in place on threads); 1 step", "every transport",
     Anywhere, DirectScatter, model::DirectScatterTerms},
    {CollectiveKind::kAllToAll, "pairwise",
     "rounds of pairs swapping their blocks; p-1 rounds (p for odd p), (p-1)/p n bytes",
     "shm ranks > 1 MiB; TCP and MPI ranks but Bruck's", PairwiseAllToAllFits, PairwiseAllToAll,
     model::PairwiseAllToAllTerms},
    {CollectiveKind::kAllToAll, "bruck",
     "Bruck: ceil(log2 p) steps, each sending the blocks whose position has that bit set",
     "TCP ranks >= 4, one host or one per host, blocks <= 8 KiB", BruckAllToAllFits, BruckAllToAll,
     model::BruckAllToAllTerms},
    {CollectiveKind::kAllToAll, "direct",
     "every block at once, read straight from its owner on threads (in place: pairwise); 1 step",
     "thread ranks; shm ranks <= 1 MiB", DirectAllToAllFits, DirectAllToAll,
     model::DirectAllToAllTerms},
    {CollectiveKind::kAllGatherV, "pairwise",
     "rounds of pairs swapping their blocks; p-1 rounds (p for odd p)",
     "thread ranks; shm ranks with buffer <= 256 KiB", DirectFits, PairwiseAllGatherV,
     model::PairwiseAllGatherVTerms},
    {CollectiveKind::kAllGatherV, "direct",
     "every rank posts its block once for all peers (read in place on threads); 1 step",
     "thread ranks; shm ranks >= 4 with buffer <= 256 KiB, >= 3 with buffer >= 4 MiB",
     DirectAllGatherVFits, DirectAllGatherV, model::DirectAllGatherVTerms},
    {CollectiveKind::kAllGatherV, "ring",
     "pipelined ring over the ranks' own blocks, none padded; p-1 steps, n - n_(r+1) bytes",
     "where pairwise is not", RingFits, RingAllGatherV, model::RingAllGatherVTerms},
    {CollectiveKind::kReduceScatterV, "direct",
     "block q of every rank to rank q, reduced there in rank order; 1 step",
     "thread ranks; shm ranks with buffer <= 256 KiB", DirectFits, DirectReduceScatterV,
     model::DirectReduceScatterVTerms},
    {CollectiveKind::kReduceScatterV, "ring",
     "pipelined ring over the ranks' own blocks, none padded; p-1 steps, n - n_r bytes",
     "where direct is not", RingFits, RingReduceScatterV, model::RingReduceScatterVTerms},
    {CollectiveKind::kAllToAllV, "pairwise",
     "rounds of pairs swapping their blocks; p-1 rounds (p for odd p)",
     "shm ranks > 1 MiB; TCP and MPI ranks", PairwiseAllToAllVFits, PairwiseAllToAllV,
     model::PairwiseAllToAllVTerms},
    {CollectiveKind::kAllToAllV, "direct",
     "every block at once, read straight from its owner on threads; 1 step",
     "thread ranks; shm ranks <= 1 MiB", DirectAllToAllFits, DirectAllToAllV,
     model::DirectAllToAllVTerms},
    {CollectiveKind::kGatherV, "direct", "every rank sends its block to the root; 1 step",
     "every transport", Anywhere, DirectGatherV, model::DirectGatherVTerms},
    {CollectiveKind::kScatterV, "direct", "the root sends block q to rank q; 1 step",
     "every transport", Anywhere, DirectScatterV, model::DirectScatterVTerms},
}};

// The allowed algorithm predicted fastest; the collective's last algorithm when no rule allows
// any (a transport the rules do not know).
const AlgorithmInfo* Cheapest(const CallShapeForSelection& shape) {
  const AlgorithmInfo* best = nullptr;
  const AlgorithmInfo* ring = nullptr;
  const AlgorithmInfo* last = nullptr;
  double best_seconds = 0;
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.kind != shape.kind) continue;
    if (info.name == "ring") ring = &info;
    last = &info;
    if (!info.allowed(shape)) continue;
    const double seconds = PredictedSeconds(info, shape);
    if (best == nullptr || seconds < best_seconds) {
      best = &info;
      best_seconds = seconds;
    }
  }
  if (best != nullptr) return best;
  return ring != nullptr ? ring : last;
}

}  // namespace

std::span<const AlgorithmInfo> Algorithms() { return kAlgorithms; }

const AlgorithmInfo* FindAlgorithm(CollectiveKind kind, std::string_view name) {
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.kind == kind && info.name == name) return &info;
  }
  return nullptr;
}

bool Implements(CollectiveKind kind, std::string_view name) {
  return FindAlgorithm(kind, name) != nullptr;
}

double PredictedSeconds(const AlgorithmInfo& info, const CallShapeForSelection& shape) {
  static const model::Tuning defaults = model::DefaultTuning();
  const model::MachineParams& params =
      shape.params != nullptr ? *shape.params : defaults.For(shape.transport);
  return model::PredictSeconds(info.terms.get(), shape.ranks, static_cast<double>(shape.bytes),
                               params, shape.cores);
}

Result<const AlgorithmInfo*> SelectAlgorithm(const CallShapeForSelection& shape,
                                             std::string_view requested) {
  if (requested.empty()) return Cheapest(shape);
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.kind == shape.kind && info.name == requested) return &info;
  }
  // Only the error path builds strings: selection runs on every call.
  std::string names;
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.kind == shape.kind) names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  return InvalidArgument(std::string(CollectiveKindName(shape.kind)) + ": algorithm \"" +
                         std::string(requested) + "\" is not one of: " + names);
}

Result<const AlgorithmInfo*> Selector::Pick(CollectiveKind kind, size_t bytes,
                                            std::string_view requested) {
  shape_.kind = kind;
  shape_.bytes = bytes;
  if (!requested.empty()) return SelectAlgorithm(shape_, requested);
  for (const Recent& recent : recent_) {
    if (recent.info != nullptr && recent.kind == kind && recent.bytes == bytes) return recent.info;
  }
  const AlgorithmInfo* info = Cheapest(shape_);
  recent_[next_++ % recent_.size()] = {kind, bytes, info};
  return info;
}

}  // namespace chorus::internal
