// Communicator: the API edge. Validates once, then hands the call to an algorithm.
#include "chorus/communicator.h"

#include <sched.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algo/primitives.h"
#include "algo/select.h"
#include "core/comm_state.h"
#include "core/validate.h"
#include "model/tuning.h"
#include "reduce/reduce.h"
#include "transport/thread/thread_transport.h"

namespace chorus {
namespace internal {
namespace {

// The cores the job's ranks share, assuming every host has as many as this one: the cost
// model makes data movement dearer when ranks take turns on the cores.
int JobCores(const Transport& t) {
  cpu_set_t set;
  const int here = sched_getaffinity(0, sizeof set, &set) == 0
                       ? CPU_COUNT(&set)
                       : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, here) * t.size() / std::max(1, t.ranks_on_host());
}

}  // namespace

CommState::CommState(std::unique_ptr<Transport> transport, TransportKind kind,
                     const CommOptions& options, const model::MachineParams& params)
    : transport_(std::move(transport)),
      kind_(kind),
      options_(options),
      waiter_(transport_->rings_doorbell() ? WaitPolicy::For(transport_->ranks_on_host())
                                           : WaitPolicy::PollOnly()),
      selector_({.kind = CollectiveKind::kAllReduce,
                 .transport = kind,
                 .ranks = transport_->size(),
                 .bytes = 0,
                 .multi_host = transport_->hosts() != nullptr,
                 .cores = JobCores(*transport_)},
                params) {
  const auto p = static_cast<size_t>(transport_->size());
  const auto lines = [](size_t bytes) { return (bytes + sizeof(Line) - 1) / sizeof(Line); };
  const size_t operand_lines = lines(p * sizeof(const void*));
  const size_t message_lines = lines(p * sizeof(Message));
  workspace_ =
      std::make_unique<Line[]>(operand_lines + message_lines + lines(transport_->slot_bytes()));
  // make_unique value-initialised (so touched) every line now, not mid-call.
  operands_ = reinterpret_cast<const void**>(workspace_[0].bytes);
  std::uninitialized_value_construct_n(operands_, p);
  messages_ = reinterpret_cast<Message*>(workspace_[operand_lines].bytes);
  std::uninitialized_value_construct_n(messages_, p);
  scratch_ = workspace_[operand_lines + message_lines].bytes;
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
  // failed() first: failure() reads the clock (it waits out a half-written record).
  if (transport_->failed()) {
    const Status cause = transport_->failure();
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
  auto algorithm = selector_.Pick(kind, total * elem, requested);
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
  waiter_.StartCall(timeout);  // the deadline is fixed by the first wait that reads the clock
  ctx.waiter = &waiter_;
  ctx.traffic = &traffic;
  ctx.scratch = scratch_;
  ctx.operands = operands_;
  ctx.messages = messages_;

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
  auto tuning = model::ActiveTuning();
  if (!tuning.ok()) {
    return Status(tuning.status().code(), "CreateLocalGroup: " + tuning.status().message());
  }
  auto group =
      std::make_shared<internal::ThreadGroup>(n, options.segment_bytes, options.pipeline_depth);
  std::vector<Communicator> comms;
  comms.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto transport = std::make_unique<internal::ThreadTransport>(group, r);
    comms.emplace_back(std::make_unique<internal::CommState>(
        std::move(transport), TransportKind::kThread, options, tuning->For(TransportKind::kThread)));
  }
  return comms;
}

}  // namespace chorus
