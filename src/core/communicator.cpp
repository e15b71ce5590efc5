// Communicator: the API edge. Validates once, then hands the call to an algorithm.
#include "chorus/communicator.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "algo/direct.h"
#include "algo/primitives.h"
#include "algo/select.h"
#include "base/wait.h"
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
  return UsableCpus() * t.size() / std::max(1, t.ranks_on_host());
}

WaitPolicy PolicyFor(const Transport& t, TransportKind kind, WaitMode mode, int own_cpu) {
  if (!t.rings_doorbell()) return WaitPolicy::PollOnly();  // nothing would wake a sleeper
  switch (mode) {
    case WaitMode::kAuto:
      break;
    case WaitMode::kSleep:
      return WaitPolicy::SleepOnly(false);
    case WaitMode::kSleepChecked:
      return WaitPolicy::SleepOnly(true);
  }
  WaitPolicy policy = WaitPolicy::For(t.ranks_on_host());
  // Thread and shm ranks move all their data on their own thread; TCP and hybrid ranks have a
  // progress thread that needs a CPU too (base/wait.h).
  policy.spin_out_on_own_cpu = kind == TransportKind::kThread || kind == TransportKind::kShm;
  policy.own_cpu = own_cpu;
  return policy;
}

SlotWriter MakeSlotWriter(SlotStores stores) {
  switch (stores) {
    case SlotStores::kCached:
      return SlotWriter(StoreChoice::kCached);
    case SlotStores::kStream:
      return SlotWriter(StoreChoice::kStream);
    case SlotStores::kAuto:
      break;
  }
  return SlotWriter();
}

}  // namespace

CommState::CommState(std::unique_ptr<Transport> transport, TransportKind kind,
                     const CommOptions& options, const model::MachineParams& params, int cores,
                     int own_cpu)
    : transport_(std::move(transport)),
      kind_(kind),
      options_(options),
      waiter_(PolicyFor(*transport_, kind, options.wait, own_cpu), &transport_->beacon()),
      p2p_(*transport_, waiter_),
      slot_writer_(MakeSlotWriter(options.slot_stores)),
      selector_({.kind = CollectiveKind::kAllReduce,
                 .transport = kind,
                 .ranks = transport_->size(),
                 .bytes = 0,
                 .multi_host = transport_->hosts() != nullptr,
                 .cores = cores > 0 ? cores : JobCores(*transport_)},
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

void CommState::Fail(const Status& status) {
  // An earlier failure stays the cause (the transport keeps its first failure too).
  if (sticky_.ok() && !transport_->failed()) sticky_ = status;
  transport_->Fail(status);
}

void CommState::Abort() {
  transport_->Fail(Aborted("Abort() was called on rank " + std::to_string(rank())));
}

namespace {

// The same entries (both empty for the collectives without counts).
bool SameArray(std::span<const size_t> a, std::span<const size_t> b) {
  return a.size() == b.size() && (a.empty() || std::equal(a.begin(), a.end(), b.begin()));
}

}  // namespace

bool CommState::Plan::Matches(const CallArgs& a, const CallOptions& o) const {
  return valid && a.kind == args.kind && a.send.data == args.send.data &&
         a.send.count == args.send.count && a.send.dtype == args.send.dtype &&
         a.recv.data == args.recv.data && a.recv.count == args.recv.count &&
         a.recv.dtype == args.recv.dtype && a.op == args.op && a.root == args.root &&
         o.algorithm.empty() && o.timeout == timeout && o.segment_bytes == segment_bytes &&
         SameArray(a.send_counts, args.send_counts) && SameArray(a.recv_counts, args.recv_counts) &&
         SameArray(a.send_displs, args.send_displs) && SameArray(a.recv_displs, args.recv_displs);
}

void CommState::Plan::KeepArrays() {
  std::span<const size_t>* keys[] = {&args.send_counts, &args.recv_counts, &args.send_displs,
                                     &args.recv_displs};
  std::span<const size_t>* uses[] = {&ctx.send_counts, &ctx.recv_counts, &ctx.send_displs,
                                     &ctx.recv_displs};
  for (size_t i = 0; i < arrays.size(); ++i) {
    arrays[i].assign(keys[i]->begin(), keys[i]->end());
    *keys[i] = arrays[i];
    *uses[i] = arrays[i];  // Prepare gave the context the key's spans
  }
}

Status CommState::Admit(std::string_view op) {
  if (!sticky_.ok()) return sticky_;
  // The recorded failure only: a peer that already left is no reason to refuse a call that
  // may not need it (a zero count); waits notice dead peers they depend on.
  // failed() first: failure() reads the clock (it waits out a half-written record).
  if (transport_->failed()) {
    const Status cause = transport_->failure();
    sticky_ = Status(cause.code(), std::string(op) + ": rank " + std::to_string(rank()) +
                                       " cannot start: " + cause.message());
    return sticky_;
  }
  return Status::Ok();
}

Status CommState::RejectCall(CollectiveKind kind, const std::string& reason) {
  const uint64_t call = calls_++;
  CHORUS_RETURN_IF_ERROR(Admit(CollectiveKindName(kind)));
  Status invalid = InvalidArgument(std::string(CollectiveKindName(kind)) + ": " + reason);
  transport_->Reject(call, invalid.message());
  return invalid;
}

Status CommState::Run(const CallArgs& args, const CallOptions& options) {
  const uint64_t call = calls_++;
  const CollectiveKind kind = args.kind;
  CHORUS_RETURN_IF_ERROR(Admit(CollectiveKindName(kind)));
  Status status;
  Plan* known = nullptr;
  for (Plan& plan : plans_) {
    if (plan.Matches(args, options)) {
      known = &plan;
      break;
    }
  }
  if (known != nullptr) {
    // The arguments and options of a recent call: valid, and selected, as they were.
    status = Launch(*known, call);
  } else {
    const CallShape shape{rank(), size(), transport_->slot_bytes()};
    if (Status invalid = ValidateCall(shape, args, options); !invalid.ok()) {
      // Nothing was sent; let peers that entered this call stop instead of waiting for us.
      transport_->Reject(call, invalid.message());
      return invalid;
    }
    const CallArgs used = Normalized(args, rank());
    if (Collective(kind).reduces && IsIntegerAvg(used.send.dtype, used.op, size())) {
      status = RunIntegerAvg(used, options, call);
    } else {
      Plan& plan = plans_[next_plan_++ % plans_.size()];
      plan.valid = false;
      CHORUS_RETURN_IF_ERROR(Prepare(used, options, call, &plan));
      // A named algorithm is looked up by name: not remembered. A v-call is, with copies of
      // its arrays (the caller may change its own behind the same span).
      plan.valid = options.algorithm.empty();
      plan.args = args;
      plan.timeout = options.timeout;
      plan.segment_bytes = options.segment_bytes;
      plan.KeepArrays();
      status = Launch(plan, call);
    }
  }
  if (!status.ok()) return status;
  ++traffic_.by_kind[static_cast<int>(kind)].calls;
  ++traffic_.total.calls;
  return Status::Ok();
}

Status CommState::Execute(const CallArgs& args, const CallOptions& options, uint64_t call) {
  Plan plan;
  CHORUS_RETURN_IF_ERROR(Prepare(args, options, call, &plan));
  return Launch(plan, call);
}

Status CommState::Prepare(const CallArgs& args, const CallOptions& options, uint64_t call,
                          Plan* plan) {
  const CollectiveKind kind = args.kind;
  const CollectiveInfo& collective = Collective(kind);
  const ConstBuffer send = args.send;
  const MutableBuffer recv = args.recv;
  // What every rank agrees on: a varied call's shared counts (their sum, and their digest in
  // the tag), else nothing but the kind (each pair checks its own exchange).
  const size_t total = collective.varied ? VariedCountsOf(collective, args, rank()).total
                                         : CountsOf(collective, send.count, recv.count, size()).total;
  const bool shared = CountsShared(collective);
  const size_t elem = DataTypeSize(send.dtype);
  // The communicator's algorithm (CHORUS_ALGO=ring) applies to the collectives that have one
  // of that name; a call's own must exist.
  const std::string& requested =
      !options.algorithm.empty()                                            ? options.algorithm
      : !options_.algorithm.empty() && Implements(kind, options_.algorithm) ? options_.algorithm
                                                                            : options.algorithm;
  auto algorithm = selector_.Pick(kind, total * elem, requested);
  if (!algorithm.ok()) {
    transport_->Reject(call, algorithm.status().message());
    return algorithm.status();
  }
  const size_t segment_bytes = options.segment_bytes.value_or(transport_->default_segment_bytes());
  plan->algorithm = *algorithm;
  plan->send = send.data;
  plan->recv = recv.data;
  plan->total = total;
  plan->call_timeout = options.timeout.value_or(options_.timeout);
  // A call without elements still meets the peers; a barrier is nothing else, by its own
  // algorithm, and a varied call's algorithm sends every pair a message, empty or not.
  plan->empty =
      total == 0 && size() > 1 && collective.counts != Counts::kNone && !collective.varied;

  CallContext& ctx = plan->ctx;
  ctx.transport = transport_.get();
  ctx.kernel = collective.reduces ? &reduce::GetKernel(send.dtype, args.op) : nullptr;
  ctx.tag = CallTag{call,
                    total,
                    kind,
                    send.dtype,
                    collective.reduces ? args.op : ReduceOp::kSum,
                    static_cast<uint8_t>(*algorithm - Algorithms().data()),
                    collective.rooted || args.root == kInternalRoot
                        ? static_cast<uint32_t>(args.root)
                        : 0u,
                    shared ? CountsDigest(args.send_counts.empty() ? args.recv_counts
                                                                   : args.send_counts)
                           : 0u};
  ctx.send_counts = args.send_counts;
  ctx.recv_counts = args.recv_counts;
  ctx.send_displs = args.send_displs;
  ctx.recv_displs = args.recv_displs;
  ctx.send_elems = send.count;
  ctx.recv_elems = recv.count;
  ctx.elem_size = elem;
  ctx.segment_elems = segment_bytes / elem;
  ctx.waiter = &waiter_;
  ctx.slot_writer = &slot_writer_;
  ctx.traffic = &traffic_.by_kind[static_cast<int>(kind)];
  ctx.scratch = scratch_;
  ctx.operands = operands_;
  ctx.messages = messages_;
  ctx.p2p = &p2p_;
  return Status::Ok();
}

Status CommState::CheckPeer(const char* op, const char* name, int peer) const {
  if (IsRank(peer)) return Status::Ok();
  return InvalidArgument(std::string(op) + ": " + name + " (" + std::to_string(peer) +
                         ") is not a rank in [0, " + std::to_string(size()) + ")");
}

Status CommState::StartMessage(const char* op, const MessageOptions& options) {
  CHORUS_RETURN_IF_ERROR(Admit(op));
  if (options.timeout && options.timeout->count() <= 0) {
    return InvalidArgument(std::string(op) + ": options.timeout (" +
                           std::to_string(options.timeout->count()) + " ms) must be positive");
  }
  return Status::Ok();
}

Status CommState::EndMessage(Status status, const Traffic& before) {
  traffic_.total.bytes_sent += traffic_.messages.bytes_sent - before.bytes_sent;
  traffic_.total.bytes_received += traffic_.messages.bytes_received - before.bytes_received;
  if (!status.ok()) {
    transport_->beacon().waiting_for.store(0, std::memory_order_relaxed);  // after a timeout
    if (status.code() != StatusCode::kInvalidArgument) sticky_ = status;
    return status;
  }
  ++traffic_.messages.calls;
  ++traffic_.total.calls;
  return status;
}

Status CommState::Send(ConstBuffer data, int peer, const MessageOptions& options) {
  return Exchange("send", &data, peer, nullptr, -1, options);
}

Status CommState::Recv(MutableBuffer data, int peer, const MessageOptions& options) {
  return Exchange("recv", nullptr, -1, &data, peer, options);
}

Status CommState::SendRecv(ConstBuffer send, int to, MutableBuffer recv, int from,
                           const MessageOptions& options) {
  return Exchange("sendrecv", &send, to, &recv, from, options);
}

Status CommState::Exchange(const char* op, const ConstBuffer* send, int to,
                           const MutableBuffer* recv, int from, const MessageOptions& options) {
  const bool both = send != nullptr && recv != nullptr;
  CHORUS_RETURN_IF_ERROR(StartMessage(op, options));
  if (send != nullptr) {
    CHORUS_RETURN_IF_ERROR(CheckPeer(op, both ? "to" : "peer", to));
    CHORUS_RETURN_IF_ERROR(
        ValidateBuffer(op, both ? "send" : "data", send->data, send->count, send->dtype));
  }
  if (recv != nullptr) {
    CHORUS_RETURN_IF_ERROR(CheckPeer(op, both ? "from" : "peer", from));
    CHORUS_RETURN_IF_ERROR(
        ValidateBuffer(op, both ? "recv" : "data", recv->data, recv->count, recv->dtype));
  }
  if (both && Overlap(send->data, send->bytes(), recv->data, recv->bytes())) {
    return InvalidArgument(std::string(op) +
                           ": send and recv overlap (a message moves out of send while another "
                           "moves into recv)");
  }
  waiter_.StartCall(options.timeout.value_or(options_.timeout));
  const Traffic before = traffic_.messages;
  Traffic* traffic = &traffic_.messages;
  const uint32_t tag = options.tag;
  Status status =
      both ? p2p_.SendRecv(send->data, send->count, send->dtype, to, recv->data, recv->count,
                           recv->dtype, from, tag, traffic)
      : send != nullptr
          ? p2p_.Send(send->data, send->count, send->dtype, to, tag, traffic)
          : p2p_.Recv(recv->data, recv->count, recv->dtype, from, tag, traffic);
  return EndMessage(std::move(status), before);
}

bool CommState::Probe(int peer) {
  if (!IsRank(peer) || !sticky_.ok()) return true;  // its Recv fails at once
  return p2p_.Settled(peer);
}

bool CommState::AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout) {
  if (!sticky_.ok() || !std::all_of(peers.begin(), peers.end(), [&](int p) { return IsRank(p); })) {
    return true;
  }
  const std::chrono::milliseconds longest = std::chrono::hours(24 * 365);
  const bool arrived =
      p2p_.AwaitMessage(peers, std::clamp(timeout, std::chrono::milliseconds(0), longest));
  transport_->beacon().waiting_for.store(0, std::memory_order_relaxed);  // after a timeout
  return arrived;
}

void CommState::WakeAwaitMessage() { p2p_.WakeAwaitMessage(); }

Status CommState::Launch(Plan& plan, uint64_t call) {
  CallContext& ctx = plan.ctx;
  ctx.tag.call_index = call;
  PublishCall(transport_->beacon(), ctx.tag);  // for peers' waits that last (Channel::WaitFor)
  transport_->Enter(call);
  Traffic& traffic = *ctx.traffic;
  const Traffic before = traffic;
  // The deadline is fixed by the first wait that reads the clock.
  waiter_.StartCall(plan.call_timeout);
  const Status status =
      plan.empty ? EmptyCall(ctx) : plan.algorithm->run(ctx, plan.send, plan.recv, plan.total);
  transport_->Leave();
  traffic_.total.bytes_sent += traffic.bytes_sent - before.bytes_sent;
  traffic_.total.bytes_received += traffic.bytes_received - before.bytes_received;
  if (!status.ok()) {
    transport_->beacon().waiting_for.store(0, std::memory_order_relaxed);  // after a timeout
    Quiesce(call);
    // kInvalidArgument: a rank rejected the call and every rank abandoned it; nothing else
    // leaves the communicator usable.
    if (status.code() != StatusCode::kInvalidArgument) sticky_ = status;
  }
  return status;
}

// ------------------------------------------------------------------ integer averages
//
// The mean of p integers, exactly, whatever their size: each element x becomes two uint64
// lanes, q = u / p and r = u % p, where u = x - min(T) is x moved into the unsigned range. Their
// sums cannot overflow (the sum of the q is at most the largest u, the sum of the r below p*p),
// and floor(sum of u / p) = sum of q + (sum of r) / p. The lanes go through a uint64 sum of the
// same collective, in chunks that fit a buffer allocated on first use; the mean then moves back
// by min(T) and rounds toward zero, as C++ integer division does.

bool CommState::IsIntegerAvg(DataType dtype, ReduceOp op, int size) {
  if (op != ReduceOp::kAvg || size < 2) return false;
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kInt64:
    case DataType::kUint64:
      return true;
    default:
      return false;
  }
}

namespace {

constexpr size_t kAvgBufferBytes = size_t{4} << 20;

template <typename T>
void Widen(const void* in, size_t n, uint64_t p, uint64_t* lanes) {
  const auto* x = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t u =
        static_cast<uint64_t>(
            static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(x[i])) -
        static_cast<uint64_t>(std::numeric_limits<T>::min());
    lanes[2 * i] = u / p;
    lanes[2 * i + 1] = u % p;
  }
}

template <typename T>
void Narrow(const uint64_t* lanes, size_t n, uint64_t p, void* out) {
  auto* x = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t mean_u = lanes[2 * i] + lanes[2 * i + 1] / p;  // floor of the mean, shifted
    const bool inexact = lanes[2 * i + 1] % p != 0;
    auto mean = static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(
        mean_u + static_cast<uint64_t>(std::numeric_limits<T>::min()));
    if constexpr (std::is_signed_v<T>) {
      if (mean < 0 && inexact) ++mean;  // toward zero, not toward minus infinity
    }
    x[i] = static_cast<T>(mean);
  }
}

using WidenFn = void (*)(const void*, size_t, uint64_t, uint64_t*);
using NarrowFn = void (*)(const uint64_t*, size_t, uint64_t, void*);

std::pair<WidenFn, NarrowFn> CodecOf(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return {&Widen<int8_t>, &Narrow<int8_t>};
    case DataType::kUint8:
      return {&Widen<uint8_t>, &Narrow<uint8_t>};
    case DataType::kInt32:
      return {&Widen<int32_t>, &Narrow<int32_t>};
    case DataType::kUint32:
      return {&Widen<uint32_t>, &Narrow<uint32_t>};
    case DataType::kInt64:
      return {&Widen<int64_t>, &Narrow<int64_t>};
    default:
      return {&Widen<uint64_t>, &Narrow<uint64_t>};
  }
}

}  // namespace

Status CommState::RunIntegerAvg(const CallArgs& args, const CallOptions& options, uint64_t call) {
  const CollectiveKind kind = args.kind;
  const ConstBuffer send = args.send;
  const MutableBuffer recv = args.recv;
  // Reduce leaves a non-root rank's recv alone.
  const bool writes = !Collective(kind).recv_only_at_root || rank() == args.root;
  const auto [widen, narrow] = CodecOf(send.dtype);
  const auto p = static_cast<size_t>(size());
  const size_t elem = DataTypeSize(send.dtype);
  const bool scatter = Collective(kind).counts == Counts::kSendIsP;
  const bool varied = Collective(kind).varied;
  // Block q of a reduce-scatter's send: n elements each, or the v-variant's counts.
  const auto block = [&](size_t q) { return varied ? args.send_counts[q] : recv.count; };
  const auto offset = [&](size_t q) {
    return varied ? BlockOffset(args.send_counts, static_cast<int>(q)) : q * recv.count;
  };
  // Chunks run to the end of the longest block, which every rank knows.
  size_t longest = recv.count;
  if (varied) longest = *std::max_element(args.send_counts.begin(), args.send_counts.end());
  // Elements per chunk: all-reduce holds one chunk of lanes; reduce-scatter p of them and one.
  const size_t chunk = std::max<size_t>(1, kAvgBufferBytes / 16 / (scatter ? p + 1 : 1));
  // One size for every kind of call (the first need not be the largest): the buffer's lanes,
  // and at least one chunk of one element per rank and one; and the lane counts of a v-call.
  if (!avg_lanes_) {
    // Not zeroed: a call touches only the lanes its chunks use, so a few small averages cost a
    // page or two, not the whole buffer.
    avg_lanes_ =
        std::make_unique_for_overwrite<uint64_t[]>(std::max(kAvgBufferBytes / 8, 2 * (p + 1)));
    avg_counts_ = std::make_unique<size_t[]>(p);
  }
  uint64_t* lanes_in = avg_lanes_.get();
  uint64_t* lanes_out = scatter ? lanes_in + 2 * chunk * p : lanes_in;
  CallOptions wide = options;
  if (wide.segment_bytes) {
    wide.segment_bytes =
        std::min(transport_->slot_bytes(), std::max<size_t>(*wide.segment_bytes, 16));
  }
  const auto at = [elem](const void* base, size_t i) {
    return static_cast<const std::byte*>(base) + i * elem;
  };
  const std::span<const size_t> lane_counts(avg_counts_.get(), varied ? p : 0);
  bool first = true;
  for (size_t begin = 0; begin < longest || first; begin += chunk) {
    const auto piece = [&](size_t n) { return begin < n ? std::min(chunk, n - begin) : 0; };
    const size_t len = piece(recv.count);  // this rank's share of the chunk
    size_t lanes = 0;
    if (scatter) {
      for (size_t q = 0; q < p; ++q) {
        const size_t n = piece(block(q));
        widen(at(send.data, offset(q) + begin), n, p, lanes_in + lanes);
        avg_counts_[q] = 2 * n;
        lanes += 2 * n;
      }
    } else {
      widen(at(send.data, begin), len, p, lanes_in);
      lanes = 2 * len;
    }
    const ConstBuffer in{lanes_in, lanes, DataType::kUint64};
    const MutableBuffer out{lanes_out, 2 * len, DataType::kUint64};
    CallArgs wide_args{kind, in, out, ReduceOp::kSum, args.root, lane_counts, {}};
    CHORUS_RETURN_IF_ERROR(Execute(wide_args, wide, first ? call : calls_++));
    if (writes && len > 0) narrow(lanes_out, len, p, const_cast<std::byte*>(at(recv.data, begin)));
    first = false;
  }
  return Status::Ok();
}

}  // namespace internal

Status internal::RunCollective(Communicator& comm, const CallArgs& call,
                               const CallOptions& options) {
  return comm.state_->Run(call, options);
}

Communicator::Communicator(std::unique_ptr<internal::CommState> state) : state_(std::move(state)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

int Communicator::rank() const { return state_->rank(); }
int Communicator::size() const { return state_->size(); }
TransportKind Communicator::transport() const { return state_->transport(); }

Status Communicator::AllReduce(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                               const CallOptions& options) {
  return state_->Run({CollectiveKind::kAllReduce, send, recv, op, 0, {}, {}}, options);
}

Status Communicator::ReduceScatter(ConstBuffer send, MutableBuffer recv, ReduceOp op,
                                   const CallOptions& options) {
  return state_->Run({CollectiveKind::kReduceScatter, send, recv, op, 0, {}, {}}, options);
}

Status Communicator::AllGather(ConstBuffer send, MutableBuffer recv, const CallOptions& options) {
  return state_->Run({CollectiveKind::kAllGather, send, recv, ReduceOp::kSum, 0, {}, {}}, options);
}

Status Communicator::Broadcast(ConstBuffer send, MutableBuffer recv, int root,
                               const CallOptions& options) {
  return state_->Run({CollectiveKind::kBroadcast, send, recv, ReduceOp::kSum, root, {}, {}}, options);
}

Status Communicator::Reduce(ConstBuffer send, MutableBuffer recv, ReduceOp op, int root,
                            const CallOptions& options) {
  return state_->Run({CollectiveKind::kReduce, send, recv, op, root, {}, {}}, options);
}

Status Communicator::RejectCall(CollectiveKind kind, const std::string& reason) {
  if (!internal::IsCollective(static_cast<unsigned>(kind))) {
    return InvalidArgument("RejectCall: kind (" + std::to_string(static_cast<int>(kind)) +
                           ") is not a chorus::CollectiveKind");
  }
  return state_->RejectCall(kind, reason);
}

Status Communicator::Barrier(const CallOptions& options) {
  return state_->Run({CollectiveKind::kBarrier, {}, {}, ReduceOp::kSum, 0, {}, {}}, options);
}

Status Communicator::Gather(ConstBuffer send, MutableBuffer recv, int root,
                            const CallOptions& options) {
  return state_->Run({CollectiveKind::kGather, send, recv, ReduceOp::kSum, root, {}, {}}, options);
}

Status Communicator::Scatter(ConstBuffer send, MutableBuffer recv, int root,
                             const CallOptions& options) {
  return state_->Run({CollectiveKind::kScatter, send, recv, ReduceOp::kSum, root, {}, {}}, options);
}

Status Communicator::AllToAll(ConstBuffer send, MutableBuffer recv, const CallOptions& options) {
  return state_->Run({CollectiveKind::kAllToAll, send, recv, ReduceOp::kSum, 0, {}, {}}, options);
}

Status Communicator::AllGatherV(ConstBuffer send, MutableBuffer recv,
                                std::span<const size_t> counts, const CallOptions& options) {
  return state_->Run({CollectiveKind::kAllGatherV, send, recv, ReduceOp::kSum, 0, {}, counts},
                     options);
}

Status Communicator::ReduceScatterV(ConstBuffer send, MutableBuffer recv,
                                    std::span<const size_t> counts, ReduceOp op,
                                    const CallOptions& options) {
  return state_->Run({CollectiveKind::kReduceScatterV, send, recv, op, 0, counts, {}}, options);
}

Status Communicator::AllToAllV(ConstBuffer send, std::span<const size_t> send_counts,
                               MutableBuffer recv, std::span<const size_t> recv_counts,
                               const CallOptions& options) {
  return state_->Run(
      {CollectiveKind::kAllToAllV, send, recv, ReduceOp::kSum, 0, send_counts, recv_counts},
      options);
}

Status Communicator::AllToAllV(ConstBuffer send, std::span<const size_t> send_counts,
                               std::span<const size_t> send_displs, MutableBuffer recv,
                               std::span<const size_t> recv_counts,
                               std::span<const size_t> recv_displs, const CallOptions& options) {
  return state_->Run({CollectiveKind::kAllToAllV, send, recv, ReduceOp::kSum, 0, send_counts,
                      recv_counts, send_displs, recv_displs},
                     options);
}

Status Communicator::GatherV(ConstBuffer send, MutableBuffer recv, std::span<const size_t> counts,
                             int root, const CallOptions& options) {
  return state_->Run({CollectiveKind::kGatherV, send, recv, ReduceOp::kSum, root, {}, counts},
                     options);
}

Status Communicator::ScatterV(ConstBuffer send, std::span<const size_t> counts, MutableBuffer recv,
                              int root, const CallOptions& options) {
  return state_->Run({CollectiveKind::kScatterV, send, recv, ReduceOp::kSum, root, counts, {}},
                     options);
}

void Communicator::Abort() { state_->Abort(); }
Status Communicator::Send(ConstBuffer data, int peer, const MessageOptions& options) {
  return state_->Send(data, peer, options);
}

Status Communicator::Recv(MutableBuffer data, int peer, const MessageOptions& options) {
  return state_->Recv(data, peer, options);
}

bool Communicator::Probe(int peer) { return state_->Probe(peer); }

bool Communicator::AwaitMessage(std::span<const int> peers, std::chrono::milliseconds timeout) {
  return state_->AwaitMessage(peers, timeout);
}

void Communicator::WakeAwaitMessage() { state_->WakeAwaitMessage(); }

Status Communicator::SendRecv(ConstBuffer send, int to, MutableBuffer recv, int from,
                              const MessageOptions& options) {
  return state_->SendRecv(send, to, recv, from, options);
}

Status Communicator::health() const { return state_->health(); }
TrafficCounters Communicator::traffic() const { return state_->traffic(); }
void Communicator::ResetTraffic() { state_->ResetTraffic(); }

Result<std::vector<Communicator>> CreateLocalGroup(int n, const CommOptions& options) {
  CHORUS_RETURN_IF_ERROR(internal::ValidateCommOptions(options, n, "CreateLocalGroup"));
  if (options.transport != TransportKind::kAuto && options.transport != TransportKind::kThread) {
    return InvalidArgument("CreateLocalGroup: options.transport must be kAuto or kThread");
  }
  auto tuning = model::TuningFromFile(options.tuning_file);
  if (!tuning.ok()) {
    return Status(tuning.status().code(), "CreateLocalGroup: " + tuning.status().message());
  }
  auto group =
      std::make_shared<internal::ThreadGroup>(n, options.segment_bytes, options.pipeline_depth);
  // The group's Split meets through a store of its own, in this process.
  const std::shared_ptr<Store> store = MakeHashStore();
  std::vector<Communicator> comms;
  comms.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto transport = std::make_unique<internal::ThreadTransport>(group, r);
    auto state = std::make_unique<internal::CommState>(std::move(transport), TransportKind::kThread,
                                                       options, tuning->For(TransportKind::kThread));
    state->KeepStore(store, options.secret, nullptr);
    comms.emplace_back(std::move(state));
  }
  return comms;
}

}  // namespace chorus
