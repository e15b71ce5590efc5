// Bruck's all-gather (see bruck.h).
#include "algo/bruck.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "algo/exchange.h"
#include "algo/plan.h"
#include "base/stream_copy.h"
#include "model/algorithm_cost.h"

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

namespace {

// Copies elements [from, from + n) of the packed run of step `bit` (the positions with that bit
// set, in order, `block` elements each) between `buffer` (positions of `block` elements) and
// `flat`: into flat when `out`, else out of it.
void Pack(std::byte* buffer, std::byte* flat, size_t from, size_t n, int bit, size_t block,
          size_t elem, bool out) {
  // The k-th position with bit `bit` set: k's bits below `bit` stay, the rest shift up by one
  // with the bit set.
  const auto low = static_cast<size_t>(bit) - 1;
  while (n > 0) {
    const size_t k = from / block;
    const size_t within = from % block;
    const size_t take = std::min(n, block - within);
    const size_t position = ((k & ~low) << 1) | static_cast<size_t>(bit) | (k & low);
    std::byte* at = buffer + (position * block + within) * elem;
    if (out) {
      std::memcpy(flat, at, take * elem);
    } else {
      std::memcpy(at, flat, take * elem);
    }
    flat += take * elem;
    from += take;
    n -= take;
  }
}

}  // namespace

Status BruckAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t elem = ctx.elem_size;
  const size_t block = count / static_cast<size_t>(p);
  auto* out = static_cast<std::byte*>(recv);
  const size_t bytes = count * elem;
  // Position i holds block r+i: a rotation, in place or copied.
  const size_t head = static_cast<size_t>(r) * block * elem;
  if (send == recv) {
    std::rotate(out, out + head, out + bytes);
  } else if (bytes > 0) {
    const auto* in = static_cast<const std::byte*>(send);
    std::memcpy(out, in + head, bytes - head);
    std::memcpy(out + bytes - head, in, head);
  }
  if (p == 1) return Status::Ok();
  Channel ch(ctx);
  Transport& t = ch.transport();
  const size_t segment = ctx.segment_elems;
  const int steps = std::bit_width(static_cast<unsigned>(p - 1));  // ceil(log2 p)
  int step = 0;
  for (int bit = 1; bit < p; bit *= 2) {
    ch.SetStep(step++, steps);
    const int to = Mod(r + bit, p);
    const int from = Mod(r - bit, p);
    const size_t run = static_cast<size_t>(model::BruckAllToAllBlocks(p, bit)) * block;
    const size_t messages = run == 0 ? 1 : (run + segment - 1) / segment;
    for (size_t k = 0; k < messages; ++k) {
      ch.SetSegment(k, messages);
      const size_t at = k * segment;
      const size_t n = run == 0 ? 0 : std::min(segment, run - at);
      void* slot = nullptr;
      CHORUS_RETURN_IF_ERROR(ch.Reserve(to, &slot));
      // Where the transport copies at post, the slot is its own: pack into the scratch.
      void* packed = t.copies_at_post() ? ctx.scratch : slot;
      Pack(out, static_cast<std::byte*>(packed), at, n, bit, block, elem, /*out=*/true);
      ch.Publish(to, packed, n);
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(from, n, &m));
      Pack(out, static_cast<std::byte*>(const_cast<void*>(m.data)), at, n, bit, block, elem,
           /*out=*/false);
      ch.Done(from, m);
    }
  }
  // Position i holds rank r-i's block: it belongs at block r-i. i -> r-i (mod p) is its own
  // inverse, so swapping each pair once puts every block in place.
  for (int i = 0; i < p; ++i) {
    const int j = Mod(r - i, p);
    if (i < j) {
      std::swap_ranges(out + static_cast<size_t>(i) * block * elem,
                       out + static_cast<size_t>(i + 1) * block * elem,
                       out + static_cast<size_t>(j) * block * elem);
    }
  }
  return ch.FlushReferenced();
}

}  // namespace chorus::internal
