// Point-to-point messages (see p2p.h).
#include "algo/p2p.h"

#include <algorithm>
#include <utility>

#include "base/stream_copy.h"

namespace chorus::internal {

std::string DescribeMessage(const CallTag& tag) {
  return "message #" + std::to_string(tag.call_index & ~kMessageBit) + " (count " +
         std::to_string(tag.count) + ", " + std::string(DataTypeName(tag.dtype)) + ", tag " +
         std::to_string(tag.layout) + ")";
}

PointToPoint::PointToPoint(Transport& transport, Waiter& waiter)
    : t_(transport),
      waiter_(waiter),
      stash_(static_cast<size_t>(transport.size())),
      sent_(static_cast<size_t>(transport.size()), 0),
      received_(static_cast<size_t>(transport.size()), 0) {}

PointToPoint::Buffer PointToPoint::Spare(size_t bytes) {
  if (bytes == 0) return {};
  size_t best = spare_.size();  // the smallest that fits
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].capacity >= bytes &&
        (best == spare_.size() || spare_[i].capacity < spare_[best].capacity)) {
      best = i;
    }
  }
  if (best == spare_.size()) {
    return Buffer{std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
  }
  Buffer buffer = std::move(spare_[best]);
  spare_[best] = std::move(spare_.back());
  spare_.pop_back();
  spare_bytes_ -= buffer.capacity;
  return buffer;
}

void PointToPoint::Recycle(Buffer buffer) {
  if (buffer.capacity == 0 || spare_bytes_ + buffer.capacity > kSpareBytes) return;
  spare_bytes_ += buffer.capacity;
  spare_.push_back(std::move(buffer));
}

void PointToPoint::Stash(int peer, const CallTag& tag, const void* data, size_t bytes) {
  Stashed& s = stash_[static_cast<size_t>(peer)].emplace_back();
  s.tag = tag;
  s.buffer = Spare(bytes);
  s.bytes = bytes;
  if (bytes > 0) CopyBytes(s.buffer.data.get(), data, bytes);
}

bool PointToPoint::StashHead(int peer) {
  Message m;
  if (!t_.TryPeek(peer, &m, nullptr) || !IsMessage(m.tag)) return false;
  // A message that arrived after the group failed may point into memory its owner is about to
  // take back (sent by reference): leave it alone.
  if (t_.failed()) return false;
  Stash(peer, m.tag, m.data, m.bytes);
  t_.Release(peer);
  return true;
}

bool PointToPoint::Probe(int peer) {
  if (!stash_[static_cast<size_t>(peer)].empty()) return true;
  if (peer == t_.rank() || t_.failed()) return false;
  Message m;
  while (t_.TryPeek(peer, &m, nullptr)) {
    if (IsMessage(m.tag)) return true;
    if (!t_.Abandoned(m.tag.call_index)) return false;  // the peer's next collective
    t_.Release(peer);  // left over from a collective some rank rejected, as TakeNext drops it
  }
  return false;
}

bool PointToPoint::Settled(int peer) {
  return Probe(peer) || t_.failed() || (peer != t_.rank() && !t_.PeerAlive(peer));
}

bool PointToPoint::AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout) {
  const auto arrived = [&] {
    for (int peer : peers) {
      if (Probe(peer)) return true;
    }
    return false;
  };
  const auto settled = [&] {  // a Recv from one of them would not wait
    for (int peer : peers) {
      if (Settled(peer)) return true;
    }
    return false;
  };
  if (wake_.exchange(false, std::memory_order_acq_rel)) return settled();
  // The wait a Recv makes (spin, yield, sleep: base/wait.h), so that a message a thread
  // awaits costs it no more than one it receives. The wake-up is part of the condition, so
  // that a sleep re-checks it too.
  waiter_.StartCall(timeout);
  waiter_.Wait(
      [&] {
        if (wake_.load(std::memory_order_acquire)) return true;
        StashArrivals(peers);  // take in what the others send, so that their sends go on
        return arrived();
      },
      [&] {
        if (t_.failed()) return true;
        for (int peer : peers) {
          if (peer != t_.rank() && !t_.PeerAlive(peer)) return true;
        }
        return false;
      },
      t_.doorbell(), peers.empty() ? -1 : peers.front());
  wake_.store(false, std::memory_order_release);  // the caller looks at what it was woken for
  return settled();
}

void PointToPoint::WakeAwaitMessage() {
  wake_.store(true, std::memory_order_release);
  t_.doorbell().Ring();
}

bool PointToPoint::StashArrivals(std::span<const int> except) {
  bool any = false;
  for (int peer = 0; peer < t_.size(); ++peer) {
    if (peer == t_.rank() || std::find(except.begin(), except.end(), peer) != except.end() ||
        !t_.Linked(peer)) {
      continue;
    }
    while (StashHead(peer)) any = true;
  }
  return any;
}

void PointToPoint::TakeIn() {
  if (!StashArrivals()) return;
  const Deadline end = Clock::now() + kTakeInFor;
  Deadline quiet = std::min(end, Clock::now() + kTakeInQuiet);
  while (Clock::now() < quiet && !t_.failed()) {
    t_.Poll();
    bool more = false;
    if (t_.rings_doorbell()) {
      more = t_.doorbell().Sleep([&] { return StashArrivals(); }, quiet);
    } else {
      more = StashArrivals();
      if (!more) YieldCpu();
    }
    if (more) quiet = std::min(end, Clock::now() + kTakeInQuiet);
  }
}

Status PointToPoint::Fail(Status status) {
  t_.Fail(status);
  return status;
}

Status PointToPoint::WaitFailed(WaitResult result, const char* op, const std::string& what,
                                int peer) {
  const std::string me = std::string(op) + ": rank " + std::to_string(t_.rank());
  switch (result) {
    case WaitResult::kTimedOut:
      return Fail(DeadlineExceeded(me + " timed out after " +
                                   std::to_string(waiter_.timeout().count()) + " ms waiting for " +
                                   what));
    case WaitResult::kLostWakeup:
      return Fail(Internal(me + " waited for " + what +
                           ": it came, but its doorbell never rang (a lost wake-up)"));
    case WaitResult::kInterrupted:
    case WaitResult::kReady:
      break;
  }
  if (t_.failed()) {
    const Status cause = t_.failure();
    return Status(cause.code(), me + " stopped: " + cause.message());
  }
  return Fail(Unavailable(me + " stopped: " + t_.DescribeDeath(peer) +
                          " while this rank waited for " + what));
}

bool PointToPoint::PostNext(Outgoing& out, Traffic* traffic) {
  const size_t n = std::min(t_.slot_bytes(), out.bytes - out.done);
  const std::byte* src = out.src + out.done;
  const size_t inline_bytes = t_.inline_bytes();
  if ((inline_bytes > 0 && n <= inline_bytes) || out.by_reference) {
    // Post copies it into the mailbox entry, or the peer reads it where it is (zero copy: the
    // caller keeps `src` until Drained).
    if (!t_.TryCredit(out.peer)) return false;
    t_.Post(out.peer, Message{src, n, out.tag});
  } else {
    void* slot = t_.TryReserve(out.peer);
    if (slot == nullptr) return false;
    if (t_.copies_at_post()) {  // the transport copies into the slot only what it cannot send
      t_.Post(out.peer, Message{src, n, out.tag});
    } else {
      if (n > 0) CopyBytes(slot, src, n);
      t_.Post(out.peer, Message{slot, n, out.tag});
    }
  }
  traffic->bytes_sent += n;
  out.done += n;
  out.started = true;
  return true;
}

Status PointToPoint::CheckSegment(const Incoming& in, const CallTag& got, size_t got_bytes) {
  if (got == in.want && got_bytes <= in.bytes - in.done) return Status::Ok();
  const std::string me = "recv: rank " + std::to_string(t_.rank());
  const std::string from = "rank " + std::to_string(in.peer);
  const CallTag& want = in.want;
  if (got.call_index == want.call_index && got.count == want.count && got.dtype == want.dtype &&
      got.layout == want.layout) {
    return Fail(Internal(me + ": a segment of " + std::to_string(got_bytes) + " bytes from " +
                         from + " overruns " + DescribeMessage(want)));
  }
  if (in.peer == t_.rank()) {  // nothing was taken: the message stays for a Recv that fits it
    return InvalidArgument(me + ": this rank sent itself " + DescribeMessage(got) + ", not " +
                           DescribeMessage(want));
  }
  return Fail(FailedPrecondition(me + ": ranks disagree on the message: " + from + " sent " +
                                 DescribeMessage(got) + ", rank " + std::to_string(t_.rank()) +
                                 " receives " + DescribeMessage(want)));
}

Status PointToPoint::TakeNext(Incoming& in, Traffic* traffic, bool* moved) {
  *moved = false;
  std::deque<Stashed>& stash = stash_[static_cast<size_t>(in.peer)];
  if (!stash.empty()) {  // older than whatever the FIFO holds
    Stashed& s = stash.front();
    CHORUS_RETURN_IF_ERROR(CheckSegment(in, s.tag, s.bytes));
    if (s.bytes > 0) CopyBytes(in.dst + in.done, s.buffer.data.get(), s.bytes);
    in.done += s.bytes;
    in.started = true;
    traffic->bytes_received += s.bytes;
    Recycle(std::move(s.buffer));
    stash.pop_front();
    *moved = true;
    return Status::Ok();
  }
  if (in.peer == t_.rank()) return Status::Ok();  // its messages are all in the stash
  Message m;
  if (!t_.TryPeek(in.peer, &m, &in.want)) return Status::Ok();
  // A message that arrived after the group failed may point into memory its owner is about to
  // take back: leave it alone.
  if (t_.failed()) {
    return WaitFailed(WaitResult::kInterrupted, "recv", "rank " + std::to_string(in.peer),
                      in.peer);
  }
  if (!IsMessage(m.tag)) {
    // Left over from a collective call that some rank rejected: its sender abandoned it.
    if (t_.Abandoned(m.tag.call_index)) {
      t_.Release(in.peer);
      *moved = true;
      return Status::Ok();
    }
    return Fail(FailedPrecondition(
        "recv: rank " + std::to_string(t_.rank()) + ": rank " + std::to_string(in.peer) +
        " is in " + std::string(CollectiveKindName(m.tag.kind)) + " #" +
        std::to_string(m.tag.call_index) + " and sent no message before it, where rank " +
        std::to_string(t_.rank()) + " receives " + DescribeMessage(in.want) +
        " (between two ranks, messages and collectives are taken in the order the sender made "
        "them)"));
  }
  CHORUS_RETURN_IF_ERROR(CheckSegment(in, m.tag, m.bytes));
  if (m.bytes > 0) CopyBytes(in.dst + in.done, m.data, m.bytes);
  t_.Release(in.peer);
  in.done += m.bytes;
  in.started = true;
  traffic->bytes_received += m.bytes;
  *moved = true;
  return Status::Ok();
}

Status PointToPoint::Send(const void* data, size_t count, DataType dtype, int peer, uint32_t tag,
                          Traffic* traffic) {
  const size_t bytes = count * DataTypeSize(dtype);
  const CallTag message = MessageTag(sent_[static_cast<size_t>(peer)], count, dtype, tag);
  if (peer == t_.rank()) {  // to itself: straight into the stash
    Stash(peer, message, data, bytes);
    ++sent_[static_cast<size_t>(peer)];
    return Status::Ok();
  }
  Outgoing out{static_cast<const std::byte*>(data), bytes, peer, message};
  while (!out.finished()) {
    if (PostNext(out, traffic)) continue;
    // While there is no room, take in what arrives: the peer (or a ring of peers) may be
    // sending to this rank before it receives, and waits for room in turn.
    const WaitResult r =
        waiter_.Wait([&] { return PostNext(out, traffic) || StashArrivals(); },
                     [&] { return t_.failed() || !t_.PeerAlive(peer); }, t_.doorbell(), peer);
    if (r != WaitResult::kReady) {
      return WaitFailed(
          r, "send",
          "rank " + std::to_string(peer) + " to take " + DescribeMessage(message) + " from it",
          peer);
    }
  }
  ++sent_[static_cast<size_t>(peer)];
  return Status::Ok();
}

Status PointToPoint::Recv(void* data, size_t count, DataType dtype, int peer, uint32_t tag,
                          Traffic* traffic) {
  const size_t bytes = count * DataTypeSize(dtype);
  Incoming in{static_cast<std::byte*>(data), bytes, peer,
              MessageTag(received_[static_cast<size_t>(peer)], count, dtype, tag)};
  if (peer == t_.rank() && stash_[static_cast<size_t>(peer)].empty()) {
    return InvalidArgument("recv: rank " + std::to_string(t_.rank()) +
                           " receives from itself, but sent itself no message first");
  }
  while (!in.finished()) {
    bool moved = false;
    CHORUS_RETURN_IF_ERROR(TakeNext(in, traffic, &moved));
    if (moved) continue;
    // While waiting, take in what other ranks send (they may wait for room to send to this
    // rank before they send what another rank waits for).
    Status error;
    const WaitResult r = waiter_.Wait(
        [&] {
          error = TakeNext(in, traffic, &moved);
          return moved || !error.ok() || StashArrivals(peer);
        },
        [&] { return t_.failed() || !t_.PeerAlive(peer); }, t_.doorbell(), peer);
    CHORUS_RETURN_IF_ERROR(error);
    if (r != WaitResult::kReady) {
      return WaitFailed(r, "recv", DescribeMessage(in.want) + " from rank " + std::to_string(peer),
                        peer);
    }
  }
  ++received_[static_cast<size_t>(peer)];
  return Status::Ok();
}

Status PointToPoint::SendRecv(const void* send, size_t send_count, DataType send_dtype, int to,
                              void* recv, size_t recv_count, DataType recv_dtype, int from,
                              uint32_t tag, Traffic* traffic) {
  if (to == t_.rank() || from == t_.rank()) {
    // A message to itself is in the stash at once, and one from itself must be there already
    // (checked before anything is sent).
    if (from == t_.rank() && to != from && stash_[static_cast<size_t>(from)].empty()) {
      return InvalidArgument("sendrecv: rank " + std::to_string(t_.rank()) +
                             " receives from itself, but sent itself no message first");
    }
    CHORUS_RETURN_IF_ERROR(Send(send, send_count, send_dtype, to, tag, traffic));
    return Recv(recv, recv_count, recv_dtype, from, tag, traffic);
  }
  Outgoing out{static_cast<const std::byte*>(send), send_count * DataTypeSize(send_dtype), to,
               MessageTag(sent_[static_cast<size_t>(to)], send_count, send_dtype, tag)};
  Incoming in{static_cast<std::byte*>(recv), recv_count * DataTypeSize(recv_dtype), from,
              MessageTag(received_[static_cast<size_t>(from)], recv_count, recv_dtype, tag)};
  Status error;
  // Moves all that can move now; true if anything did (or an error stops the call).
  const auto step = [&] {
    bool any = false;
    while (!out.finished() && PostNext(out, traffic)) any = true;
    bool moved = true;
    while (!in.finished() && moved) {
      error = TakeNext(in, traffic, &moved);
      if (!error.ok()) return true;
      any = any || moved;
    }
    return any;
  };
  // On a shared address space (thread ranks) a large message goes by reference: `to` copies it
  // straight out of `send`, once instead of twice, and the call returns once it has (below).
  out.by_reference = t_.zero_copy() && out.bytes > kByReferenceFrom;
  Status status = SendRecvSteps(out, in, step, error);
  if (!status.ok() && out.by_reference && out.started) {
    // The group failed, but `to` may be copying out of `send` (it looked before it saw the
    // failure): give it the moment that takes, as a failed collective does (CommState::Quiesce).
    const Deadline give_up = Clock::now() + std::chrono::milliseconds(100);
    while (!t_.Drained(to) && t_.PeerAlive(to) && Clock::now() < give_up) YieldCpu();
  }
  if (!status.ok()) return status;
  ++sent_[static_cast<size_t>(to)];
  ++received_[static_cast<size_t>(from)];
  return Status::Ok();
}

template <typename Step>
Status PointToPoint::SendRecvSteps(Outgoing& out, Incoming& in, Step& step, Status& error) {
  const int to = out.peer;
  const int from = in.peer;
  while (!out.finished() || !in.finished()) {
    if (step()) {
      CHORUS_RETURN_IF_ERROR(error);
      continue;
    }
    // As Send and Recv do, take in what the others send meanwhile; `from`'s next messages too,
    // once this one is in.
    const int waited = in.finished() ? to : from;
    const WaitResult r = waiter_.Wait(
        [&] { return step() || StashArrivals(in.finished() ? -1 : from); },
        [&] {  // a peer done with its part may have closed its communicator already
          return t_.failed() || (!out.finished() && !t_.PeerAlive(to)) ||
                 (!in.finished() && !t_.PeerAlive(from));
        },
        t_.doorbell(), waited);
    CHORUS_RETURN_IF_ERROR(error);
    if (r != WaitResult::kReady) {
      const int peer = !in.finished() && !t_.PeerAlive(from) ? from
                       : !out.finished() && !t_.PeerAlive(to) ? to
                                                               : waited;
      const std::string what =
          in.finished() ? "rank " + std::to_string(to) + " to take " +
                              DescribeMessage(out.tag) + " from it"
                        : DescribeMessage(in.want) + " from rank " + std::to_string(from) +
                              (out.finished() ? "" : " and room to send to rank " +
                                                         std::to_string(to));
      return WaitFailed(r, "sendrecv", what, peer);
    }
  }
  // `send` may be reused only once `to` (or its stash) has taken all of it; meanwhile take in
  // what the others send, as every wait here does.
  while (out.by_reference && !t_.Drained(to)) {
    const WaitResult r =
        waiter_.Wait([&] { return t_.Drained(to) || StashArrivals(); },
                     [&] { return t_.failed() || !t_.PeerAlive(to); }, t_.doorbell(), to);
    if (r != WaitResult::kReady) {
      return WaitFailed(
          r, "sendrecv",
          "rank " + std::to_string(to) + " to take " + DescribeMessage(out.tag) + " from it", to);
    }
  }
  return Status::Ok();
}

}  // namespace chorus::internal
