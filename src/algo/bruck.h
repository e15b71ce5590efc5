// Bruck's all-gather: ceil(log2 p) steps for any p. After step k rank r holds blocks
// r, r+1, ..., r+2^k-1 (mod p); in step k it sends the first min(2^k, p-2^k) of them to rank
// r-2^k and receives as many from rank r+2^k. Cost: ceil(log2 p) a + (p-1)/p n b, against the
// ring's (p-1) a for the same bytes.
//
// Blocks go straight to their final place in the output, so unlike the textbook version there
// is no rotation at the end; a run of blocks that wraps past the last rank travels as two
// pieces.
#pragma once

#include <cstddef>

#include "algo/primitives.h"

namespace chorus::internal {

Status BruckAllGather(const CallContext& ctx, const void* send, void* recv, size_t count);

}  // namespace chorus::internal
