// Communicator: the API edge. Validates once, then hands the call to an algorithm.
#include "chorus/communicator.h"

#include <cstring>
#include <string>

#include "algo/primitives.h"
#include "algo/select.h"
#include "core/comm_state.h"
#include "core/validate.h"
#include "reduce/reduce.h"
#include "transport/thread/thread_transport.h"

namespace chorus {
namespace internal {

CommState::CommState(std::unique_ptr<Transport> transport, TransportKind kind,
                     const CommOptions& options)
    : transport_(std::move(transport)),
      kind_(kind),
      options_(options),
      policy_(transport_->rings_doorbell() ? WaitPolicy::For(transport_->ranks_on_host())
                                           : WaitPolicy::PollOnly()),
      scratch_(std::make_unique<std::byte[]>(transport_->slot_bytes())),
      operands_(static_cast<size_t>(transport_->size())),
      messages_(static_cast<size_t>(transport_->size())) {
  std::memset(scratch_.get(), 0, transport_->slot_bytes());  // touch it now, not mid-call
}

Status CommState::health() const {
  if (!sticky_.ok()) return sticky_;
  if (transport_->failed()) return transport_->failure();
  return Status::Ok();
}

// After a failed call, peers may still be reading this rank's buffers through zero-copy
// messages (a segment they peeked before noticing the failure). Returning now would hand the
// buffers back to the caller while they are read, so wait until every peer has either released
// this rank's messages or left the call; they leave at their next wait, one segment's work.
void CommState::Quiesce(uint64_t call) {
  if (!transport_->zero_copy()) return;  // messages live in staging memory, not the caller's
  const Deadline give_up = DeadlineAfter(std::chrono::seconds(10));
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    while (!transport_->Drained(peer) && transport_->PeerActive(peer, call) &&
           transport_->PeerAlive(peer) && Clock::now() < give_up) {
      YieldCpu();
    }
  }
}

void CommState::Abort() {
  transport_->Fail(Aborted("Abort() was called on rank " + std::to_string(rank())));
}

Status CommState::Run(CollectiveKind kind, ConstBuffer send, MutableBuffer recv, ReduceOp op,
                      const CallOptions& options) {
  const uint64_t call = calls_++;
  if (!sticky_.ok()) return sticky_;
  // The recorded failure only: a peer that already left is no reason to refuse a call that
  // may not need it (a zero count); waits notice dead peers they depend on.
  if (const Status cause = transport_->failure(); !cause.ok()) {
    sticky_ =
        Status(cause.code(), std::string(CollectiveKindName(kind)) + ": rank " +
                                 std::to_string(rank()) + " cannot start: " + cause.message());
    return sticky_;
  }
  const CallShape shape{kind, rank(), size(), transport_->slot_bytes()};
  if (Status invalid = ValidateCall(shape, send, recv, op, options); !invalid.ok()) {
    // Nothing was sent; let peers that entered this call stop instead of waiting for us.
    transport_->Reject(call, invalid.message());
    return invalid;
  }

  const size_t total = kind == CollectiveKind::kAllGather ? recv.count : send.count;
  const size_t elem = DataTypeSize(send.dtype);
  const std::string& requested = options.algorithm.empty() ? options_.algorithm : options.algorithm;
  auto algorithm = SelectAlgorithm(
      {kind, kind_, size(), total * elem, transport_->hosts() != nullptr}, requested);
  if (!algorithm.ok()) {
    transport_->Reject(call, algorithm.status().message());
    return algorithm.status();
  }
  transport_->Enter(call);
  const std::chrono::milliseconds timeout = options.timeout.value_or(options_.timeout);
  const size_t segment_bytes = options.segment_bytes.value_or(transport_->slot_bytes());

  Traffic& traffic = traffic_.by_kind[static_cast<int>(kind)];
  const Traffic before = traffic;
  CallContext ctx;
  ctx.transport = transport_.get();
  ctx.kernel = kind == CollectiveKind::kAllGather ? nullptr : &reduce::GetKernel(send.dtype, op);
  ctx.tag = CallTag{call,
                    total,
                    kind,
                    send.dtype,
                    kind == CollectiveKind::kAllGather ? ReduceOp::kSum : op,
                    static_cast<uint8_t>(*algorithm - Algorithms().data())};
  ctx.elem_size = elem;
  ctx.segment_elems = segment_bytes / elem;
  ctx.deadline = DeadlineAfter(timeout);
  ctx.timeout = timeout;
  ctx.policy = policy_;
  ctx.traffic = &traffic;
  ctx.scratch = scratch_.get();
  ctx.operands = operands_.data();
  ctx.messages = messages_.data();

  const Status status = (*algorithm)->run(ctx, send.data, recv.data, total);
  transport_->Leave();
  if (!status.ok()) Quiesce(call);
  if (!status.ok()) {
    sticky_ = status;
    return status;
  }
  ++traffic.calls;
  traffic_.total.bytes_sent += traffic.bytes_sent - before.bytes_sent;
  traffic_.total.bytes_received += traffic.bytes_received - before.bytes_received;
  ++traffic_.total.calls;
  return Status::Ok();
}

}  // namespace internal

Communicator::Communicator(std::unique_ptr<internal::CommState> state) : state_(std::move(state)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const { return state_->rank(); }
int Communicator::size() const { return state_->size(); }
TransportKind Communicator::transport() const { return state_->transport(); }

Status Communicator::AllReduce(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                               const CallOptions& options) {
  return state_->Run(CollectiveKind::kAllReduce, send, recv, op, options);
}

Status Communicator::ReduceScatter(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                                   const CallOptions& options) {
  return state_->Run(CollectiveKind::kReduceScatter, send, recv, op, options);
}

Status Communicator::AllGather(ConstBuffer send, MutableBuffer recv, const CallOptions& options) {
  return state_->Run(CollectiveKind::kAllGather, send, recv, ReduceOp::kSum, options);
}

void Communicator::Abort() { state_->Abort(); }
Status Communicator::health() const { return state_->health(); }
TrafficCounters Communicator::traffic() const { return state_->traffic(); }
void Communicator::ResetTraffic() { state_->ResetTraffic(); }

Result<std::vector<Communicator>> CreateLocalGroup(int n, const CommOptions& options) {
  CHORUS_RETURN_IF_ERROR(internal::ValidateCommOptions(options, n, "CreateLocalGroup"));
  if (options.transport != TransportKind::kAuto && options.transport != TransportKind::kThread) {
    return InvalidArgument("CreateLocalGroup: options.transport must be kAuto or kThread");
  }
  auto group =
      std::make_shared<internal::ThreadGroup>(n, options.segment_bytes, options.pipeline_depth);
  std::vector<Communicator> comms;
  comms.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto transport = std::make_unique<internal::ThreadTransport>(group, r);
    comms.emplace_back(std::make_unique<internal::CommState>(std::move(transport),
                                                             TransportKind::kThread, options));
  }
  return comms;
}

}  // namespace chorus
