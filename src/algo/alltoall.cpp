// All-to-all (see alltoall.h).
#include "algo/alltoall.h"

#include "algo/plan.h"

namespace chorus::internal {

int PairwiseRounds(int p) { return p % 2 == 0 ? p - 1 : p; }

// Odd p: in round i, r pairs with (i - r) mod p, and the r with 2r = i (mod p) sits out. Even
// p: ranks 0 .. p-2 play the odd schedule of p - 1 ranks, and the one that would sit out plays
// rank p - 1 instead (2 has the inverse p/2 modulo the odd p - 1).
int PairwisePartner(int r, int round, int p) {
  if (p % 2 == 1) return Mod(round - r, p);
  const int m = p - 1;
  if (r == m) return static_cast<int>((static_cast<long>(round) * (p / 2)) % m);
  const int s = Mod(round - r, m);
  return s == r ? m : s;
}

Status PairwiseAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t block = count / static_cast<size_t>(p);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const bool in_place = send == recv;
  const size_t own = static_cast<size_t>(r) * block;
  Channel ch(ctx);
  if (!in_place) {
    ch.CopyOut(Advance(recv, own, ctx.elem_size), Advance(send, own, ctx.elem_size),
               block * ctx.elem_size);
  }
  const Partition whole(block, 1, ctx.segment_elems);
  const int rounds = PairwiseRounds(p);
  for (int round = 0; round < rounds; ++round) {
    const int peer = PairwisePartner(r, round, p);
    if (peer == r) continue;
    const size_t at = static_cast<size_t>(peer) * block;
    for (size_t seg = 0; seg < whole.Segments(); ++seg) {
      ch.SetSegment(seg, whole.Segments());
      ch.SetStep(round, rounds);
      const size_t offset = at + whole.SegmentOffset(0, seg);
      const size_t n = whole.SegmentSize(0, seg);
      const void* out = Advance(send, offset, ctx.elem_size);
      // In place the partner's block lands where ours for it was: copy ours out first.
      CHORUS_RETURN_IF_ERROR(in_place ? ch.SendCopy(peer, out, n) : ch.Send(peer, out, n));
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(peer, n, &m));
      ch.CopyOut(Advance(recv, offset, ctx.elem_size), m.data, m.bytes);
      ch.Done(peer, m);
    }
  }
  return ch.FlushReferenced();
}

Status DirectAllToAll(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  if (p == 1 || send == recv) return PairwiseAllToAll(ctx, send, recv, count);
  const size_t block = count / static_cast<size_t>(p);
  Channel ch(ctx);
  const size_t own = static_cast<size_t>(r) * block;
  ch.CopyOut(Advance(recv, own, ctx.elem_size), Advance(send, own, ctx.elem_size),
             block * ctx.elem_size);
  const Partition whole(block, 1, ctx.segment_elems);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    ch.SetStep(0, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + i) % p;
      CHORUS_RETURN_IF_ERROR(
          ch.Send(q, Advance(send, static_cast<size_t>(q) * block + offset, ctx.elem_size), n));
    }
    ch.SetStep(1, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + p - i) % p;
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(q, n, &m));
      ch.CopyOut(Advance(recv, static_cast<size_t>(q) * block + offset, ctx.elem_size), m.data,
                 m.bytes);
      ch.Done(q, m);
    }
  }
  return ch.FlushReferenced();
}

}  // namespace chorus::internal
