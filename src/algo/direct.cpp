// One-shot all-reduce, direct reduce-scatter and direct all-gather (see direct.h).
#include "algo/direct.h"

#include <cstring>

#include "algo/plan.h"

namespace chorus::internal {

// Works block by block so the partial result stays in L1 between operands.
Status ReduceInRankOrder(Channel& ch, void* out, const void* mine, size_t n, bool peers_read_out) {
  constexpr size_t kBlockBytes = 32 << 10;
  const CallContext& ctx = ch.ctx();
  const int p = ch.transport().size();
  const int r = ch.transport().rank();
  if (mine == out && n > 0) {  // in place: keep our operand intact while `out` accumulates
    std::memcpy(ctx.scratch, mine, n * ctx.elem_size);
    mine = ctx.scratch;
  }
  const void** x = ctx.operands;
  for (int q = 0; q < p; ++q) {
    if (q == r) {
      x[q] = mine;
      continue;
    }
    CHORUS_RETURN_IF_ERROR(ch.Await(q, n, &ctx.messages[q]));
    x[q] = ctx.messages[q].data;
  }
  static_assert(kBlockBytes <= SlotWriter::kBlockBytes);
  const bool large_out =
      peers_read_out && ctx.slot_writer != nullptr && n * ctx.elem_size >= SlotWriter::kMinBytes;
  const size_t block = std::max<size_t>(1, kBlockBytes / ctx.elem_size);
  for (size_t begin = 0; begin < n; begin += block) {
    const size_t len = std::min(block, n - begin);
    auto at = [&](const void* base) { return Advance(base, begin, ctx.elem_size); };
    auto reduce_into = [&](void* acc) {
      for (int q = 1; q < p; ++q) {
        const void* lhs = q == 1 ? at(x[0]) : acc;
        if (q == p - 1) {
          ctx.kernel->finish(acc, lhs, at(x[q]), len, p);
        } else {
          ctx.kernel->combine(acc, lhs, at(x[q]), len);
        }
      }
    };
    void* acc = Advance(out, begin, ctx.elem_size);
    if (large_out) {
      ctx.slot_writer->Produce(acc, len * ctx.elem_size, reduce_into);
    } else {
      reduce_into(acc);
    }
  }
  for (int q = 0; q < p; ++q) {
    if (q != r) ch.Done(q, ctx.messages[q]);
  }
  return Status::Ok();
}

Status OneShotAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  if (p == 1) return CopyLocal(ctx, send, recv, count);
  Channel ch(ctx);
  const size_t segments = (count + ctx.segment_elems - 1) / ctx.segment_elems;
  for (size_t seg = 0; seg < segments; ++seg) {
    ch.SetSegment(seg, segments);
    const size_t offset = seg * ctx.segment_elems;
    const size_t n = std::min(ctx.segment_elems, count - offset);
    const void* in = Advance(send, offset, ctx.elem_size);
    ch.SetStep(0, 2);
    for (int i = 1; i < p; ++i) CHORUS_RETURN_IF_ERROR(ch.SendCopy((r + i) % p, in, n));
    ch.SetStep(1, 2);
    CHORUS_RETURN_IF_ERROR(ReduceInRankOrder(ch, Advance(recv, offset, ctx.elem_size), in, n));
  }
  return Status::Ok();
}

namespace {

// Rank r sends chunk q of `send` to each rank q and reduces chunk r of every input into
// `out` (which holds just chunk r); `peers_read_out` when the peers read `out` next.
Status ReduceScatterPhase(Channel& ch, const Partition& part, const void* send, void* out,
                          bool peers_read_out) {
  const CallContext& ctx = ch.ctx();
  const int p = ch.transport().size();
  const int r = ch.transport().rank();
  for (size_t seg = 0; seg < part.Segments(); ++seg) {
    ch.SetSegment(seg, part.Segments());
    ch.SetStep(0, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + i) % p;
      CHORUS_RETURN_IF_ERROR(ch.Send(q, Advance(send, part.SegmentOffset(q, seg), ctx.elem_size),
                                     part.SegmentSize(q, seg)));
    }
    ch.SetStep(1, 2);
    const size_t within = part.SegmentOffset(r, seg) - part.Offset(r);
    CHORUS_RETURN_IF_ERROR(
        ReduceInRankOrder(ch, Advance(out, within, ctx.elem_size),
                          Advance(send, part.SegmentOffset(r, seg), ctx.elem_size),
                          part.SegmentSize(r, seg), peers_read_out));
  }
  return Status::Ok();
}

// Rank r sends `mine` (its block) to every peer and copies every peer's block into `recv`.
Status AllGatherPhase(Channel& ch, const Partition& part, const void* mine, void* recv) {
  const CallContext& ctx = ch.ctx();
  const int p = ch.transport().size();
  const int r = ch.transport().rank();
  for (size_t seg = 0; seg < part.Segments(); ++seg) {
    ch.SetSegment(seg, part.Segments());
    const size_t n = part.SegmentSize(r, seg);
    const void* in = Advance(mine, part.SegmentOffset(r, seg) - part.Offset(r), ctx.elem_size);
    void* in_out = Advance(recv, part.SegmentOffset(r, seg), ctx.elem_size);
    if (in != in_out) ch.CopyOut(in_out, in, n * ctx.elem_size);
    ch.SetStep(0, 2);
    CHORUS_RETURN_IF_ERROR(ch.SendToAll(in, n));
    ch.SetStep(1, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + p - i) % p;
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(q, part.SegmentSize(q, seg), &m));
      ch.CopyOut(Advance(recv, part.SegmentOffset(q, seg), ctx.elem_size), m.data, m.bytes);
      ch.Done(q, m);
    }
  }
  return Status::Ok();
}

}  // namespace

Status DirectReduceScatter(const CallContext& ctx, const void* send, void* recv, size_t count) {
  if (ctx.transport->size() == 1) return CopyLocal(ctx, send, recv, count);
  Channel ch(ctx);
  CHORUS_RETURN_IF_ERROR(
      ReduceScatterPhase(ch, Partition(count, ctx.transport->size(), ctx.segment_elems), send, recv,
                         /*peers_read_out=*/false));
  return ch.FlushReferenced();
}

Status DirectAllGather(const CallContext& ctx, const void* send, void* recv, size_t count) {
  if (ctx.transport->size() == 1) return CopyLocal(ctx, send, recv, count);
  Channel ch(ctx);
  CHORUS_RETURN_IF_ERROR(
      AllGatherPhase(ch, Partition(count, ctx.transport->size(), ctx.segment_elems), send, recv));
  return ch.FlushReferenced();
}

Status DirectAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t count) {
  if (ctx.transport->size() == 1) return CopyLocal(ctx, send, recv, count);
  Channel ch(ctx);
  CHORUS_RETURN_IF_ERROR(
      AllGatherPhase(ch, Partition(ctx.recv_counts, ctx.segment_elems), send, recv));
  return ch.FlushReferenced();
}

// Rank r's chunk goes straight to its place in `recv`; the all-gather then runs in place. A
// peer overwrites its copy of chunk q only after rank q posted it, which rank q does only after
// it read everyone's chunk q, so no flush is needed between the phases.
Status DirectAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  if (ctx.transport->size() == 1) return CopyLocal(ctx, send, recv, count);
  const Partition part(count, ctx.transport->size(), ctx.segment_elems);
  void* mine = Advance(recv, part.Offset(ctx.transport->rank()), ctx.elem_size);
  Channel ch(ctx);
  // On thread ranks the peers read each rank's chunk in place; elsewhere they read slots.
  CHORUS_RETURN_IF_ERROR(
      ReduceScatterPhase(ch, part, send, mine, /*peers_read_out=*/ctx.transport->zero_copy()));
  CHORUS_RETURN_IF_ERROR(AllGatherPhase(ch, part, mine, recv));
  return ch.FlushReferenced();
}

Status EmptyCall(const CallContext& ctx) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  Channel ch(ctx);
  ch.SetSegment(0, 1);
  ch.SetStep(0, 2);
  for (int i = 1; i < p; ++i) CHORUS_RETURN_IF_ERROR(ch.SendCopy((r + i) % p, nullptr, 0));
  ch.SetStep(1, 2);
  for (int i = 1; i < p; ++i) {
    const int q = (r + p - i) % p;
    Message m;
    CHORUS_RETURN_IF_ERROR(ch.Await(q, 0, &m));
    ch.Done(q, m);
  }
  return Status::Ok();
}

}  // namespace chorus::internal
