// Recursive doubling and Rabenseifner all-reduce (see recursive.h).
#include "algo/recursive.h"

#include <bit>
#include <cstring>

#include "algo/exchange.h"
#include "algo/plan.h"
#include "base/stream_copy.h"

namespace chorus::internal {
namespace {

// The power-of-two group the exchanges run in (see recursive.h for the fold).
class Fold {
 public:
  Fold(int ranks, int rank)
      : group_(static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)))),
        extra_(ranks - group_),
        rank_(rank) {}

  // p': the ranks that take part in the exchanges.
  int group() const { return group_; }
  bool any() const { return extra_ > 0; }
  // An even rank below 2 rem: hands its input over and waits for the result.
  bool hands_over() const { return rank_ < 2 * extra_ && rank_ % 2 == 0; }
  // An odd rank below 2 rem: reduces its neighbour's input into its own first.
  bool absorbs() const { return rank_ < 2 * extra_ && rank_ % 2 == 1; }
  // This rank's place in the group, and the rank at a place.
  int index() const { return rank_ < 2 * extra_ ? rank_ / 2 : rank_ - extra_; }
  int RankAt(int index) const { return index < extra_ ? 2 * index + 1 : index + extra_; }
  // Steps of error messages: the fold's two, if any, plus `exchanges`.
  int Steps(int exchanges) const { return exchanges + (any() ? 2 : 0); }

 private:
  int group_;
  int extra_;
  int rank_;
};

int Log2(int power_of_two) { return std::countr_zero(static_cast<unsigned>(power_of_two)); }

// Combines the run `theirs` (from `peer`) with the same elements of `mine` into `recv`, the
// lower rank's operand on the left; `last` applies the kernel's finish (kAvg divides).
class Combine {
 public:
  Combine(const CallContext& ctx, const void* mine, void* recv, int peer, bool last)
      : ctx_(ctx),
        mine_(mine),
        recv_(recv),
        mine_first_(ctx.transport->rank() < peer),
        last_(last) {}

  void operator()(size_t offset, const void* theirs, size_t n) const {
    const void* own = Advance(mine_, offset, ctx_.elem_size);
    const void* lhs = mine_first_ ? own : theirs;
    const void* rhs = mine_first_ ? theirs : own;
    void* dst = Advance(recv_, offset, ctx_.elem_size);
    if (last_) {
      ctx_.kernel->finish(dst, lhs, rhs, n, ctx_.transport->size());
    } else {
      ctx_.kernel->combine(dst, lhs, rhs, n);
    }
  }

 private:
  const CallContext& ctx_;
  const void* mine_;
  void* recv_;
  bool mine_first_;
  bool last_;
};

// Copies received runs into place in `recv`.
auto CopyInto(const CallContext& ctx, void* recv) {
  return [&ctx, recv](size_t offset, const void* data, size_t n) {
    CopyBytes(Advance(recv, offset, ctx.elem_size), data, n * ctx.elem_size);
  };
}

void Ignore(size_t, const void*, size_t) {}

// Fold in: the odd rank reduces its even neighbour's input with its own into `recv`. The even
// rank's input may go by reference: that rank does not touch its buffers again until the
// result comes back, by which time the odd rank has long released the message.
Status FoldIn(Channel& ch, const Fold& fold, const void* send, void* recv, size_t count) {
  const int r = ch.transport().rank();
  const Run whole = Run::Contiguous(0, count);
  if (fold.hands_over()) {
    return Exchange(ch, {r + 1, send, whole, SendMode::kAuto}, {r + 1, Run{}}, Ignore);
  }
  if (fold.absorbs()) {
    return Exchange(ch, {r - 1, send, Run{}, SendMode::kCopy}, {r - 1, whole},
                    Combine(ch.ctx(), send, recv, r - 1, /*last=*/false));
  }
  return Status::Ok();
}

// Fold out: the odd rank hands the result to its even neighbour.
Status FoldOut(Channel& ch, const Fold& fold, void* recv, size_t count) {
  const int r = ch.transport().rank();
  const Run whole = Run::Contiguous(0, count);
  if (fold.absorbs()) {
    return Exchange(ch, {r - 1, recv, whole, SendMode::kAuto}, {r - 1, Run{}}, Ignore);
  }
  if (fold.hands_over()) {
    return Exchange(ch, {r + 1, recv, Run{}, SendMode::kCopy}, {r + 1, whole},
                    CopyInto(ch.ctx(), recv));
  }
  return Status::Ok();
}

}  // namespace

// Partial sums live in `recv` and are overwritten as each step's messages arrive, so they are
// always sent through staging slots (a partner may still be reading the previous step's).
Status RecursiveDoublingAllReduce(const CallContext& ctx, const void* send, void* recv,
                                  size_t count) {
  const int p = ctx.transport->size();
  if (p == 1) return CopyLocal(ctx, send, recv, count);
  const Fold fold(p, ctx.transport->rank());
  const int steps = fold.Steps(Log2(fold.group()));
  Channel ch(ctx);
  int step = 0;
  if (fold.any()) {
    ch.SetStep(step++, steps);
    CHORUS_RETURN_IF_ERROR(FoldIn(ch, fold, send, recv, count));
  }
  if (!fold.hands_over()) {
    const Run whole = Run::Contiguous(0, count);
    const void* mine = fold.absorbs() ? recv : send;
    for (int mask = 1; mask < fold.group(); mask <<= 1) {
      ch.SetStep(step++, steps);
      const int peer = fold.RankAt(fold.index() ^ mask);
      const bool last = 2 * mask == fold.group();
      CHORUS_RETURN_IF_ERROR(Exchange(ch, {peer, mine, whole, SendMode::kCopy}, {peer, whole},
                                      Combine(ctx, mine, recv, peer, last)));
      mine = recv;
    }
  } else {
    step += Log2(fold.group());
  }
  if (fold.any()) {
    ch.SetStep(step, steps);
    CHORUS_RETURN_IF_ERROR(FoldOut(ch, fold, recv, count));
  }
  return ch.FlushReferenced();
}

// The group splits the buffer into p' chunks. Halving: with `mask` from p'/2 down to 1, a
// rank keeps the half of its current chunk range on its side of bit `mask`, sends the other
// half to the partner across that bit and reduces what the partner sends for its own half.
// Doubling retraces the steps in reverse, swapping finished ranges.
//
// Messages may point at the caller's buffers (SendMode::kAuto): a rank never writes a range
// it has sent until the partner that read it sends that range back finished in the doubling
// phase, and the partner sends only after it released every message of the halving step.
Status RabenseifnerAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const int p = ctx.transport->size();
  if (p == 1) return CopyLocal(ctx, send, recv, count);
  const Fold fold(p, ctx.transport->rank());
  const int group = fold.group();
  const int steps = fold.Steps(2 * Log2(group));
  const Partition chunks(count, group, /*segment=*/1);
  auto range = [&](int first, int end) {  // chunks [first, end) of the buffer
    return Run::Contiguous(chunks.Offset(first), chunks.Offset(end) - chunks.Offset(first));
  };
  Channel ch(ctx);
  int step = 0;
  if (fold.any()) {
    ch.SetStep(step++, steps);
    CHORUS_RETURN_IF_ERROR(FoldIn(ch, fold, send, recv, count));
  }
  if (!fold.hands_over()) {
    const int me = fold.index();
    int first = 0;
    int end = group;
    const void* mine = fold.absorbs() ? recv : send;
    for (int mask = group / 2; mask >= 1; mask >>= 1) {
      ch.SetStep(step++, steps);
      const int peer = fold.RankAt(me ^ mask);
      const int middle = first + mask;
      const bool keep_lower = (me & mask) == 0;
      const Run keep = keep_lower ? range(first, middle) : range(middle, end);
      const Run give = keep_lower ? range(middle, end) : range(first, middle);
      CHORUS_RETURN_IF_ERROR(Exchange(ch, {peer, mine, give, SendMode::kAuto}, {peer, keep},
                                      Combine(ctx, mine, recv, peer, /*last=*/mask == 1)));
      if (keep_lower) {
        end = middle;
      } else {
        first = middle;
      }
      mine = recv;
    }
    // Chunk `me` is complete here: [first, end) == [me, me + 1).
    for (int mask = 1; mask < group; mask <<= 1) {
      ch.SetStep(step++, steps);
      const int peer = fold.RankAt(me ^ mask);
      const bool lower = (me & mask) == 0;
      const Run theirs = lower ? range(end, end + mask) : range(first - mask, first);
      CHORUS_RETURN_IF_ERROR(Exchange(ch, {peer, recv, range(first, end), SendMode::kAuto},
                                      {peer, theirs}, CopyInto(ctx, recv)));
      if (lower) {
        end += mask;
      } else {
        first -= mask;
      }
    }
  } else {
    step += 2 * Log2(group);
  }
  if (fold.any()) {
    ch.SetStep(step, steps);
    CHORUS_RETURN_IF_ERROR(FoldOut(ch, fold, recv, count));
  }
  return ch.FlushReferenced();
}

}  // namespace chorus::internal
