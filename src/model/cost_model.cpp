// Cost model of the ring algorithms (see cost_model.h and docs/algorithms.md).
//
// Rather than walking the schedule, each rank's traffic is "every chunk but one or two": in a
// ring phase a rank touches each chunk exactly once except the one it starts or ends with.
//   reduce-scatter  sends all chunks but r,   receives (and reduces) all but r-1
//   all-gather      sends all chunks but r+1, receives all but r
//   all-reduce      the two phases back to back
// so the cost of one rank is O(1), and of the slowest rank O(p). The test checks these sums
// against a step-by-step simulation of the schedule.
#include "model/cost_model.h"

#include <algorithm>

#include "base/collectives.h"

namespace chorus::model {
namespace {

// Elements in chunk `chunk` (taken mod ranks) of a `count`-element buffer split over `ranks`.
uint64_t ChunkElements(uint64_t count, int ranks, int chunk) {
  const int c = ((chunk % ranks) + ranks) % ranks;
  const uint64_t p = static_cast<uint64_t>(ranks);
  return count / p + (static_cast<uint64_t>(c) < count % p ? 1 : 0);
}

// The ring schedule of each collective it implements: a reduce-scatter phase, an all-gather
// phase, or both. A collective without a row has no ring schedule.
struct RingPhases {
  CollectiveKind kind;
  bool reduce_scatter;
  bool all_gather;
};
constexpr RingPhases kRingPhases[] = {
    {CollectiveKind::kReduceScatter, true, false},
    {CollectiveKind::kAllGather, false, true},
    {CollectiveKind::kAllReduce, true, true},
};

const RingPhases* PhasesOf(CollectiveKind kind) {
  for (const RingPhases& row : kRingPhases) {
    if (row.kind == kind) return &row;
  }
  return nullptr;
}

double Seconds(const RingCost& cost, const MachineParams& params) {
  return cost.steps * params.alpha_s +
         static_cast<double>(cost.bytes_sent) * params.beta_s_per_byte +
         static_cast<double>(cost.bytes_reduced) * params.gamma_s_per_byte;
}

}  // namespace

RingCost Ring(CollectiveKind kind, int ranks, int rank, size_t count, DataType dtype) {
  RingCost cost;
  const RingPhases* phases = PhasesOf(kind);
  if (ranks < 1 || rank < 0 || rank >= ranks || phases == nullptr) return cost;
  // One rank copies locally (if at all), and an empty buffer sends nothing: no messages.
  if (ranks == 1 || count == 0) return cost;

  const uint64_t elem = DataTypeSize(dtype);
  const uint64_t total = static_cast<uint64_t>(count) * elem;
  const uint64_t prev = ChunkElements(count, ranks, rank - 1) * elem;
  const uint64_t own = ChunkElements(count, ranks, rank) * elem;
  const uint64_t next = ChunkElements(count, ranks, rank + 1) * elem;
  const int phase_steps = ranks - 1;

  // Reduce-scatter: sends every chunk but its own, receives (and reduces into its input) every
  // chunk but the previous rank's. All-gather: sends every chunk but the next rank's, receives
  // every chunk but its own.
  if (phases->reduce_scatter) {
    cost.bytes_sent += total - own;
    cost.bytes_received += total - prev;
    cost.bytes_reduced += total - prev;
    cost.steps += phase_steps;
  }
  if (phases->all_gather) {
    cost.bytes_sent += total - next;
    cost.bytes_received += total - own;
    cost.steps += phase_steps;
  }
  return cost;
}

uint64_t RingBytesSent(CollectiveKind kind, int ranks, int rank, size_t count, DataType dtype) {
  return Ring(kind, ranks, rank, count, dtype).bytes_sent;
}

uint64_t RingMaxBytesSent(CollectiveKind kind, int ranks, size_t count, DataType dtype) {
  uint64_t most = 0;
  for (int r = 0; r < ranks; ++r) {
    most = std::max(most, RingBytesSent(kind, ranks, r, count, dtype));
  }
  return most;
}

double RingTime(CollectiveKind kind, int ranks, size_t count, DataType dtype,
                const MachineParams& params) {
  // The slowest single rank, not max(sent) * beta + max(reduced) * gamma: with an uneven split
  // the rank that sends most is not always the one that reduces most.
  double slowest = 0.0;
  for (int r = 0; r < ranks; ++r) {
    slowest = std::max(slowest, Seconds(Ring(kind, ranks, r, count, dtype), params));
  }
  return slowest;
}

double RingBytesClosedForm(CollectiveKind kind, int ranks, double bytes) {
  if (ranks <= 1 || !(bytes > 0.0) || PhasesOf(kind) == nullptr) return 0.0;
  return internal::Collective(kind).model_bytes(ranks) * bytes;
}

double RingTimeClosedForm(CollectiveKind kind, int ranks, double bytes,
                          const MachineParams& params) {
  const RingPhases* phases = PhasesOf(kind);
  if (ranks <= 1 || !(bytes > 0.0) || phases == nullptr) return 0.0;
  const double steps = ranks - 1;
  const double share = steps / ranks * bytes;  // (p-1)/p n
  // Each phase: p-1 steps moving (p-1)/p n; the reduce-scatter also reduces what it receives.
  double seconds = 0.0;
  if (phases->reduce_scatter) {
    seconds +=
        steps * params.alpha_s + share * params.beta_s_per_byte + share * params.gamma_s_per_byte;
  }
  if (phases->all_gather) seconds += steps * params.alpha_s + share * params.beta_s_per_byte;
  return seconds;
}

double BusBandwidthFactor(CollectiveKind kind, int ranks) {
  if (ranks <= 1 || !internal::IsCollective(static_cast<unsigned>(kind))) return 0.0;
  return internal::Collective(kind).bus_factor(ranks);
}

}  // namespace chorus::model
