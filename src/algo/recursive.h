// All-reduce by recursive doubling and by Rabenseifner's algorithm, over any number of ranks.
//
//   recursive doubling   log2 p steps; in step k rank i swaps its whole partial sum with rank
//                        i ^ 2^k and both combine: log2(p) a + log2(p) n (b + g). Few steps, so
//                        for small and medium buffers.
//   Rabenseifner         recursive halving reduce-scatter (step k swaps half of what is left,
//                        so rank i ends holding chunk i reduced) then recursive doubling
//                        all-gather: 2 log2(p) a + 2 (p-1)/p n b + (p-1)/p n g, the ring's
//                        bytes in far fewer steps.
//
// When p is not a power of two, p = p' + rem with p' the largest power of two below p, ranks
// below 2 rem fold in pairs first: each even one hands its input to the odd rank above it
// and receives the result at the end (two more steps), so the exchanges run among p' ranks.
//
// Operands are always combined with the lower rank's on the left, and each reduced element is
// computed by one rank (Rabenseifner) or by partners that see the same two operands (doubling),
// so every rank ends with the same bits.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status RecursiveDoublingAllReduce(const CallContext& ctx, const void* send, void* recv,
                                  size_t count);
Status RabenseifnerAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
