// Broadcast, reduce, gather, scatter and barrier (see rooted.h).
#include "algo/rooted.h"

#include <bit>

#include "algo/direct.h"
#include "algo/plan.h"
#include "algo/ring.h"

namespace chorus::internal {
namespace {

int Root(const CallContext& ctx) { return static_cast<int>(ctx.tag.root); }

// The whole buffer as one chunk of segments.
Partition Whole(const CallContext& ctx, size_t count) {
  return Partition(count, 1, ctx.segment_elems);
}

// A binomial tree over the ranks numbered from the root (see rooted.h).
class Binomial {
 public:
  Binomial(int ranks, int rank, int root)
      : p_(ranks),
        root_(root),
        v_(Mod(rank - root, ranks)),
        rounds_(std::bit_width(static_cast<unsigned>(ranks - 1))),
        low_(v_ == 0 ? 1 << rounds_ : v_ & -v_) {}

  int rounds() const { return rounds_; }
  bool is_root() const { return v_ == 0; }
  int parent() const { return Absolute(v_ - low_); }
  // The round (0 first) in which this rank hears from its parent.
  int round_in() const { return rounds_ - 1 - std::countr_zero(static_cast<unsigned>(low_)); }
  // Children's offsets from v: the powers of two below this rank's lowest bit, for v + d < p.
  // `each(d, child)` is called for the largest first (the order a broadcast sends in) or the
  // smallest first (the order a reduce's partial sums arrive in).
  template <typename Each>
  Status ForChildren(bool largest_first, Each&& each) const {
    for (int i = 0; i < rounds_; ++i) {
      const int d = largest_first ? low_ >> (i + 1) : 1 << i;
      if (d == 0 || d >= low_ || v_ + d >= p_) continue;
      CHORUS_RETURN_IF_ERROR(each(d, Absolute(v_ + d)));
    }
    return Status::Ok();
  }
  // The round in which this rank and its child at offset d exchange.
  int round_of(int d) const { return rounds_ - 1 - std::countr_zero(static_cast<unsigned>(d)); }
  // The offset of this rank's last child (the largest), or 0 if it has none.
  int last_child() const {
    for (int d = low_ >> 1; d >= 1; d >>= 1) {
      if (v_ + d < p_) return d;
    }
    return 0;
  }

 private:
  int Absolute(int v) const { return (v + root_) % p_; }

  int p_;
  int root_;
  int v_;
  int rounds_;
  int low_;
};

}  // namespace

Status DirectBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const Partition whole = Whole(ctx, count);
  Channel ch(ctx);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    ch.SetStep(0, 1);
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    void* out = Advance(recv, offset, ctx.elem_size);
    if (r == root) {
      const void* in = Advance(send, offset, ctx.elem_size);
      if (in != out) ch.CopyOut(out, in, n * ctx.elem_size);
      CHORUS_RETURN_IF_ERROR(ch.SendToAll(in, n));
    } else {
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(root, n, &m));
      ch.CopyOut(out, m.data, m.bytes);
      ch.Done(root, m);
    }
  }
  return ch.FlushReferenced();
}

Status ChainBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const int position = Mod(r - root, p);  // 0 at the root, p - 1 at the end of the chain
  const Partition whole = Whole(ctx, count);
  Primitives prims(ctx, Mod(r - 1, p), Mod(r + 1, p));
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    prims.StartSegment(seg, whole.Segments(), 1);
    prims.NextStep();
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    void* out = Advance(recv, offset, ctx.elem_size);
    if (position == 0) {
      const void* in = Advance(send, offset, ctx.elem_size);
      if (in != out) prims.CopyOut(out, in, n * ctx.elem_size);
      CHORUS_RETURN_IF_ERROR(prims.Send(in, n));
    } else if (position == p - 1) {
      CHORUS_RETURN_IF_ERROR(prims.Recv(out, n));
    } else {
      CHORUS_RETURN_IF_ERROR(prims.RecvCopySend(out, n));
    }
  }
  return prims.Flush();
}

Status BinomialBroadcast(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const Binomial tree(p, ctx.transport->rank(), Root(ctx));
  const Partition whole = Whole(ctx, count);
  Channel ch(ctx);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    void* out = Advance(recv, offset, ctx.elem_size);
    const void* from = out;  // what this rank forwards: its copy of the segment
    if (tree.is_root()) {
      from = Advance(send, offset, ctx.elem_size);
      if (from != out) ch.CopyOut(out, from, n * ctx.elem_size);
    } else {
      ch.SetStep(tree.round_in(), tree.rounds());
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(tree.parent(), n, &m));
      ch.CopyOut(out, m.data, m.bytes);
      ch.Done(tree.parent(), m);
    }
    CHORUS_RETURN_IF_ERROR(tree.ForChildren(/*largest_first=*/true, [&](int d, int child) {
      ch.SetStep(tree.round_of(d), tree.rounds());
      return ch.Send(child, from, n);
    }));
  }
  return ch.FlushReferenced();
}

Status ScatterAllGatherBroadcast(const CallContext& ctx, const void* send, void* recv,
                                 size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  // The ring's chunks (algo/ring.h uses the same partition), one per rank.
  const Partition chunks(count, p, ctx.segment_elems);
  Channel ch(ctx);
  for (size_t seg = 0; seg < chunks.Segments(); ++seg) {
    ch.SetSegment(seg, chunks.Segments());
    ch.SetStep(0, p);
    if (r == root) {
      for (int i = 1; i < p; ++i) {
        const int q = (root + i) % p;
        const size_t n = chunks.SegmentSize(q, seg);
        if (n == 0) continue;  // the receiver skips it too
        CHORUS_RETURN_IF_ERROR(
            ch.Send(q, Advance(send, chunks.SegmentOffset(q, seg), ctx.elem_size), n));
      }
    } else if (const size_t n = chunks.SegmentSize(r, seg); n > 0) {
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(root, n, &m));
      ch.CopyOut(Advance(recv, chunks.SegmentOffset(r, seg), ctx.elem_size), m.data, m.bytes);
      ch.Done(root, m);
    }
  }
  // Each rank's chunk is in its place in `recv` (the root's still in `send`, which the ring
  // copies over): the ring's messages on a link follow the scatter's, so none is mistaken.
  const void* own = Advance(r == root ? send : static_cast<const void*>(recv),
                            chunks.Offset(r), ctx.elem_size);
  CHORUS_RETURN_IF_ERROR(
      RingAllGatherOver(ctx, RingView::Whole(*ctx.transport), own, recv, count));
  return ch.FlushReferenced();
}

Status DirectReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const Partition whole = Whole(ctx, count);
  Channel ch(ctx);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    ch.SetStep(0, 1);
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    const void* in = Advance(send, offset, ctx.elem_size);
    if (r == root) {
      CHORUS_RETURN_IF_ERROR(ReduceInRankOrder(ch, Advance(recv, offset, ctx.elem_size), in, n));
    } else {
      CHORUS_RETURN_IF_ERROR(ch.Send(root, in, n));
    }
  }
  return ch.FlushReferenced();
}

Status ChainReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const int position = Mod(r - root - 1, p);  // 0 starts the chain, p - 1 is the root
  const Partition whole = Whole(ctx, count);
  Primitives prims(ctx, Mod(r - 1, p), Mod(r + 1, p));
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    prims.StartSegment(seg, whole.Segments(), 1);
    prims.NextStep();
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    const void* in = Advance(send, offset, ctx.elem_size);
    if (position == 0) {
      CHORUS_RETURN_IF_ERROR(prims.Send(in, n));
    } else if (position == p - 1) {
      CHORUS_RETURN_IF_ERROR(prims.RecvReduceCopy(in, Advance(recv, offset, ctx.elem_size), n));
    } else {
      CHORUS_RETURN_IF_ERROR(prims.RecvReduceSend(in, n));
    }
  }
  return prims.Flush();
}

Status BinomialReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const Binomial tree(p, ctx.transport->rank(), Root(ctx));
  const int last = tree.last_child();
  const Partition whole = Whole(ctx, count);
  Channel ch(ctx);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    const void* in = Advance(send, offset, ctx.elem_size);
    if (last == 0) {  // a leaf
      ch.SetStep(tree.round_in(), tree.rounds());
      CHORUS_RETURN_IF_ERROR(ch.Send(tree.parent(), in, n));
      continue;
    }
    // Partial sums over the ranks from this one on, in that order; the root's is the result
    // (with the kernel's finish last), the others' go through scratch to the parent.
    void* acc = tree.is_root() ? Advance(recv, offset, ctx.elem_size) : ctx.scratch;
    const void* lhs = in;
    CHORUS_RETURN_IF_ERROR(tree.ForChildren(/*largest_first=*/false, [&](int d, int child) {
      ch.SetStep(tree.round_of(d), tree.rounds());
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(child, n, &m));
      if (tree.is_root() && d == last) {
        ctx.kernel->finish(acc, lhs, m.data, n, p);
      } else {
        ctx.kernel->combine(acc, lhs, m.data, n);
      }
      ch.Done(child, m);
      lhs = acc;
      return Status::Ok();
    }));
    if (!tree.is_root()) {
      ch.SetStep(tree.round_in(), tree.rounds());
      CHORUS_RETURN_IF_ERROR(ch.SendCopy(tree.parent(), acc, n));
    }
  }
  return ch.FlushReferenced();
}

Status DirectGather(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const size_t block = count / static_cast<size_t>(p);
  const Partition whole = Whole(ctx, block);
  Channel ch(ctx);
  if (r != root) {
    for (size_t seg = 0; seg < whole.Segments(); ++seg) {
      ch.SetSegment(seg, whole.Segments());
      ch.SetStep(0, 1);
      const size_t offset = whole.SegmentOffset(0, seg);
      CHORUS_RETURN_IF_ERROR(
          ch.Send(root, Advance(send, offset, ctx.elem_size), whole.SegmentSize(0, seg)));
    }
    return ch.FlushReferenced();
  }
  void* mine = Advance(recv, static_cast<size_t>(root) * block, ctx.elem_size);
  if (mine != send) ch.CopyOut(mine, send, block * ctx.elem_size);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    ch.SetStep(0, 1);
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    for (int i = 1; i < p; ++i) {
      const int q = (root + i) % p;
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(q, n, &m));
      ch.CopyOut(Advance(recv, static_cast<size_t>(q) * block + offset, ctx.elem_size), m.data,
                 m.bytes);
      ch.Done(q, m);
    }
  }
  return Status::Ok();
}

Status DirectScatter(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = Root(ctx);
  if (p == 1) {
    CopyUnlessInPlace(send, recv, count * ctx.elem_size);
    return Status::Ok();
  }
  const size_t block = count / static_cast<size_t>(p);
  const Partition whole = Whole(ctx, block);
  Channel ch(ctx);
  if (r != root) {
    for (size_t seg = 0; seg < whole.Segments(); ++seg) {
      ch.SetSegment(seg, whole.Segments());
      ch.SetStep(0, 1);
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(root, whole.SegmentSize(0, seg), &m));
      ch.CopyOut(Advance(recv, whole.SegmentOffset(0, seg), ctx.elem_size), m.data, m.bytes);
      ch.Done(root, m);
    }
    return Status::Ok();
  }
  const void* mine = Advance(send, static_cast<size_t>(root) * block, ctx.elem_size);
  if (mine != recv) ch.CopyOut(recv, mine, block * ctx.elem_size);
  for (size_t seg = 0; seg < whole.Segments(); ++seg) {
    ch.SetSegment(seg, whole.Segments());
    ch.SetStep(0, 1);
    const size_t offset = whole.SegmentOffset(0, seg);
    const size_t n = whole.SegmentSize(0, seg);
    for (int i = 1; i < p; ++i) {
      const int q = (root + i) % p;
      CHORUS_RETURN_IF_ERROR(
          ch.Send(q, Advance(send, static_cast<size_t>(q) * block + offset, ctx.elem_size), n));
    }
  }
  return ch.FlushReferenced();
}

Status FlagBarrier(const CallContext& ctx, const void* send, void* recv, size_t count) {
  Transport& t = *ctx.transport;
  if (!t.sees_peers_enter()) return DirectBarrier(ctx, send, recv, count);
  // Entering the call (CommState::Launch) raised this rank's flag; wake the peers that sleep
  // on theirs, then wait for every peer's.
  t.RingPeers();
  Channel ch(ctx);
  ch.SetSegment(0, 1);
  ch.SetStep(0, 1);
  const int p = t.size();
  for (int i = 1; i < p; ++i) CHORUS_RETURN_IF_ERROR(ch.AwaitEntered((t.rank() + i) % p));
  return Status::Ok();
}

Status DirectBarrier(const CallContext& ctx, const void*, void*, size_t) {
  if (ctx.transport->size() == 1) return Status::Ok();
  return EmptyCall(ctx);
}

Status DisseminationBarrier(const CallContext& ctx, const void*, void*, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  Channel ch(ctx);
  ch.SetSegment(0, 1);
  for (int k = 0; k < rounds; ++k) {
    const int d = 1 << k;
    ch.SetStep(k, rounds);
    CHORUS_RETURN_IF_ERROR(ch.SendCopy(Mod(r + d, p), nullptr, 0));
    const int from = Mod(r - d, p);
    Message m;
    CHORUS_RETURN_IF_ERROR(ch.Await(from, 0, &m));
    ch.Done(from, m);
  }
  return Status::Ok();
}

}  // namespace chorus::internal
