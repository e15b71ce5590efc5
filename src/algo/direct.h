// Direct algorithms: every rank talks to every other rank once per segment, so a call costs one
// message latency instead of the ring's p-1 (or 2(p-1)). Meant for ranks that are all one hop
// apart (threads, processes on one host).
//
// One-shot all-reduce: each rank sends its whole input to every peer through staging slots
// (nothing to wait for afterwards), then reduces all p inputs itself, in rank order, so every
// rank computes bit-identical results. Bytes sent per rank: (p-1) n, so only for small buffers.
//
// Direct reduce-scatter: rank r sends chunk q of its input to rank q and reduces chunk r of all
// p inputs, in rank order. Direct all-gather: rank r sends its block to every peer and copies
// every peer's block into place. Both send (p-1)/p n per rank, like the ring. On a zero-copy
// transport the chunks are sent by reference, so the receiver reads them straight from the
// sender's buffer (one pass over memory) and the sender waits for its peers' releases at the end.
//
// Direct all-reduce: the two back to back, for large buffers on thread ranks, where the
// chunks are read in place and each byte crosses memory fewer times than around a ring.
//
// Segments: the buffer (one-shot) or each chunk (direct) is cut into segments as in
// algo/plan.h; the schedule is segment-outer.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status OneShotAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectReduceScatter(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectAllGather(const CallContext& ctx, const void* send, void* recv, size_t count);
// The same over the ranks' own blocks (CallContext::recv_counts), none padded.
Status DirectAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t count);
// Direct reduce-scatter into each rank's place in `recv`, then direct all-gather in place.
Status DirectAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count);

// A call with no elements, whatever its algorithm: one empty message to and from every peer,
// so that the ranks still prove they agree on the call (a rank passing count 0 where its peers
// pass 8 fails the call on every rank, instead of returning at once and shifting its next one).
Status EmptyCall(const CallContext& ctx);

// out = x_0 (+) x_1 (+) ... (+) x_{p-1}, combined in rank order so that every rank gets the
// same bits; x_r is `mine` (which may be `out`), x_q the next message of n elements from rank
// q. The last step finishes (avg). `peers_read_out`: peers read `out` next (an all-reduce's
// chunk), so it is written with the stores ctx.slot_writer picks (base/slot_writer.h).
Status ReduceInRankOrder(Channel& ch, void* out, const void* mine, size_t n,
                         bool peers_read_out = false);

}  // namespace chorus::internal
