// Pairwise exchange of element runs, the step that recursive doubling, recursive halving and
// Bruck are built from: in one step a rank sends a run of its buffer to one peer and receives a
// run from another (often the same peer).
//
// A run longer than a segment travels as several messages. Sending and receiving alternate,
// message by message, so neither side ever waits for a slot its partner has not had the chance
// to free: with one free slot per link the exchange always progresses, however long the runs
// and whether or not their lengths match.
//
// A run is at most two contiguous pieces: Bruck's block sequences wrap around the end of the
// buffer. Sender and receiver cut the same run into the same messages, so every message's
// length is known to both sides.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include "algo/plan.h"
#include "algo/primitives.h"

namespace chorus::internal {

// Elements [begin[0], begin[0] + size[0]) then [begin[1], begin[1] + size[1]) of a buffer.
struct Run {
  std::array<size_t, 2> begin{};
  std::array<size_t, 2> size{};

  static Run Contiguous(size_t begin, size_t size) { return {{begin, 0}, {size, 0}}; }

  // Messages of at most `segment` elements; an empty piece has none.
  size_t Messages(size_t segment) const {
    return (size[0] + segment - 1) / segment + (size[1] + segment - 1) / segment;
  }
  // Offset and length of message `k`, in elements.
  std::pair<size_t, size_t> MessageAt(size_t k, size_t segment) const {
    const size_t first = (size[0] + segment - 1) / segment;
    const int piece = k < first ? 0 : 1;
    const size_t within = (piece == 0 ? k : k - first) * segment;
    return {begin[piece] + within, std::min(segment, size[piece] - within)};
  }
};

enum class SendMode {
  kCopy,  // through a staging slot: the sender may overwrite the run as soon as it is sent
  kAuto,  // Channel::Send: large messages by reference on a zero-copy transport; the run must
          // stay unchanged until the channel is flushed
};

struct Outgoing {
  int peer;
  const void* base;  // the run's buffer
  Run run;
  SendMode mode;
};

struct Incoming {
  int peer;
  Run run;
};

// Sends `out` and receives `in`, one message each in turn. For every message received,
// on_recv(offset, data, n) consumes `n` elements that belong at element `offset` of the run's
// buffer; `data` is valid only during the call. Either run may be empty.
template <typename OnRecv>
Status Exchange(Channel& ch, const Outgoing& out, const Incoming& in, OnRecv&& on_recv) {
  const CallContext& ctx = ch.ctx();
  const size_t segment = ctx.segment_elems;
  const size_t sends = out.run.Messages(segment);
  const size_t receives = in.run.Messages(segment);
  const size_t messages = std::max(sends, receives);
  for (size_t k = 0; k < messages; ++k) {
    ch.SetSegment(k, messages);
    if (k < sends) {
      const auto [offset, n] = out.run.MessageAt(k, segment);
      const void* src = Advance(out.base, offset, ctx.elem_size);
      CHORUS_RETURN_IF_ERROR(out.mode == SendMode::kCopy ? ch.SendCopy(out.peer, src, n)
                                                         : ch.Send(out.peer, src, n));
    }
    if (k < receives) {
      const auto [offset, n] = in.run.MessageAt(k, segment);
      Message m;
      CHORUS_RETURN_IF_ERROR(ch.Await(in.peer, n, &m));
      on_recv(offset, m.data, n);
      ch.Done(in.peer, m);
    }
  }
  return Status::Ok();
}

}  // namespace chorus::internal
