// Ring algorithms: reduce-scatter, all-gather, and all-reduce as the two back to back.
//
// Ranks form a ring r-1 -> r -> r+1. The buffer is split into one chunk per rank (algo/plan.h;
// sizes differ by at most one element) and each chunk into segments; the schedule runs
// segment-outer, so every rank alternates one send and one receive per link and neighbours work
// on different segments at once (pipelining) without ever deadlocking on credits.
//
// Reduce-scatter, step s = 0..p-2: rank r sends chunk r-1-s and receives chunk r-2-s, which it
// combines with its own copy; after p-1 steps it holds chunk r fully reduced.
// All-gather, step s = 0..p-2: rank r sends chunk r-s and receives chunk r-1-s.
// All-reduce runs both; the turn between them is one fused recv-reduce-copy-send. Each rank
// sends 2(p-1)/p of the buffer, the lower bound (docs/algorithms.md has the costs).
//
// `count` is the total buffer (see model/cost_model.h); arguments are already validated.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status RingReduceScatter(const CallContext& ctx, const void* send, void* recv, size_t count);
Status RingAllGather(const CallContext& ctx, const void* send, void* recv, size_t count);
Status RingAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count);
// The v-collectives on the same ring, over the callers' uneven blocks (CallContext's
// recv_counts for the all-gather-v, send_counts for the reduce-scatter-v) rather than the even
// split: chunk q is rank q's block, never padded. `count` is the total.
Status RingAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t count);
Status RingReduceScatterV(const CallContext& ctx, const void* send, void* recv, size_t count);
// Reduce (Rabenseifner's reduce-scatter + gather): the ring reduce-scatter, whose last step
// sends each completed chunk to the root instead of keeping it. Every rank sends (p-1)/p n
// around the ring and the root receives (p-1)/p n more: 2(p-1)/p n at the root against the
// chain's n and the direct reduce's (p-1) n, with each rank reducing (p-1)/p n, not n.
Status ReduceScatterGatherReduce(const CallContext& ctx, const void* send, void* recv,
                                 size_t count);

// A ring over some of the ranks (for hierarchical schedules): `size` members, this rank is
// member `index`, data arrives from rank `prev` and leaves for rank `next` (global ranks).
// Chunks are numbered by member index.
struct RingView {
  int size;
  int index;
  int prev;
  int next;
  // Every rank of the transport, in rank order.
  static RingView Whole(const Transport& t);
};

// As above over `ring`. recv_is_whole: the reduced chunk lands at its place in a buffer of
// `count` elements (for an all-reduce built from parts) rather than in a chunk-sized buffer.
Status RingReduceScatterOver(const CallContext& ctx, const RingView& ring, const void* send,
                             void* recv, size_t count, bool recv_is_whole);
Status RingAllGatherOver(const CallContext& ctx, const RingView& ring, const void* send, void* recv,
                         size_t count);
Status RingAllReduceOver(const CallContext& ctx, const RingView& ring, const void* send, void* recv,
                         size_t count);

}  // namespace chorus::internal
