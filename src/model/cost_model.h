// Cost model for the collective algorithms: exact payload bytes per rank and an
// alpha-beta-gamma time estimate (docs/algorithms.md explains the terms).
//
//   RingBytesSent(CollectiveKind::kAllReduce, /*ranks=*/4, /*rank=*/0, /*count=*/8, kFloat32) == 48
//
// `count` is always the total buffer in elements: the all-reduce buffer, the reduce-scatter
// input (size * recv.count) and the all-gather output (size * send.count). The buffer is split
// into `ranks` chunks exactly as the ring algorithms split it: chunk c holds count / ranks
// elements, plus one when c < count % ranks, and the chunks are contiguous in rank order.
//
// Edge cases: one rank, or count == 0, sends no messages at all (every field is 0). With
// 0 < count < ranks some chunks are empty, but the schedule still has its ranks - 1 steps per
// phase, so `steps` does not depend on count otherwise. Arguments outside the preconditions
// (ranks < 1, rank outside [0, ranks), an invalid kind) give an all-zero cost.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/communicator.h"
#include "chorus/types.h"

namespace chorus::model {

// Seconds per message (alpha), per byte moved (beta) and per byte reduced (gamma).
struct MachineParams {
  double alpha_s = 2e-6;
  double beta_s_per_byte = 1.0 / 8e9;
  double gamma_s_per_byte = 1.0 / 10e9;
};

struct RingCost {
  uint64_t bytes_sent = 0;      // by this rank, payload only
  uint64_t bytes_received = 0;  // by this rank
  uint64_t bytes_reduced = 0;   // input bytes this rank combines with received data
  int steps = 0;                // ring steps (messages per rank, ignoring segmentation)
};

// The cost of the ring algorithm for one rank. ranks >= 1, 0 <= rank < ranks.
RingCost Ring(CollectiveKind kind, int ranks, int rank, size_t count, DataType dtype);

// Payload bytes `rank` sends in the ring algorithm.
uint64_t RingBytesSent(CollectiveKind kind, int ranks, int rank, size_t count, DataType dtype);
// The largest RingBytesSent over all ranks (the "bytes per rank" of the slowest rank).
uint64_t RingMaxBytesSent(CollectiveKind kind, int ranks, size_t count, DataType dtype);

// Estimated seconds of the ring algorithm: the largest, over ranks, of
// steps * alpha + bytes sent * beta + bytes reduced * gamma (the slowest rank).
// With an even split (ranks divides count) it equals RingTimeClosedForm of count * elem bytes.
double RingTime(CollectiveKind kind, int ranks, size_t count, DataType dtype,
                const MachineParams& params = {});

// The textbook forms for n bytes (docs/algorithms.md), exact when ranks divides the count:
//   all-gather      (p-1) a + (p-1)/p n b
//   reduce-scatter  (p-1) a + (p-1)/p n b + (p-1)/p n g
//   all-reduce     2(p-1) a + 2(p-1)/p n b + (p-1)/p n g
// Bytes per rank are the b coefficients. Both are 0 for ranks <= 1 or bytes <= 0.
double RingBytesClosedForm(CollectiveKind kind, int ranks, double bytes);
double RingTimeClosedForm(CollectiveKind kind, int ranks, double bytes,
                          const MachineParams& params = {});

// nccl-tests bus-bandwidth factor: busbw = algbw * factor, with algbw = total buffer bytes / time
// (the `count` convention above). 2(p-1)/p for all-reduce, (p-1)/p for reduce-scatter and
// all-gather; 0 for ranks <= 1.
double BusBandwidthFactor(CollectiveKind kind, int ranks);

}  // namespace chorus::model
