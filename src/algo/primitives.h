// The fused primitives every algorithm is written with, over a pair of links: data arrives from
// `recv_peer` and leaves for `send_peer`. Each call moves one segment (one message):
//
//   Send(src)                     src ──▶ send_peer
//   Recv(dst)                     recv_peer ──▶ dst
//   RecvReduceSend(local)         (recv_peer ⊕ local) ──▶ send_peer      partial sums
//   RecvReduceCopy(local, dst)    (recv_peer ⊕ local) ──▶ dst            last reduce step
//   RecvReduceCopySend(local,dst) (recv_peer ⊕ local) ──▶ dst, send_peer all-reduce's turn
//   RecvCopySend(dst)             recv_peer ──▶ dst, send_peer           gather forwarding
//
// On a zero-copy transport a forwarded segment is published straight from the rank's own
// buffer (src or dst); otherwise it is written into a staging slot. Partial sums always go to a
// staging slot, so the caller's buffers only ever hold inputs and final results.
// The "last" reduce steps (…Copy…) apply the kernel's finish (kAvg divides by the ranks).
//
// Every wait honours the call's deadline and the group's failure state; the first error is
// returned and the group is failed, so the caller just propagates it.
// Thread safety: one per rank per call, on that rank's thread.
#pragma once

#include <cstddef>

#include "chorus/communicator.h"
#include "core/wait.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

namespace chorus::internal {

// Everything one rank knows about the call it is running.
struct CallContext {
  Transport* transport = nullptr;
  const reduce::Kernel* kernel = nullptr;  // null for data movement only
  CallTag tag;
  size_t elem_size = 0;
  size_t segment_elems = 0;  // elements per message
  Deadline deadline;
  std::chrono::milliseconds timeout{0};  // for messages
  WaitPolicy policy;
  Traffic* traffic = nullptr;  // counters of this call's kind
};

class Primitives {
 public:
  Primitives(const CallContext& ctx, int recv_peer, int send_peer);

  // Where the schedule is, for error messages: "step 3 of 6, segment 2 of 4".
  void SetStep(int step, int steps) {
    step_ = step;
    steps_ = steps;
  }
  void SetSegment(size_t segment, size_t segments) {
    segment_ = segment;
    segments_ = segments;
  }

  Status Send(const void* src, size_t n);
  Status Recv(void* dst, size_t n);
  Status RecvReduceSend(const void* local, size_t n);
  Status RecvReduceCopy(const void* local, void* dst, size_t n);
  Status RecvReduceCopySend(const void* local, void* dst, size_t n);
  Status RecvCopySend(void* dst, size_t n);

  // Waits until send_peer has released every message, so the caller's buffers may be reused.
  Status Flush();

 private:
  Status AwaitIncoming(size_t n, Message* m);
  Status AwaitSlot(void** slot);
  void Publish(const void* data, size_t n);
  void Consume(const Message& m);
  // Turns a wait that did not succeed into the call's error and fails the group.
  Status WaitFailed(WaitResult result, const char* what, int peer);

  const CallContext& ctx_;
  Transport& t_;
  const int recv_peer_;
  const int send_peer_;
  int step_ = 0;
  int steps_ = 0;
  size_t segment_ = 0;
  size_t segments_ = 0;
};

}  // namespace chorus::internal
