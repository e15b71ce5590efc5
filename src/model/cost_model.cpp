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

// The collectives the ring schedule implements.
bool RingKind(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kAllGather;
}

double Seconds(const RingCost& cost, const MachineParams& params) {
  return cost.steps * params.alpha_s +
         static_cast<double>(cost.bytes_sent) * params.beta_s_per_byte +
         static_cast<double>(cost.bytes_reduced) * params.gamma_s_per_byte;
}

}  // namespace

RingCost Ring(CollectiveKind kind, int ranks, int rank, size_t count, DataType dtype) {
  RingCost cost;
  if (ranks < 1 || rank < 0 || rank >= ranks || !RingKind(kind)) return cost;
  // One rank copies locally (if at all), and an empty buffer sends nothing: no messages.
  if (ranks == 1 || count == 0) return cost;

  const uint64_t elem = DataTypeSize(dtype);
  const uint64_t total = static_cast<uint64_t>(count) * elem;
  const uint64_t prev = ChunkElements(count, ranks, rank - 1) * elem;
  const uint64_t own = ChunkElements(count, ranks, rank) * elem;
  const uint64_t next = ChunkElements(count, ranks, rank + 1) * elem;
  const int phase_steps = ranks - 1;

  switch (kind) {
    case CollectiveKind::kReduceScatter:
      cost.bytes_sent = total - own;
      cost.bytes_received = total - prev;
      cost.bytes_reduced = cost.bytes_received;  // every received element meets one input element
      cost.steps = phase_steps;
      break;
    case CollectiveKind::kAllGather:
      cost.bytes_sent = total - next;
      cost.bytes_received = total - own;
      cost.steps = phase_steps;
      break;
    case CollectiveKind::kAllReduce:
      cost.bytes_sent = (total - own) + (total - next);
      cost.bytes_received = (total - prev) + (total - own);
      cost.bytes_reduced = total - prev;  // only the reduce-scatter half combines
      cost.steps = 2 * phase_steps;
      break;
    default:
      break;
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
  if (ranks <= 1 || !(bytes > 0.0) || !RingKind(kind)) return 0.0;
  return internal::Collective(kind).model_bytes(ranks) * bytes;
}

double RingTimeClosedForm(CollectiveKind kind, int ranks, double bytes,
                          const MachineParams& params) {
  if (ranks <= 1 || !(bytes > 0.0) || !RingKind(kind)) return 0.0;
  const double steps = ranks - 1;
  const double share = steps / ranks * bytes;  // (p-1)/p n
  switch (kind) {
    case CollectiveKind::kAllGather:
      return steps * params.alpha_s + share * params.beta_s_per_byte;
    case CollectiveKind::kReduceScatter:
      return steps * params.alpha_s + share * params.beta_s_per_byte +
             share * params.gamma_s_per_byte;
    case CollectiveKind::kAllReduce:
      return 2.0 * steps * params.alpha_s + 2.0 * share * params.beta_s_per_byte +
             share * params.gamma_s_per_byte;
    default:
      break;
  }
  return 0.0;
}

double BusBandwidthFactor(CollectiveKind kind, int ranks) {
  if (ranks <= 1 || !internal::IsCollective(static_cast<unsigned>(kind))) return 0.0;
  return internal::Collective(kind).bus_factor(ranks);
}

}  // namespace chorus::model
