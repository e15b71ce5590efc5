// Hierarchical all-reduce for ranks on several hosts with several ranks on each:
//
//   1. reduce-scatter within each host (shared memory): local rank i ends up with chunk i of
//      the host's sum, in place in the output buffer;
//   2. all-reduce of chunk i across hosts (TCP ring over the ranks with local index i), so the
//      k rings of a host run at once, each on 1/k of the buffer;
//   3. all-gather within each host (shared memory), in place.
//
// Each rank sends 2(n-1)/n of its chunk across hosts (n hosts): the slow network carries
// 1/k of what a flat ring puts on it from each host's ranks, and the rest moves through memory.
// With kAvg the host sums are plain sums and the division happens once, at the end of step 2.
// On a transport without a host layout it is the flat ring.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status HierarchicalAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
