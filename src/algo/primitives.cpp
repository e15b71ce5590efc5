// The fused primitives (see primitives.h).
#include "algo/primitives.h"

#include <cstring>
#include <string>

namespace chorus::internal {
std::string Describe(const CallTag& tag) {
  std::string s(CollectiveKindName(tag.kind));
  s += " #" + std::to_string(tag.call_index) + " (count " + std::to_string(tag.count) + ", ";
  s += DataTypeName(tag.dtype);
  if (tag.kind != CollectiveKind::kAllGather) {
    s += ", ";
    s += ReduceOpName(tag.op);
  }
  return s + ")";
}

Primitives::Primitives(const CallContext& ctx, int recv_peer, int send_peer)
    : ctx_(ctx), t_(*ctx.transport), recv_peer_(recv_peer), send_peer_(send_peer) {}

Status Primitives::WaitFailed(WaitResult result, const char* what, int peer) {
  const std::string op(CollectiveKindName(ctx_.tag.kind));
  const std::string me = "rank " + std::to_string(t_.rank());
  Status status;
  if (result == WaitResult::kTimedOut) {
    status = DeadlineExceeded(op + ": " + me + " timed out after " +
                              std::to_string(ctx_.timeout.count()) + " ms waiting for " + what +
                              " rank " + std::to_string(peer) + " (call #" +
                              std::to_string(ctx_.tag.call_index) + ", step " +
                              std::to_string(step_ + 1) + " of " + std::to_string(steps_) +
                              ", segment " + std::to_string(segment_ + 1) + " of " +
                              std::to_string(segments_) + ")");
    if (const std::string absent = t_.Absentees(ctx_.tag.call_index); !absent.empty()) {
      status = DeadlineExceeded(status.message() + "; " + absent);
    }
  } else if (t_.failed()) {
    const Status cause = t_.failure();
    return Status(cause.code(), op + ": " + me + " stopped: " + cause.message());
  } else {
    const Status cause = t_.Rejection(ctx_.tag.call_index);
    status = Aborted(op + ": " + me + " stopped: " + cause.message());
  }
  t_.Fail(status);
  return status;
}

Status Primitives::AwaitIncoming(size_t n, Message* m) {
  Transport& t = t_;
  const uint64_t call = ctx_.tag.call_index;
  const WaitResult r = WaitUntil([&] { return t.TryPeek(recv_peer_, m); },
                                 [&] { return t.failed() || t.Rejected(call); }, t.doorbell(),
                                 ctx_.policy, ctx_.deadline);
  if (r != WaitResult::kReady) return WaitFailed(r, "data from", recv_peer_);
  if (!(m->tag == ctx_.tag)) {
    Status status = InvalidArgument(
        std::string(CollectiveKindName(ctx_.tag.kind)) + ": ranks disagree on the call: rank " +
        std::to_string(recv_peer_) + " is in " + Describe(m->tag) + ", rank " +
        std::to_string(t_.rank()) + " is in " + Describe(ctx_.tag));
    t_.Fail(status);
    return status;
  }
  if (m->bytes != n * ctx_.elem_size) {
    Status status = Internal(std::string(CollectiveKindName(ctx_.tag.kind)) + ": rank " +
                             std::to_string(t_.rank()) + " expected " +
                             std::to_string(n * ctx_.elem_size) + " bytes from rank " +
                             std::to_string(recv_peer_) + ", got " + std::to_string(m->bytes));
    t_.Fail(status);
    return status;
  }
  return Status::Ok();
}

Status Primitives::AwaitSlot(void** slot) {
  Transport& t = t_;
  const uint64_t call = ctx_.tag.call_index;
  const WaitResult r = WaitUntil([&] { return (*slot = t.TryReserve(send_peer_)) != nullptr; },
                                 [&] { return t.failed() || t.Rejected(call); }, t.doorbell(),
                                 ctx_.policy, ctx_.deadline);
  if (r != WaitResult::kReady) return WaitFailed(r, "a free slot from", send_peer_);
  return Status::Ok();
}

void Primitives::Publish(const void* data, size_t n) {
  const size_t bytes = n * ctx_.elem_size;
  t_.Post(send_peer_, Message{data, bytes, ctx_.tag});
  ctx_.traffic->bytes_sent += bytes;
}

void Primitives::Consume(const Message& m) {
  t_.Release(recv_peer_);
  ctx_.traffic->bytes_received += m.bytes;
}

Status Primitives::Send(const void* src, size_t n) {
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(AwaitSlot(&slot));
  if (!t_.zero_copy()) {
    std::memcpy(slot, src, n * ctx_.elem_size);
    src = slot;
  }
  Publish(src, n);
  return Status::Ok();
}

Status Primitives::Recv(void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(AwaitIncoming(n, &m));
  std::memcpy(dst, m.data, m.bytes);
  Consume(m);
  return Status::Ok();
}

Status Primitives::RecvReduceSend(const void* local, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(AwaitIncoming(n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(AwaitSlot(&slot));
  ctx_.kernel->combine(slot, m.data, local, n);
  Consume(m);
  Publish(slot, n);
  return Status::Ok();
}

Status Primitives::RecvReduceCopy(const void* local, void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(AwaitIncoming(n, &m));
  ctx_.kernel->finish(dst, m.data, local, n, t_.size());
  Consume(m);
  return Status::Ok();
}

Status Primitives::RecvReduceCopySend(const void* local, void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(AwaitIncoming(n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(AwaitSlot(&slot));
  ctx_.kernel->finish(dst, m.data, local, n, t_.size());
  Consume(m);
  if (!t_.zero_copy()) std::memcpy(slot, dst, n * ctx_.elem_size);
  Publish(t_.zero_copy() ? dst : slot, n);
  return Status::Ok();
}

Status Primitives::RecvCopySend(void* dst, size_t n) {
  Message m;
  CHORUS_RETURN_IF_ERROR(AwaitIncoming(n, &m));
  void* slot = nullptr;
  CHORUS_RETURN_IF_ERROR(AwaitSlot(&slot));
  std::memcpy(dst, m.data, m.bytes);
  Consume(m);
  if (!t_.zero_copy()) std::memcpy(slot, dst, m.bytes);
  Publish(t_.zero_copy() ? dst : slot, n);
  return Status::Ok();
}

Status Primitives::Flush() {
  Transport& t = t_;
  const WaitResult r = WaitUntil([&] { return t.Drained(send_peer_); }, [&] { return t.failed(); },
                                 t.doorbell(), ctx_.policy, ctx_.deadline);
  if (r != WaitResult::kReady) return WaitFailed(r, "the last release from", send_peer_);
  return Status::Ok();
}

}  // namespace chorus::internal
