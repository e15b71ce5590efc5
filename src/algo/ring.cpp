// Ring reduce-scatter, all-gather and all-reduce (see ring.h).
#include "algo/ring.h"

#include <cstring>

#include "algo/plan.h"

namespace chorus::internal {
namespace {

// Addresses of segments within the caller's buffers.
class Layout {
 public:
  Layout(const CallContext& ctx, const RingView& ring, size_t count)
      : p_(ring.size), elem_(ctx.elem_size), part_(count, p_, ctx.segment_elems) {}
  // The v-collectives' blocks, one per rank of the whole ring, in rank order.
  Layout(const CallContext& ctx, std::span<const size_t> counts)
      : p_(static_cast<int>(counts.size())),
        elem_(ctx.elem_size),
        part_(counts, ctx.segment_elems) {}

  int ranks() const { return p_; }
  size_t segments() const { return part_.Segments(); }
  // Segment `seg` of chunk `chunk` (any integer, taken mod p) in a whole-buffer `base`.
  template <typename T>
  T* At(T* base, int chunk, size_t seg) const {
    return Advance(base, part_.SegmentOffset(Mod(chunk, p_), seg), elem_);
  }
  // The same segment within a buffer that holds only that chunk.
  template <typename T>
  T* InChunk(T* base, int chunk, size_t seg) const {
    const int c = Mod(chunk, p_);
    return Advance(base, part_.SegmentOffset(c, seg) - part_.Offset(c), elem_);
  }
  size_t Size(int chunk, size_t seg) const { return part_.SegmentSize(Mod(chunk, p_), seg); }

 private:
  int p_;
  size_t elem_;
  Partition part_;
};

// The shared halves of the schedules, for one segment. Each primitive is one step of the
// error messages' "step k of n": p primitives per segment for reduce-scatter and all-gather,
// 2p-1 for all-reduce.

// Reduce-scatter up to its last step: send chunk r-1, then pass on partial sums of chunks
// r-2, ..., r+1. Chunk r, the one this rank keeps, is left to the caller.
Status ReduceScatterLead(Primitives& prims, const Layout& at, const void* send, int r, size_t seg) {
  const int p = at.ranks();
  prims.NextStep();
  CHORUS_RETURN_IF_ERROR(prims.Send(at.At(send, r - 1, seg), at.Size(r - 1, seg)));
  for (int s = 1; s < p - 1; ++s) {
    prims.NextStep();
    CHORUS_RETURN_IF_ERROR(
        prims.RecvReduceSend(at.At(send, r - 1 - s, seg), at.Size(r - 1 - s, seg)));
  }
  return Status::Ok();
}

// All-gather after its first send: forward chunks r-1, ..., r+2, then keep chunk r+1.
Status AllGatherTail(Primitives& prims, const Layout& at, void* recv, int r, size_t seg) {
  const int p = at.ranks();
  for (int s = 1; s < p - 1; ++s) {
    prims.NextStep();
    CHORUS_RETURN_IF_ERROR(prims.RecvCopySend(at.At(recv, r - s, seg), at.Size(r - s, seg)));
  }
  prims.NextStep();
  return prims.Recv(at.At(recv, r + 1, seg), at.Size(r + 1, seg));
}

}  // namespace

RingView RingView::Whole(const Transport& t) {
  const int p = t.size();
  const int r = t.rank();
  return {p, r, Mod(r - 1, p), Mod(r + 1, p)};
}

namespace {

Status ReduceScatterOn(const CallContext& ctx, const RingView& ring, const Layout& at,
                       const void* send, void* recv, bool recv_is_whole) {
  const int p = ring.size;
  const int r = ring.index;
  Primitives prims(ctx, ring.prev, ring.next);
  for (size_t seg = 0; seg < at.segments(); ++seg) {
    prims.StartSegment(seg, at.segments(), p);
    CHORUS_RETURN_IF_ERROR(ReduceScatterLead(prims, at, send, r, seg));
    prims.NextStep();
    void* out = recv_is_whole ? at.At(recv, r, seg) : at.InChunk(recv, r, seg);
    CHORUS_RETURN_IF_ERROR(prims.RecvReduceCopy(at.At(send, r, seg), out, at.Size(r, seg)));
  }
  return prims.Flush();
}

Status AllGatherOn(const CallContext& ctx, const RingView& ring, const Layout& at, const void* send,
                   void* recv) {
  const int r = ring.index;
  Primitives prims(ctx, ring.prev, ring.next);
  for (size_t seg = 0; seg < at.segments(); ++seg) {
    prims.StartSegment(seg, at.segments(), ring.size);
    const void* mine = at.InChunk(send, r, seg);
    void* mine_out = at.At(recv, r, seg);
    if (mine != mine_out) prims.CopyOut(mine_out, mine, at.Size(r, seg) * ctx.elem_size);
    prims.NextStep();
    CHORUS_RETURN_IF_ERROR(prims.Send(mine, at.Size(r, seg)));
    CHORUS_RETURN_IF_ERROR(AllGatherTail(prims, at, recv, r, seg));
  }
  return prims.Flush();
}

}  // namespace

Status RingReduceScatterOver(const CallContext& ctx, const RingView& ring, const void* send,
                             void* recv, size_t count, bool recv_is_whole) {
  if (ring.size == 1) return CopyLocal(ctx, send, recv, count);
  return ReduceScatterOn(ctx, ring, Layout(ctx, ring, count), send, recv, recv_is_whole);
}

Status RingAllGatherOver(const CallContext& ctx, const RingView& ring, const void* send, void* recv,
                         size_t count) {
  if (ring.size == 1) return CopyLocal(ctx, send, recv, count);
  return AllGatherOn(ctx, ring, Layout(ctx, ring, count), send, recv);
}

Status RingAllReduceOver(const CallContext& ctx, const RingView& ring, const void* send, void* recv,
                         size_t count) {
  const Layout at(ctx, ring, count);
  const int p = ring.size;
  const int r = ring.index;
  if (p == 1) return CopyLocal(ctx, send, recv, count);
  Primitives prims(ctx, ring.prev, ring.next);
  for (size_t seg = 0; seg < at.segments(); ++seg) {
    prims.StartSegment(seg, at.segments(), 2 * p - 1);
    // Reduce-scatter: partial sums travel through staging slots.
    CHORUS_RETURN_IF_ERROR(ReduceScatterLead(prims, at, send, r, seg));
    // The turn: chunk r is complete here; keep it and start gathering it.
    prims.NextStep();
    CHORUS_RETURN_IF_ERROR(
        prims.RecvReduceCopySend(at.At(send, r, seg), at.At(recv, r, seg), at.Size(r, seg)));
    // All-gather: completed chunks are forwarded from the output buffer.
    CHORUS_RETURN_IF_ERROR(AllGatherTail(prims, at, recv, r, seg));
  }
  return prims.Flush();
}

Status ReduceScatterGatherReduce(const CallContext& ctx, const void* send, void* recv,
                                 size_t count) {
  const RingView ring = RingView::Whole(*ctx.transport);
  const Layout at(ctx, ring, count);
  const int p = ring.size;
  const int r = ring.index;
  const int root = static_cast<int>(ctx.tag.root);
  if (p == 1) return CopyLocal(ctx, send, recv, count);
  Primitives prims(ctx, ring.prev, ring.next);
  Transport& t = prims.transport();
  for (size_t seg = 0; seg < at.segments(); ++seg) {
    prims.StartSegment(seg, at.segments(), p + 1);
    CHORUS_RETURN_IF_ERROR(ReduceScatterLead(prims, at, send, r, seg));
    prims.NextStep();
    const size_t n = at.Size(r, seg);
    if (r == root) {
      // The root's own chunk lands in place; then the other chunks of this segment, each from
      // the rank that completed it.
      CHORUS_RETURN_IF_ERROR(prims.RecvReduceCopy(at.At(send, r, seg), at.At(recv, r, seg), n));
      prims.NextStep();
      for (int q = 0; q < p; ++q) {
        if (q == root) continue;
        Message m;
        CHORUS_RETURN_IF_ERROR(prims.Await(q, at.Size(q, seg), &m));
        prims.CopyOut(at.At(recv, q, seg), m.data, at.Size(q, seg) * ctx.elem_size);
        prims.Done(q, m);
      }
      continue;
    }
    // Chunk r is complete here: it goes to the root instead of to a recv this rank does not
    // have. On a staging transport the sum is made in the slot to the root itself.
    Message m;
    CHORUS_RETURN_IF_ERROR(prims.Await(ring.prev, n, &m));
    const void* local = at.At(send, r, seg);
    if (t.zero_copy() || t.copies_at_post()) {
      ctx.kernel->finish(ctx.scratch, m.data, local, n, p);
      prims.Done(ring.prev, m);
      prims.NextStep();
      CHORUS_RETURN_IF_ERROR(prims.SendCopy(root, ctx.scratch, n));
    } else {
      void* slot = nullptr;
      CHORUS_RETURN_IF_ERROR(prims.Reserve(root, &slot));
      ctx.kernel->finish(slot, m.data, local, n, p);
      prims.Done(ring.prev, m);
      prims.NextStep();
      prims.Publish(root, slot, n);
    }
  }
  return prims.FlushReferenced();
}

Status RingReduceScatter(const CallContext& ctx, const void* send, void* recv, size_t count) {
  return RingReduceScatterOver(ctx, RingView::Whole(*ctx.transport), send, recv, count, false);
}

Status RingAllGather(const CallContext& ctx, const void* send, void* recv, size_t count) {
  return RingAllGatherOver(ctx, RingView::Whole(*ctx.transport), send, recv, count);
}

Status RingAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  return RingAllReduceOver(ctx, RingView::Whole(*ctx.transport), send, recv, count);
}

Status RingAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const RingView ring = RingView::Whole(*ctx.transport);
  if (ring.size == 1) return CopyLocal(ctx, send, recv, count);
  return AllGatherOn(ctx, ring, Layout(ctx, ctx.recv_counts), send, recv);
}

Status RingReduceScatterV(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const RingView ring = RingView::Whole(*ctx.transport);
  if (ring.size == 1) return CopyLocal(ctx, send, recv, count);
  return ReduceScatterOn(ctx, ring, Layout(ctx, ctx.send_counts), send, recv,
                         /*recv_is_whole=*/false);
}

}  // namespace chorus::internal
