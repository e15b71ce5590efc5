// Channel and the fused ring primitives (see primitives.h).
#include "algo/primitives.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "algo/p2p.h"
#include "algo/select.h"
#include "base/collectives.h"
#include "base/stream_copy.h"

namespace chorus::internal {
namespace {

// "allreduce #3 (count 8, float32, sum, ring)": a call in the errors that name two of them.
std::string Describe(const CallTag& tag) {
  std::string s(CollectiveKindName(tag.kind));
  const CollectiveInfo& collective = Collective(tag.kind);
  s += " #" + std::to_string(tag.call_index) + " (";
  if (!collective.varied) {
    s += "count " + std::to_string(tag.count) + ", ";
  } else if (CountsShared(collective)) {
    char digest[24];
    std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(tag.layout));
    s += "count " + std::to_string(tag.count) + " in blocks " + digest + ", ";
  } else {
    s += std::to_string(tag.layout) + " elements between the pair, ";
  }
  s += DataTypeName(tag.dtype);
  if (collective.reduces) {
    s += ", ";
    s += ReduceOpName(tag.op);
  }
  if (collective.rooted) s += ", root " + std::to_string(tag.root);
  if (!collective.rooted && tag.root == static_cast<uint32_t>(kInternalRoot)) s += ", a split's";
  const auto algorithms = Algorithms();
  if (tag.algorithm < algorithms.size()) {
    s += ", ";
    s += algorithms[tag.algorithm].name;
  }
  return s + ")";
}

}  // namespace

Channel::Channel(const CallContext& ctx)
    : ctx_(ctx),
      tag_(ctx.tag),
      t_(*ctx.transport),
      stream_(StreamOutputs(ctx.tag.count * ctx.elem_size, ctx.transport->ranks_on_host())) {}

void Channel::CopyOut(void* dst, const void* src, size_t bytes) const {
  internal::CopyOut(stream_, dst, src, bytes);
}

void Channel::CopyIn(int peer, void* slot, const void* src, size_t bytes) const {
  if (SlotWriter* writer = WriterFor(peer); writer != nullptr) {
    writer->Copy(slot, src, bytes);
  } else {
    CopyBytes(slot, src, bytes);
  }
}

Status Channel::WaitFailed(WaitResult result, const char* what, int peer) {
  const std::string op(CollectiveKindName(ctx_.tag.kind));
  const std::string me = "rank " + std::to_string(t_.rank());
  Status status;
  // The group's first failure is the cause: "allreduce: rank 0 stopped: rank 3 stopped: rank 2
  // exited", not the operation twice.
  auto stopped = [&] {
    const Status cause = t_.failure();
    std::string_view why = cause.message();
    if (why.rfind(op + ": ", 0) == 0) why.remove_prefix(op.size() + 2);
    return Status(cause.code(), op + ": " + me + " stopped: " + std::string(why));
  };
  if (result == WaitResult::kTimedOut) {
    const uint64_t call = ctx_.tag.call_index;
    status = DeadlineExceeded(
        op + ": " + me + " timed out after " + std::to_string(ctx_.waiter->timeout().count()) +
        " ms waiting for " + what + " rank " + std::to_string(peer) + " (call #" +
        std::to_string(call) + ", step " + std::to_string(step_ + 1) + " of " +
        std::to_string(steps_) + ", segment " + std::to_string(segment_ + 1) + " of " +
        std::to_string(segments_) + ")");
    // Whom to blame: the peer waited on may be waiting too. Ask the group (census.h).
    const double waited = static_cast<double>(ctx_.waiter->timeout().count()) / 1000;
    const auto budget = std::clamp(ctx_.waiter->timeout() / 4, std::chrono::milliseconds(20),
                                   std::chrono::milliseconds(1000));
    std::vector<PeerState> states = t_.Census(call, Clock::now() + budget);
    if (auto* hook = g_after_census_for_testing.load(std::memory_order_relaxed)) hook();
    // A stopped rank stays silent; a live one starved of CPU (a busy machine, a sanitizer) only
    // until it runs. While more than one rank could be the cause and one of them is silent, ask
    // again for up to three budgets more, so that the live ones are heard and the verdict names
    // the one that is not (census.h, Ambiguous).
    const Clock::time_point last = Clock::now() + 3 * budget;
    while (Ambiguous(states, t_.rank(), call, waited) && !t_.failed() && Clock::now() < last) {
      // Thread and shm ranks read each other at once: give a starved one a moment to run.
      t_.beacon().Beat(Clock::now());  // alive: peers' censuses must not find this rank idle
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      states = t_.Census(call, std::min(last, Clock::now() + std::chrono::milliseconds(100)));
    }
    states[static_cast<size_t>(t_.rank())].waiting_for = peer;
    // A rank whose own deadline ran out while another rank, timed out first, was still asking
    // its census reports that rank's failure: the census would find it gone from the call.
    if (t_.failed()) return stopped();
    if (const std::string verdict = Blame(states, t_.rank(), call, waited); !verdict.empty()) {
      status = DeadlineExceeded(status.message() + "; " + verdict);
    }
  } else if (result == WaitResult::kLostWakeup) {
    status = Internal(op + ": " + me + " waited for " + what + " rank " + std::to_string(peer) +
                      " (call #" + std::to_string(ctx_.tag.call_index) + ", step " +
                      std::to_string(step_ + 1) + " of " + std::to_string(steps_) +
                      "): it came, but its doorbell never rang (a lost wake-up)");
  } else if (t_.failed()) {
    return stopped();
  } else if (t_.Rejected(ctx_.tag.call_index)) {
    // A rank rejected the call: every rank abandons it, and the communicator stays usable. The
    // rejecting rank may have gone on and destroyed its communicator since: the rejection is
    // still the answer to this call.
    const Status cause = t_.Rejection(ctx_.tag.call_index);
    return InvalidArgument(op + ": " + cause.message());
  } else {
    if (t_.DiedUnheard(peer) && AwaitFailureNotice()) return stopped();
    status = Unavailable(op + ": " + me + " stopped: " + t_.DescribeDeath(peer) +
                         " while this rank waited for " + what + " it");
  }
  t_.Fail(status);
  return status;
}

template <typename Ready>
Status Channel::WaitFor(int peer, Ready&& ready, const char* what) {
  Transport& t = t_;
  const uint64_t call = ctx_.tag.call_index;
  const WaitResult r = ctx_.waiter->Wait(
      ready, [&] { return t.failed() || t.Rejected(call) || !t.PeerAlive(peer); }, t.doorbell(),
      peer,
      [&] {
        // A rank held up sending this rank messages may be what this wait waits for.
        if (ctx_.p2p != nullptr) ctx_.p2p->TakeIn();
        return FindDisagreement();
      });
  if (r != WaitResult::kReady) {
    if (!disagreement_.ok()) return disagreement_;
    return WaitFailed(r, what, peer);
  }
  return Status::Ok();
}

namespace {

// True when two ranks in the same call passed arguments that cannot both be right. The counts
// of a varied collective, and so its total and its algorithm, may differ from rank to rank.
bool CallsDisagree(const CallTag& a, const CallTag& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.op != b.op || a.root != b.root) return true;
  if (Collective(a.kind).varied) return false;
  return a.count != b.count || a.algorithm != b.algorithm || a.layout != b.layout;
}

}  // namespace

bool Channel::FindDisagreement() {
  const uint64_t call = ctx_.tag.call_index;
  CallTag mine;
  if (!ReadCall(t_.beacon(), &mine) || mine.call_index != call) return false;
  const std::vector<PeerState> states = t_.Glance(call);
  for (size_t q = 0; q < states.size(); ++q) {
    const PeerState& s = states[q];
    if (static_cast<int>(q) == t_.rank() || !s.known || !s.answered || !s.has_call ||
        s.call.call_index != call || !CallsDisagree(s.call, mine)) {
      continue;
    }
    disagreement_ = CallsDiffer(static_cast<int>(q), s.call, mine);
    return true;
  }
  return false;
}

Status Channel::AwaitEntered(int peer) {
  const uint64_t call = ctx_.tag.call_index;
  CHORUS_RETURN_IF_ERROR(WaitFor(
      peer, [&] { return t_.Entered(peer, call); }, "the entry into this call of"));
  // A message of an earlier call still unread: that call went wrong (ranks that disagreed on a
  // broadcast's root each returned after their part), which a call of messages would have
  // found in its first wait. Left over from a rejected call, it is dropped, as Await does.
  Message m;
  while (t_.TryPeek(peer, &m, &tag_) && m.tag.call_index < call) {
    if (!t_.Abandoned(m.tag.call_index)) return CallsDiffer(peer, m.tag, tag_);
    t_.Release(peer);
  }
  CallTag theirs;
  if (!t_.PeerCall(peer, &theirs) || theirs.call_index != call || !CallsDisagree(theirs, tag_)) {
    return Status::Ok();  // it moved on (it could not without this rank), or it agrees
  }
  return CallsDiffer(peer, theirs, tag_);
}

Status Channel::CallsDiffer(int peer, const CallTag& theirs, const CallTag& mine) {
  return FailGroup(FailedPrecondition(std::string(CollectiveKindName(mine.kind)) +
                                      ": ranks disagree on the call: rank " + std::to_string(peer) +
                                      " is in " + Describe(theirs) + ", rank " +
                                      std::to_string(t_.rank()) + " is in " + Describe(mine)));
}

Status Channel::Await(int peer, size_t n, Message* m) {
  const uint64_t call = ctx_.tag.call_index;
  for (;;) {
    CHORUS_RETURN_IF_ERROR(WaitFor(
        peer, [&] { return t_.TryPeek(peer, m, &tag_); }, "data from"));
    // A message that arrived after the group failed may point into a buffer its owner is about
    // to take back: leave it alone.
    if (t_.failed()) return WaitFailed(WaitResult::kInterrupted, "data from", peer);
    if (m->tag == tag_) break;
    // A point-to-point message its sender sent before this call: kept for the Recv that takes
    // it (algo/p2p.h).
    if (IsMessage(m->tag) && ctx_.p2p != nullptr) {
      ctx_.p2p->StashHead(peer);
      continue;
    }
    // Left over from a call that some rank rejected: its sender abandoned it, and so did we.
    if (m->tag.call_index < call && t_.Abandoned(m->tag.call_index)) {
      t_.Release(peer);
      continue;
    }
    // The sender is past this call: it rejected it, or learnt that another rank did, and that
    // rank's notice is still on its way here.
    if (m->tag.call_index > call && AwaitRejection()) {
      return WaitFailed(WaitResult::kInterrupted, "data from", peer);
    }
    CallTag same_but_layout = m->tag;
    same_but_layout.layout = tag_.layout;
    if (same_but_layout == tag_) return FailGroup(CountsDisagree(peer, m->tag.layout));
    return CallsDiffer(peer, m->tag, tag_);
  }
  if (m->bytes != n * ctx_.elem_size) {  // same call, different CallOptions::segment_bytes
    return FailGroup(FailedPrecondition(
        std::string(CollectiveKindName(ctx_.tag.kind)) + ": rank " + std::to_string(peer) +
        " sent a segment of " + std::to_string(m->bytes) + " bytes where rank " +
        std::to_string(t_.rank()) + " expected " + std::to_string(n * ctx_.elem_size) +
        " (do the ranks pass the same CallOptions::segment_bytes?)"));
  }
  return Status::Ok();
}

Status Channel::CountsDisagree(int peer, uint64_t theirs) const {
  const std::string op(CollectiveKindName(ctx_.tag.kind));
  const std::string them = "rank " + std::to_string(peer);
  const std::string me = "rank " + std::to_string(t_.rank());
  if (CountsShared(Collective(ctx_.tag.kind))) {
    return FailedPrecondition(op + ": ranks disagree on the counts: " + them + " and " + me +
                              " pass different arrays (every rank must pass the same)");
  }
  return FailedPrecondition(op + ": ranks disagree on the counts: " + them + " sends " +
                            std::to_string(theirs) + " elements to " + me + ", which expects " +
                            std::to_string(tag_.layout) + " from it");
}

template <typename Known>
void Channel::AwaitNotice(Known&& known, Deadline until) {
  auto polled = [&] {
    t_.Poll();  // transports that progress only when polled (MPI) read the notices now
    return known();
  };
  while (!polled() && Clock::now() < until) {
    if (t_.rings_doorbell()) {
      t_.doorbell().Sleep(polled, std::min(until, Clock::now() + Waiter::kSleepSlice));
    } else {
      YieldCpu();
    }
  }
}

bool Channel::AwaitRejection() {
  const uint64_t call = ctx_.tag.call_index;
  AwaitNotice([&] { return t_.Rejected(call) || t_.failed(); }, Clock::now() + kRejectionGrace);
  return t_.Rejected(call) && !t_.failed();
}

bool Channel::AwaitFailureNotice() {
  AwaitNotice([&] { return t_.failed(); }, Clock::now() + kDeathNoticeGrace);
  return t_.failed();
}

Status Channel::FailGroup(Status status) {
  t_.Fail(status);
  return status;
}

void Channel::Done(int peer, const Message& m) {
  t_.Release(peer);
  ctx_.traffic->bytes_received += m.bytes;
}

Status Channel::Reserve(int peer, void** slot) {
  return WaitFor(
      peer, [&] { return (*slot = t_.TryReserve(peer)) != nullptr; }, "a slot released by");
}

Status Channel::AwaitCredit(int peer) {
  return WaitFor(
      peer, [&] { return t_.TryCredit(peer); }, "a slot released by");
}

void Channel::Publish(int peer, const void* data, size_t n) {
  const size_t bytes = n * ctx_.elem_size;
  t_.Post(peer, Message{data, bytes, tag_});
  if (peer < kTrackedPeers) posted_.set(static_cast<size_t>(peer));
  ctx_.traffic->bytes_sent += bytes;
}

Status Channel::SendCopy(int peer, const void* src, size_t n) {
  const size_t inline_bytes = t_.inline_bytes();
  if (inline_bytes > 0 && n * ctx_.elem_size <= inline_bytes) {  // Post copies it into the entry
    CHORUS_RETURN_IF_ERROR(AwaitCredit(peer));
    Publish(peer, src, n);
    return Status::Ok();
  }
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(Reserve(peer, &slot));
  if (t_.copies_at_post()) {
    Publish(peer, src, n);  // the transport copies into the slot only what it cannot send now
    return Status::Ok();
  }
  CopyIn(peer, slot, src, n * ctx_.elem_size);
  Publish(peer, slot, n);
  return Status::Ok();
}

Status Channel::SendRef(int peer, const void* src, size_t n) {
  if (!t_.zero_copy()) return SendCopy(peer, src, n);
  CHORUS_RETURN_IF_ERROR(AwaitCredit(peer));
  Publish(peer, src, n);
  referenced_ = true;
  return Status::Ok();
}

Status Channel::Send(int peer, const void* src, size_t n) {
  constexpr size_t kCopyUpToBytes = 16 << 10;
  return n * ctx_.elem_size <= kCopyUpToBytes ? SendCopy(peer, src, n) : SendRef(peer, src, n);
}

Status Channel::SendToAll(const void* src, size_t n) {
  const int p = t_.size();
  const int r = t_.rank();
  if (t_.zero_copy() || !t_.shares_slots() || p <= 2) {
    for (int i = 1; i < p; ++i) CHORUS_RETURN_IF_ERROR(Send((r + i) % p, src, n));
    return Status::Ok();
  }
  // Every link carries the same messages, so a credit on each means every peer released the
  // message that last used the slot we are about to fill. That holds for the small messages
  // too: the slot of `next` each one takes may be one an earlier shared message left to every
  // peer, which a rank that ran ahead (a broadcast's root) must not overwrite while a slower
  // peer still reads it.
  for (int i = 2; i < p; ++i) CHORUS_RETURN_IF_ERROR(AwaitCredit((r + i) % p));
  if (n * ctx_.elem_size <= (16 << 10)) {
    for (int i = 1; i < p; ++i) CHORUS_RETURN_IF_ERROR(Send((r + i) % p, src, n));
    return Status::Ok();
  }
  const int next = (r + 1) % p;
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(Reserve(next, &slot));
  CopyIn(next, slot, src, n * ctx_.elem_size);
  for (int i = 1; i < p; ++i) Publish((r + i) % p, slot, n);
  // A later call may reuse the slot once `next` alone released it: flush every peer first.
  referenced_ = true;
  return Status::Ok();
}

Status Channel::Flush(int peer) {
  return WaitFor(
      peer, [&] { return t_.Drained(peer); }, "the last release from");
}

Status Channel::FlushReferenced() {
  if (!referenced_) return Status::Ok();
  for (int q = 0; q < t_.size(); ++q) {
    if (q == t_.rank() || (q < kTrackedPeers && !posted_.test(static_cast<size_t>(q)))) continue;
    CHORUS_RETURN_IF_ERROR(Flush(q));
  }
  return Status::Ok();
}

Primitives::Primitives(const CallContext& ctx, int recv_peer, int send_peer)
    : Channel(ctx), recv_peer_(recv_peer), send_peer_(send_peer) {}

Status Primitives::Send(const void* src, size_t n) { return SendRef(send_peer_, src, n); }

Status Primitives::Recv(void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(Await(recv_peer_, n, &m));
  CopyOut(dst, m.data, m.bytes);
  Done(recv_peer_, m);
  return Status::Ok();
}

Status Primitives::RecvReduceSend(const void* local, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(Await(recv_peer_, n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(Reserve(send_peer_, &slot));
  ctx().kernel->combine(slot, m.data, local, n);
  Done(recv_peer_, m);
  Publish(send_peer_, slot, n);
  return Status::Ok();
}

Status Primitives::RecvReduceCopy(const void* local, void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(Await(recv_peer_, n, &m));
  ctx().kernel->finish(dst, m.data, local, n, transport().size());
  Done(recv_peer_, m);
  return Status::Ok();
}

Status Primitives::RecvReduceCopySend(const void* local, void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(Await(recv_peer_, n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(Reserve(send_peer_, &slot));
  const bool from_dst = transport().zero_copy() || transport().copies_at_post();
  const size_t bytes = n * ctx().elem_size;
  if (from_dst) {
    ctx().kernel->finish(dst, m.data, local, n, transport().size());
  } else if (StreamsIn(send_peer_, bytes)) {  // ordinary stores into the slot are slow now
    ctx().kernel->finish(dst, m.data, local, n, transport().size());
    CopyIn(send_peer_, slot, dst, bytes);
  } else {  // the sum goes to the (cached) slot first, and from there to dst
    ctx().kernel->finish(slot, m.data, local, n, transport().size());
    CopyOut(dst, slot, bytes);
  }
  Done(recv_peer_, m);
  Publish(send_peer_, from_dst ? dst : slot, n);
  return Status::Ok();
}

Status Primitives::RecvCopySend(void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(Await(recv_peer_, n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(Reserve(send_peer_, &slot));
  const bool from_dst = transport().zero_copy() || transport().copies_at_post();
  // Staged: forward from the message (still cached), not from dst (streamed past the cache).
  if (!from_dst) CopyIn(send_peer_, slot, m.data, m.bytes);
  CopyOut(dst, m.data, m.bytes);
  Done(recv_peer_, m);
  Publish(send_peer_, from_dst ? dst : slot, n);
  return Status::Ok();
}

}  // namespace chorus::internal
