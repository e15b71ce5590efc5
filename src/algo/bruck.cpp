// Bruck's all-gather (see bruck.h).
#include "algo/bruck.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "algo/exchange.h"
#include "algo/plan.h"
#include "base/stream_copy.h"

namespace chorus::internal {

// Blocks are final once they arrive and are never written again, so they are sent straight
// from the output buffer (by reference on a zero-copy transport).
Status BruckAllGather(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t block = count / static_cast<size_t>(p);  // all-gather blocks are equal
  void* mine = Advance(recv, static_cast<size_t>(r) * block, ctx.elem_size);
  if (mine != send && block > 0) CopyBytes(mine, send, block * ctx.elem_size);
  if (p == 1) return Status::Ok();
  // `n` blocks from block `first` on (mod p), as they lie in the output.
  auto blocks = [&](int first, int n) {
    first = Mod(first, p);
    const int head = std::min(n, p - first);
    return Run{{static_cast<size_t>(first) * block, 0},
               {static_cast<size_t>(head) * block, static_cast<size_t>(n - head) * block}};
  };
  auto copy_into = [&](size_t offset, const void* data, size_t n) {
    CopyBytes(Advance(recv, offset, ctx.elem_size), data, n * ctx.elem_size);
  };
  const int steps = std::bit_width(static_cast<unsigned>(p - 1));  // ceil(log2 p)
  Channel ch(ctx);
  int step = 0;
  for (int distance = 1; distance < p; distance *= 2) {
    ch.SetStep(step++, steps);
    const int n = std::min(distance, p - distance);
    CHORUS_RETURN_IF_ERROR(Exchange(ch, {Mod(r - distance, p), recv, blocks(r, n), SendMode::kAuto},
                                    {Mod(r + distance, p), blocks(r + distance, n)}, copy_into));
  }
  return ch.FlushReferenced();
}

}  // namespace chorus::internal
