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

bool PointToPoint::StashHead(int peer) {
  Message m;
  if (!t_.TryPeek(peer, &m, nullptr) || !IsMessage(m.tag)) return false;
  Stashed& s = stash_[static_cast<size_t>(peer)].emplace_back();
  s.tag = m.tag;
  s.bytes.resize(m.bytes);
  if (m.bytes > 0) CopyBytes(s.bytes.data(), m.data, m.bytes);
  t_.Release(peer);
  return true;
}

bool PointToPoint::StashArrivals(int except) {
  bool any = false;
  for (int peer = 0; peer < t_.size(); ++peer) {
    if (peer == t_.rank() || peer == except || !t_.Linked(peer)) continue;
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

Status PointToPoint::Send(const void* data, size_t count, DataType dtype, int peer, uint32_t tag,
                          Traffic* traffic) {
  const size_t bytes = count * DataTypeSize(dtype);
  const CallTag message = MessageTag(sent_[static_cast<size_t>(peer)], count, dtype, tag);
  const auto* src = static_cast<const std::byte*>(data);
  if (peer == t_.rank()) {  // to itself: straight into the stash
    Stashed& s = stash_[static_cast<size_t>(peer)].emplace_back();
    s.tag = message;
    if (bytes > 0) s.bytes.assign(src, src + bytes);
    ++sent_[static_cast<size_t>(peer)];
    return Status::Ok();
  }
  const size_t segment = t_.slot_bytes();
  size_t done = 0;
  do {
    const size_t n = std::min(segment, bytes - done);
    void* slot = nullptr;
    for (;;) {
      // While there is no room, take in what arrives: the peer (or a ring of peers) may be
      // sending to this rank before it receives, and waits for room in turn.
      const WaitResult r =
          waiter_.Wait([&] { return (slot = t_.TryReserve(peer)) != nullptr || StashArrivals(); },
                       [&] { return t_.failed() || !t_.PeerAlive(peer); }, t_.doorbell(), peer);
      if (r != WaitResult::kReady) {
        return WaitFailed(
            r, "send",
            "rank " + std::to_string(peer) + " to take " + DescribeMessage(message) + " from it",
            peer);
      }
      if (slot != nullptr) break;
    }
    if (n > 0) CopyBytes(slot, src + done, n);
    t_.Post(peer, Message{slot, n, message});
    traffic->bytes_sent += n;
    done += n;
  } while (done < bytes);
  ++sent_[static_cast<size_t>(peer)];
  return Status::Ok();
}

Status PointToPoint::Recv(void* data, size_t count, DataType dtype, int peer, uint32_t tag,
                          Traffic* traffic) {
  const size_t bytes = count * DataTypeSize(dtype);
  const CallTag want = MessageTag(received_[static_cast<size_t>(peer)], count, dtype, tag);
  auto* dst = static_cast<std::byte*>(data);
  const std::string from = "rank " + std::to_string(peer);
  const std::string me = "recv: rank " + std::to_string(t_.rank());
  std::deque<Stashed>& stash = stash_[static_cast<size_t>(peer)];
  if (peer == t_.rank() && stash.empty()) {
    return InvalidArgument(me + " receives from itself, but sent itself no message first");
  }
  // The tag of each segment must be the one this Recv expects.
  auto check = [&](const CallTag& got, size_t got_bytes, size_t done) -> Status {
    if (got == want && got_bytes <= bytes - done) return Status::Ok();
    if (got.call_index == want.call_index && got.count == want.count && got.dtype == want.dtype &&
        got.layout == want.layout) {
      return Fail(Internal(me + ": a segment of " + std::to_string(got_bytes) + " bytes from " +
                           from + " overruns " + DescribeMessage(want)));
    }
    if (peer == t_.rank()) {  // nothing was taken: the message stays for a Recv that fits it
      return InvalidArgument(me + ": this rank sent itself " + DescribeMessage(got) + ", not " +
                             DescribeMessage(want));
    }
    return Fail(FailedPrecondition(me + ": ranks disagree on the message: " + from + " sent " +
                                   DescribeMessage(got) + ", rank " + std::to_string(t_.rank()) +
                                   " receives " + DescribeMessage(want)));
  };
  size_t done = 0;
  bool first = true;
  while (first || done < bytes) {
    first = false;
    if (!stash.empty()) {
      Stashed& s = stash.front();
      CHORUS_RETURN_IF_ERROR(check(s.tag, s.bytes.size(), done));
      if (!s.bytes.empty()) CopyBytes(dst + done, s.bytes.data(), s.bytes.size());
      done += s.bytes.size();
      traffic->bytes_received += s.bytes.size();
      stash.pop_front();
      continue;
    }
    Message m;
    for (;;) {
      // While waiting, take in what other ranks send (they may wait for room to send to this
      // rank before they send what another rank waits for).
      const WaitResult r =
          waiter_.Wait([&] { return t_.TryPeek(peer, &m, &want) || StashArrivals(peer); },
                       [&] { return t_.failed() || !t_.PeerAlive(peer); }, t_.doorbell(), peer);
      if (r != WaitResult::kReady) {
        return WaitFailed(r, "recv", DescribeMessage(want) + " from " + from, peer);
      }
      if (!t_.TryPeek(peer, &m, &want)) continue;  // stashed another rank's; wait on
      // A message that arrived after the group failed may point into memory its owner is
      // about to take back: leave it alone.
      if (t_.failed()) return WaitFailed(WaitResult::kInterrupted, "recv", from, peer);
      // Left over from a collective call that some rank rejected: its sender abandoned it.
      if (!IsMessage(m.tag) && t_.Abandoned(m.tag.call_index)) {
        t_.Release(peer);
        continue;
      }
      break;
    }
    if (!IsMessage(m.tag)) {
      return Fail(FailedPrecondition(
          me + ": " + from + " is in " + std::string(CollectiveKindName(m.tag.kind)) + " #" +
          std::to_string(m.tag.call_index) + " and sent no message before it, where rank " +
          std::to_string(t_.rank()) + " receives " + DescribeMessage(want) +
          " (between two ranks, messages and collectives are taken in the order the sender made "
          "them)"));
    }
    CHORUS_RETURN_IF_ERROR(check(m.tag, m.bytes, done));
    if (m.bytes > 0) CopyBytes(dst + done, m.data, m.bytes);
    t_.Release(peer);
    done += m.bytes;
    traffic->bytes_received += m.bytes;
  }
  ++received_[static_cast<size_t>(peer)];
  return Status::Ok();
}

}  // namespace chorus::internal
