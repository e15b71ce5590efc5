// Exact payload bytes one rank sends and receives in one call of a v-collective algorithm, for
// any counts (zeros and uneven blocks included): what the traffic counters (Communicator::
// traffic()) show after the call, since no algorithm pads a block to the largest. The even
// collectives' per-rank bytes are the algorithm rows' terms (algorithm_cost.h) and the ring's
// per-rank model (cost_model.h).
//
//   const size_t counts[] = {0, 5, 100, 7};
//   auto b = VariedRankBytes("ring", {.kind = CollectiveKind::kAllGatherV, .rank = 1,
//                                     .send_counts = counts, .elem = 4});
//   // b->sent == 4 * (112 - 100): every block but rank 2's
//
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

// One rank's view of a v-call. All-gather-v, reduce-scatter-v, gather-v and scatter-v: the
// shared counts (the root's, for the rooted ones) in send_counts. All-to-all-v: this rank's
// send_counts and recv_counts.
struct VariedRankCall {
  CollectiveKind kind = CollectiveKind::kAllGatherV;
  int rank = 0;
  int root = 0;
  std::span<const size_t> send_counts;
  std::span<const size_t> recv_counts;
  size_t elem = 4;
};

// The bytes of `algorithm` (its name in the algorithm table) for this call; nullopt for an
// algorithm or collective this model does not know. The ranks are send_counts.size().
std::optional<RankBytes> VariedRankBytes(std::string_view algorithm, const VariedRankCall& call);

}  // namespace chorus::model
