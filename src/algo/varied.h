// The v-collectives: blocks of per-rank lengths (CallContext::send_counts and recv_counts, back
// to back in rank order), zeros allowed.
//
// Every pair of ranks that the collective connects exchanges at least one message each way,
// empty where the block is, so that every rank checks what it gets: all-gather-v and
// reduce-scatter-v carry the digest of their shared counts in the call's tag; all-to-all-v,
// gather-v and scatter-v set each pair's element count in the tag of its messages
// (Channel::SetPairCount), so that two ranks that disagree on what goes between them fail the
// call on both, naming both, instead of leaving a message behind.
//
//   pairwise all-gather-v     p - 1 rounds (p for odd p) of pairwise exchange: each rank sends
//                             its block to the round's partner and takes the partner's
//   direct reduce-scatter-v   block q of every rank's send goes to rank q, which reduces the p
//                             of them in rank order; segment-outer, one step
//   pairwise all-to-all-v     the all-to-all's rounds, with each pair's own lengths
//   direct all-to-all-v       every block at once, segment-outer (thread ranks: each read
//                             straight from its owner's buffer); one step
//   direct gather-v           every rank sends its block to the root
//   direct scatter-v          the root sends block q to rank q
//
// The rounds never have two ranks sending to one peer at once (see alltoall.h); on a
// zero-copy transport a block is read straight from the sender's buffer.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status PairwiseAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectReduceScatterV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status PairwiseAllToAllV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectAllToAllV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectGatherV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectScatterV(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
