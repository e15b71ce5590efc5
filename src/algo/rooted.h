// Broadcast, reduce, gather, scatter and barrier.
//
// Direct broadcast: the root sends each segment to every peer at once (Channel::SendToAll: on
// thread ranks by reference, so every peer copies straight from the root's buffer; through
// shared memory into one slot all peers read), and each peer copies it out. 1 step; the root
// sends (p-1) n bytes where messages are copied, nothing where they are read in place.
//
// Chain broadcast: a pipelined chain root -> root+1 -> ... -> root-1; each rank forwards a
// segment as soon as it has it, so the call costs (p - 1 + segments - 1) segment times and
// every rank sends at most n bytes.
//
// Binomial broadcast and reduce: trees over the ranks numbered from the root (v = r - root mod
// p). The parent of v > 0 is v with its lowest set bit cleared; its children are v + 2^k for
// each 2^k below that bit (below p for the root) with v + 2^k < p. ceil(log2 p) rounds, pipelined
// by segment. The root sends (broadcast) or receives and combines (reduce) ceil(log2 p) times n
// at most; every other rank sends n to its children in all or to its parent once.
//
// Scatter + all-gather broadcast (van de Geijn): the root sends chunk q of the buffer to rank q,
// then a ring all-gather of the chunks completes every copy: each rank sends (p-1)/p n in the
// ring, the root 2 (p-1)/p n in all, against n per hop for the chain.
//
// Direct reduce: every rank sends its input to the root, which combines the p inputs in rank
// order. Chain reduce: partial sums travel root+1 -> root+2 -> ... -> root, pipelined by
// segment, each rank adding its input; n bytes per rank.
//
// Direct gather: every rank sends its block to the root, segment by segment, and the root
// copies each into place (on thread ranks straight from the sender's buffer). Direct scatter:
// the root sends block q to rank q. 1 step; the root receives or sends (p-1)/p of the total.
//
// Flag barrier (thread and shm ranks): entering a call raises a rank's flag in shared memory
// (its started-calls counter); the rank rings its peers' doorbells and waits until every
// peer's flag shows this call or a later one, then checks that a peer showing this call is in
// a barrier too. No messages, no bytes. Elsewhere it is the direct barrier.
// Direct barrier: one empty message to and from every peer (1 step, p - 1 messages each).
// Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k; after
// ceil(log2 p) rounds every rank has heard, through some chain, from every other.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status DirectBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count);
Status ChainBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count);
Status BinomialBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count);
Status ScatterAllGatherBroadcast(const CallContext& ctx, const void* send, void* recv,
                                 size_t count);
Status DirectReduce(const CallContext& ctx, const void* send, void* recv, size_t count);
Status ChainReduce(const CallContext& ctx, const void* send, void* recv, size_t count);
Status BinomialReduce(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectGather(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectScatter(const CallContext& ctx, const void* send, void* recv, size_t count);
Status FlagBarrier(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DirectBarrier(const CallContext& ctx, const void* send, void* recv, size_t count);
Status DisseminationBarrier(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
