// Bruck's all-gather: ceil(log2 p) steps for any p. After step k rank r holds blocks
// r, r+1, ..., r+2^k-1 (mod p); in step k it sends the first min(2^k, p-2^k) of them to rank
// r-2^k and receives as many from rank r+2^k. Cost: ceil(log2 p) a + (p-1)/p n b, against the
// ring's (p-1) a for the same bytes.
//
// Blocks go straight to their final place in the output, so unlike the textbook version there
// is no rotation at the end; a run of blocks that wraps past the last rank travels as two
// pieces.
//
// Bruck's all-to-all: ceil(log2 p) steps instead of the pairwise exchange's p - 1, for small
// blocks on links where a step costs far more than its bytes (TCP). The rank first rotates its
// send so that position i holds its block for rank r+i; in step k it sends every position
// whose bit k is set to rank r+2^k, packed into one run, and puts what rank r-2^k sends it in
// the same positions. After the last step position i holds rank r-i's block for it, which a
// last permutation (its own inverse, so done by swaps) moves to block r-i of the output. The
// positions that travel are rewritten in place, so the output buffer is the only memory used:
// the packed runs go through staging slots (or, where the transport copies at post, through
// the call's scratch), never by reference. Each step moves about half the buffer, so a rank
// sends ceil(log2 p)/2 n for p a power of two against the pairwise (p-1)/p n.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status BruckAllGather(const CallContext& ctx, const void* send, void* recv, size_t count);
Status BruckAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
