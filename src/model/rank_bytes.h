// Exact payload bytes one rank sends and receives in one call of an algorithm: what the traffic
// counters (Communicator::traffic()) show after the call. For the v-collectives any counts
// (zeros and uneven blocks included), since no algorithm pads a block to the largest; for the
// rooted collectives every root. Messages without payload (the barriers', empty blocks) count 0.
//
//   const size_t counts[] = {0, 5, 100, 7};
//   auto b = RankBytesOf("ring", {.kind = CollectiveKind::kAllGatherV, .ranks = 4, .rank = 1,
//                                 .send_counts = counts, .elem = 4});
//   // b->sent == 4 * (112 - 100): every block but rank 2's
//
// The hierarchical all-reduce, whose bytes depend on the host layout, has no row here.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "chorus/communicator.h"

namespace chorus::model {

struct RankBytes {
  uint64_t sent = 0;
  uint64_t received = 0;
};

// One rank's view of a call.
struct RankCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int ranks = 1;
  int rank = 0;
  int root = 0;
  // The collectives of even blocks: the total buffer in elements (base/collectives.h
  // CountsFor's total: the all-reduce buffer, the reduce-scatter input, the gather's output).
  size_t count = 0;
  // The v-collectives: all-gather-v, reduce-scatter-v, gather-v and scatter-v take the shared
  // counts (the root's, for the rooted ones) in send_counts; all-to-all-v this rank's
  // send_counts and recv_counts. `ranks` entries each.
  std::span<const size_t> send_counts;
  std::span<const size_t> recv_counts;
  size_t elem = 4;
};

// The bytes of `algorithm` (its name in the algorithm table) for this call; nullopt for an
// algorithm this model has no row for, or a call outside its preconditions (rank outside
// [0, ranks), counts of the wrong length).
std::optional<RankBytes> RankBytesOf(std::string_view algorithm, const RankCall& call);

}  // namespace chorus::model
