// The v-collectives (see varied.h).
#include "algo/varied.h"

#include <algorithm>

#include "algo/alltoall.h"
#include "algo/direct.h"
#include "algo/plan.h"
#include "base/collectives.h"

namespace chorus::internal {
namespace {

// A block of n elements travels as this many messages: at least one, empty for n = 0.
size_t MessagesFor(size_t n, size_t segment) {
  return n == 0 ? 1 : (n + segment - 1) / segment;
}

// Elements in message k of a block of n.
size_t LengthOf(size_t n, size_t k, size_t segment) {
  return n == 0 ? 0 : std::min(segment, n - k * segment);
}

// Whether the pair of ranks checks its element count (the counts are not in the call's tag).
enum class PairCheck : bool { kNo, kYes };

// What a rank sends to or receives from one peer: n elements at data (null when n is 0).
struct Block {
  const void* data = nullptr;
  size_t n = 0;
};

// Sends `out` to `peer` and receives `in` from it, one message each in turn (so that neither
// side waits for a slot the other cannot free); a side that is absent has no message at all,
// an empty block one empty message.
Status Transfer(Channel& ch, int peer, const Block* out, const Block* in, PairCheck check) {
  const CallContext& ctx = ch.ctx();
  const size_t segment = ctx.segment_elems;
  const size_t sends = out != nullptr ? MessagesFor(out->n, segment) : 0;
  const size_t receives = in != nullptr ? MessagesFor(in->n, segment) : 0;
  const size_t messages = std::max(sends, receives);
  for (size_t k = 0; k < messages; ++k) {
    ch.SetSegment(k, messages);
    if (k < sends) {
      if (check == PairCheck::kYes) ch.SetPairCount(out->n);
      CHORUS_RETURN_IF_ERROR(ch.Send(peer, Advance(out->data, k * segment, ctx.elem_size),
                                     LengthOf(out->n, k, segment)));
    }
    if (k < receives) {
      if (check == PairCheck::kYes) ch.SetPairCount(in->n);
      const size_t n = LengthOf(in->n, k, segment);
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(peer, n, &m));
      if (n > 0) {
        ch.CopyOut(const_cast<void*>(Advance(in->data, k * segment, ctx.elem_size)), m.data,
                   m.bytes);
      }
      ch.Done(peer, m);
    }
  }
  return Status::Ok();
}

// Block j of a buffer of blocks with these lengths.
Block BlockOf(const void* base, std::span<const size_t> counts, int j, size_t elem) {
  const size_t n = counts[static_cast<size_t>(j)];
  return {n > 0 ? Advance(base, BlockOffset(counts, j), elem) : nullptr, n};
}

// Block j of a buffer of blocks with these lengths that start at `displs` (back to back when
// it is empty).
Block BlockAt(const void* base, std::span<const size_t> counts, std::span<const size_t> displs,
              int j, size_t elem) {
  if (displs.empty()) return BlockOf(base, counts, j, elem);
  const auto q = static_cast<size_t>(j);
  return {counts[q] > 0 ? Advance(base, displs[q], elem) : nullptr, counts[q]};
}

// Copies the rank's own block from `from` to `to` unless it is already there.
void CopyOwn(Channel& ch, const Block& from, void* to) {
  if (from.n > 0 && from.data != to) ch.CopyOut(to, from.data, from.n * ch.ctx().elem_size);
}

}  // namespace

Status PairwiseAllGatherV(const CallContext& ctx, const void* send, void* recv, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const std::span<const size_t> counts = ctx.recv_counts;
  const size_t elem = ctx.elem_size;
  const Block mine{send, counts[static_cast<size_t>(r)]};
  Channel ch(ctx);
  CopyOwn(ch, mine, const_cast<void*>(BlockOf(recv, counts, r, elem).data));
  const int rounds = PairwiseRounds(p);
  for (int round = 0; p > 1 && round < rounds; ++round) {
    const int peer = PairwisePartner(r, round, p);
    if (peer == r) continue;
    ch.SetStep(round, rounds);
    const Block theirs = BlockOf(recv, counts, peer, elem);
    CHORUS_RETURN_IF_ERROR(Transfer(ch, peer, &mine, &theirs, PairCheck::kNo));
  }
  return ch.FlushReferenced();
}

Status DirectReduceScatterV(const CallContext& ctx, const void* send, void* recv, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const std::span<const size_t> counts = ctx.send_counts;
  const size_t elem = ctx.elem_size;
  const size_t segment = ctx.segment_elems;
  const Block own = BlockOf(send, counts, r, elem);
  Channel ch(ctx);
  if (p == 1) {
    CopyOwn(ch, own, recv);
    return Status::Ok();
  }
  // Segment-outer, as the direct reduce-scatter: in round k every rank sends segment k of each
  // block that has one (an empty block has one empty segment), then reduces its own segment k.
  size_t rounds = 1;
  for (size_t n : counts) rounds = std::max(rounds, MessagesFor(n, segment));
  for (size_t k = 0; k < rounds; ++k) {
    ch.SetSegment(k, rounds);
    ch.SetStep(0, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + i) % p;
      const Block block = BlockOf(send, counts, q, elem);
      if (k >= MessagesFor(block.n, segment)) continue;
      CHORUS_RETURN_IF_ERROR(ch.Send(q, Advance(block.data, k * segment, elem),
                                     LengthOf(block.n, k, segment)));
    }
    if (k >= MessagesFor(own.n, segment)) continue;
    ch.SetStep(1, 2);
    CHORUS_RETURN_IF_ERROR(ReduceInRankOrder(ch, Advance(recv, k * segment, elem),
                                             Advance(own.data, k * segment, elem),
                                             LengthOf(own.n, k, segment)));
  }
  return ch.FlushReferenced();
}

Status PairwiseAllToAllV(const CallContext& ctx, const void* send, void* recv, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t elem = ctx.elem_size;
  Channel ch(ctx);
  // Its own block: validation made send_counts[rank] == recv_counts[rank].
  CopyOwn(ch, BlockAt(send, ctx.send_counts, ctx.send_displs, r, elem),
          const_cast<void*>(BlockAt(recv, ctx.recv_counts, ctx.recv_displs, r, elem).data));
  const int rounds = PairwiseRounds(p);
  for (int round = 0; p > 1 && round < rounds; ++round) {
    const int peer = PairwisePartner(r, round, p);
    if (peer == r) continue;
    ch.SetStep(round, rounds);
    const Block out = BlockAt(send, ctx.send_counts, ctx.send_displs, peer, elem);
    const Block in = BlockAt(recv, ctx.recv_counts, ctx.recv_displs, peer, elem);
    CHORUS_RETURN_IF_ERROR(Transfer(ch, peer, &out, &in, PairCheck::kYes));
  }
  return ch.FlushReferenced();
}

Status DirectAllToAllV(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const size_t elem = ctx.elem_size;
  const size_t segment = ctx.segment_elems;
  if (p == 1) return PairwiseAllToAllV(ctx, send, recv, count);
  Channel ch(ctx);
  CopyOwn(ch, BlockAt(send, ctx.send_counts, ctx.send_displs, r, elem),
          const_cast<void*>(BlockAt(recv, ctx.recv_counts, ctx.recv_displs, r, elem).data));
  // Segment-outer, as the direct all-to-all: in round k every rank posts segment k of each
  // block it has for a peer (an empty block has one empty segment), then takes segment k of
  // each block for it. The rounds of a pair are the same on both sides (its count), so a rank
  // runs as many as its longest block needs; one whose blocks are short returns early.
  size_t rounds = 1;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const auto u = static_cast<size_t>(q);
    rounds = std::max({rounds, MessagesFor(ctx.send_counts[u], segment),
                       MessagesFor(ctx.recv_counts[u], segment)});
  }
  for (size_t k = 0; k < rounds; ++k) {
    ch.SetSegment(k, rounds);
    ch.SetStep(0, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + i) % p;
      const Block out = BlockAt(send, ctx.send_counts, ctx.send_displs, q, elem);
      if (k >= MessagesFor(out.n, segment)) continue;
      ch.SetPairCount(out.n);
      CHORUS_RETURN_IF_ERROR(
          ch.Send(q, Advance(out.data, k * segment, elem), LengthOf(out.n, k, segment)));
    }
    ch.SetStep(1, 2);
    for (int i = 1; i < p; ++i) {
      const int q = (r + p - i) % p;
      const Block in = BlockAt(recv, ctx.recv_counts, ctx.recv_displs, q, elem);
      if (k >= MessagesFor(in.n, segment)) continue;
      ch.SetPairCount(in.n);
      const size_t n = LengthOf(in.n, k, segment);
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(q, n, &m));
      if (n > 0) {
        ch.CopyOut(const_cast<void*>(Advance(in.data, k * segment, elem)), m.data, m.bytes);
      }
      ch.Done(q, m);
    }
  }
  return ch.FlushReferenced();
}

Status DirectGatherV(const CallContext& ctx, const void* send, void* recv, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = static_cast<int>(ctx.tag.root);
  const size_t elem = ctx.elem_size;
  const Block mine{send, ctx.send_elems};
  Channel ch(ctx);
  ch.SetStep(0, 1);
  if (r != root) {
    CHORUS_RETURN_IF_ERROR(Transfer(ch, root, &mine, nullptr, PairCheck::kYes));
    return ch.FlushReferenced();
  }
  const std::span<const size_t> counts = ctx.recv_counts;
  CopyOwn(ch, mine, const_cast<void*>(BlockOf(recv, counts, r, elem).data));
  for (int i = 1; i < p; ++i) {
    const int q = (root + i) % p;
    const Block theirs = BlockOf(recv, counts, q, elem);
    CHORUS_RETURN_IF_ERROR(Transfer(ch, q, nullptr, &theirs, PairCheck::kYes));
  }
  return Status::Ok();
}

Status DirectScatterV(const CallContext& ctx, const void* send, void* recv, size_t) {
  const int p = ctx.transport->size();
  const int r = ctx.transport->rank();
  const int root = static_cast<int>(ctx.tag.root);
  const size_t elem = ctx.elem_size;
  Channel ch(ctx);
  ch.SetStep(0, 1);
  if (r != root) {
    const Block mine{recv, ctx.recv_elems};
    return Transfer(ch, root, nullptr, &mine, PairCheck::kYes);
  }
  const std::span<const size_t> counts = ctx.send_counts;
  CopyOwn(ch, BlockOf(send, counts, r, elem), recv);
  for (int i = 1; i < p; ++i) {
    const int q = (root + i) % p;
    const Block theirs = BlockOf(send, counts, q, elem);
    CHORUS_RETURN_IF_ERROR(Transfer(ch, q, &theirs, nullptr, PairCheck::kYes));
  }
  return ch.FlushReferenced();
}

}  // namespace chorus::internal
