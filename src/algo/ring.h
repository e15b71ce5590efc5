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

}  // namespace chorus::internal
