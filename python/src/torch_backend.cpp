// chorus._torch: chorus as a torch.distributed (c10d) backend, for Debian's torch 1.13.
//
// `import chorus.torch` registers the backend "chorus"; `init_process_group("chorus")` and
// `new_group(backend="chorus")` then call CreateProcessGroup with torch's (prefix) store, the
// group's rank and size and its timeout.
//
// Design:
// - One chorus Communicator per process group, met through torch's own store (StoreOverC10d):
//   torch has already set up a store every rank reaches (TCPStore from MASTER_ADDR, a file
//   store, torchrun's), and each group gets its own prefix of it. The transport is chosen as
//   anywhere else (CHORUS_TRANSPORT, else shm on one host, TCP across hosts); TCP ranks need the
//   job's secret from CHORUS_SECRET or CHORUS_SECRET_FILE, since torch's store is not
//   authenticated and cannot carry one safely.
// - Calls run one at a time in the order they were issued (a Communicator is driven by one
//   thread at a time). A call that moves more than 64 KiB runs on the group's worker thread and
//   returns at once with a Work whose future completes when the call does: DDP's gradient
//   all-reduces overlap its backward pass as with Gloo. A smaller one runs at once on the
//   caller's thread when nothing is queued (handing it over would cost more than the call).
//   Tensors are captured by value, so they live until their call has finished. A recv whose
//   message has not begun to arrive waits aside while the calls after it run (CallQueue), as
//   Gloo's irecv does.
// - Arguments chorus can check only here (dtype, layout, list lengths) are checked when the
//   operation is issued; a refusal raises at once on this rank and is passed to the peers as a
//   refused call (Communicator::RejectCall), which they get from their Work instead of waiting
//   out the timeout.
// - A failed call completes its Work with the error (chorus's Status text, which says whether
//   the group is still usable); wait() raises it as RuntimeError.
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace py = pybind11;

namespace chorus::torch_backend {
namespace {

using std::chrono::milliseconds;

// ---------------------------------------------------------------- the store

// chorus's Store over torch's c10d::Store (any of them: TCPStore, FileStore, HashStore, and the
// PrefixStore torch puts each group under). A key is read only once check() has seen it, so
// c10d's get never blocks.
class StoreOverC10d final : public Store {
 public:
  explicit StoreOverC10d(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return Status::Ok();
    } catch (const std::exception& e) {
      return Unavailable(Where() + "set of key " + key + " failed: " + e.what());
    }
  }

  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(Wait({key}, timeout));
    try {
      const std::vector<uint8_t> v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return Unavailable(Where() + "get of key " + key + " failed: " + e.what());
    }
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (const std::exception& e) {
      return Unavailable(Where() + "add to key " + key + " failed: " + e.what());
    }
  }

  // Polls check(), never c10d's wait: a TCPStore wait that times out leaves its answer on the
  // connection, to be read later as the answer to another request (and chorus's meeting waits
  // in short slices). c10d's waits also take 0 ms to mean "no timeout".
  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return Status::Ok();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(200);
    for (;;) {
      try {
        if (store_->check(keys)) return Status::Ok();
      } catch (const std::exception& e) {
        return Unavailable(Where() + "check of " + Names(keys) + " failed: " + e.what());
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    }
    return DeadlineExceeded(Where() + "waited " + std::to_string(timeout.count()) + " ms for " +
                            Names(keys));
  }

  Result<bool> Delete(const std::string& key) override {
    try {
      return store_->deleteKey(key);
    } catch (const std::exception& e) {
      return Unimplemented(Where() + "delete of key " + key + " failed: " + e.what());
    }
  }

  std::string address() const override { return "torch-store://"; }

 private:
  static std::string Where() { return "store torch-store://: "; }
  static std::string Names(const std::vector<std::string>& keys) {
    std::string s = keys.size() == 1 ? "key " : "keys ";
    for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
    return s;
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

// ---------------------------------------------------------------- tensors

// The chorus type of a tensor's elements for a reduction; nullopt where chorus has none.
std::optional<DataType> ReduceType(at::ScalarType t) {
  switch (t) {
    case at::kChar:
      return DataType::kInt8;
    case at::kByte:
      return DataType::kUint8;
    case at::kBool:
      return DataType::kUint8;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kComplexFloat:
      return DataType::kFloat32;  // as pairs, for sum and mean
    case at::kComplexDouble:
      return DataType::kFloat64;  // as pairs, for sum and mean
    default:
      return std::nullopt;
  }
}

bool IsComplex(at::ScalarType t) { return t == at::kComplexFloat || t == at::kComplexDouble; }

// A dense tensor as chorus elements: its own type where chorus has it, else bytes (the calls
// that only move data do not look at the values).
MutableBuffer Elements(const at::Tensor& t) {
  const auto type = ReduceType(t.scalar_type());
  if (type && !IsComplex(t.scalar_type())) {
    return {t.data_ptr(), static_cast<size_t>(t.numel()), *type};
  }
  return {t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), DataType::kUint8};
}

// Elements of `count` tensor elements of type `t` (for scratch buffers laid out like a tensor).
size_t UnitsPer(const at::Tensor& t) {
  const auto type = ReduceType(t.scalar_type());
  if (type && !IsComplex(t.scalar_type())) return 1;
  return t.element_size();
}

std::string OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "ReduceOp " + std::to_string(static_cast<int>(op));
  }
}

// How a reduction runs: chorus's op and element type, and a factor that scales the input first
// (PREMUL_SUM), or why it cannot.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  size_t per_element = 1;  // chorus elements per tensor element (2 for complex)
  std::optional<double> premul;
  std::string refusal;  // non-empty: refused, and why
};

Reduction PlanReduction(const c10d::ReduceOp& rop, at::ScalarType t) {
  Reduction r;
  const auto type = ReduceType(t);
  const std::string what = OpName(rop.op_) + " on " + std::string(c10::toString(t));
  if (!type) {
    r.refusal = "chorus cannot reduce " + std::string(c10::toString(t)) + " tensors";
    return r;
  }
  r.dtype = *type;
  r.per_element = IsComplex(t) ? 2 : 1;
  const bool floating = at::isFloatingType(t) || IsComplex(t);
  if (t == at::kBool) {
    // 0 and 1 in bytes: AND (and the product) is the minimum, OR (and the sum) the maximum,
    // as NCCL reduces bool.
    switch (rop.op_) {
      case c10d::ReduceOp::BAND:
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
        r.op = ReduceOp::kMin;
        return r;
      case c10d::ReduceOp::BOR:
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
        r.op = ReduceOp::kMax;
        return r;
      default:
        r.refusal = "chorus does not reduce bool tensors with " + OpName(rop.op_) +
                    " (SUM, PRODUCT, MIN, MAX, BAND and BOR it does)";
        return r;
    }
  }
  if (IsComplex(t) && rop.op_ != c10d::ReduceOp::SUM && rop.op_ != c10d::ReduceOp::AVG &&
      rop.op_ != c10d::ReduceOp::PREMUL_SUM) {
    r.refusal = "chorus reduces complex tensors with SUM, AVG and PREMUL_SUM only, not " + what;
    return r;
  }
  switch (rop.op_) {
    case c10d::ReduceOp::SUM:
      r.op = ReduceOp::kSum;
      return r;
    case c10d::ReduceOp::AVG:
      r.op = ReduceOp::kAvg;
      return r;
    case c10d::ReduceOp::PRODUCT:
      r.op = ReduceOp::kProd;
      return r;
    case c10d::ReduceOp::MIN:
      r.op = ReduceOp::kMin;
      return r;
    case c10d::ReduceOp::MAX:
      r.op = ReduceOp::kMax;
      return r;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      if (!floating || s == nullptr || !s->tensor_factors.empty()) {
        r.refusal =
            "chorus takes PREMUL_SUM with one number as the factor, on floating-point "
            "tensors only, not " +
            what;
        return r;
      }
      r.op = ReduceOp::kSum;
      r.premul = s->double_factor;
      return r;
    }
    default:
      r.refusal = "chorus has no bitwise reductions: " + what +
                  " is refused (SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM it has)";
      return r;
  }
}

// ---------------------------------------------------------------- work

struct CallQueue;

// A call's Work. Its state is its future's: wait() returns once the future is completed, and
// the future's callbacks (DDP's) run where Finish is called, which is never the worker thread
// (a callback may issue a collective and wait for it).
class ChorusWork final : public c10d::Work {
 public:
  // `queue`: the group's calls (Waited, RunHere); null for a Work that is done at once.
  ChorusWork(c10d::OpType type, std::vector<at::Tensor> outputs,
             std::shared_ptr<CallQueue> queue = nullptr)
      : c10d::Work(-1, type),
        queue_(std::move(queue)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))),
        done_(std::make_shared<Done>()) {
    // For a wait with a timeout: the first callback runs once the future is completed.
    future_->addCallback([done = done_](c10::ivalue::Future&) {
      {
        std::lock_guard<std::mutex> lock(done->mu);
        done->done = true;
      }
      done->cv.notify_all();
    });
  }

  bool isCompleted() override {
    if (future_->completed()) return true;
    Unhold();
    return future_->completed();
  }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}

  // Waits for the call (at most `timeout`; kNoTimeout: until it ends, which chorus's deadline
  // bounds) and raises its error. Without a timeout, a call still queued runs on this thread
  // once it is next (RunHere).
  bool wait(milliseconds timeout) override {
    if (queue_ != nullptr) Waited();
    if (timeout == kNoTimeout) {
      if (queue_ != nullptr && !future_->completed()) RunHere();
      future_->wait();
    } else {
      Unhold();
      std::unique_lock<std::mutex> lock(done_->mu);
      if (!done_->cv.wait_for(lock, timeout, [&] { return done_->done; })) {
        TORCH_CHECK(false, "chorus: Work.wait timed out after ", timeout.count(),
                    " ms; the call goes on and ends at its own deadline");
      }
    }
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }

  void abort() override { TORCH_CHECK(false, "chorus: Work.abort is not supported"); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    Unhold();
    return future_;
  }

  // Completes the future once the call has ended; its callbacks run here. Never throws.
  void Finish(const Status& status) noexcept {
    try {
      if (status.ok()) {
        future_->markCompleted(c10::IValue(outputs_));
      } else {
        future_->setError(
            std::make_exception_ptr(std::runtime_error("chorus: " + status.ToString())));
      }
    } catch (...) {
      // A callback that throws has its error kept by the future (c10 catches them); anything
      // else must not escape into the thread that completes calls.
    }
  }

 private:
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  // Runs this Work's call on the waiting thread once it is next in the queue and no call runs,
  // instead of waking the worker for it and then waking this thread back: a synchronous call
  // (`dist.all_reduce` without async_op waits at once) costs what an inline one does. Returns
  // once the call has run here, or as soon as the worker has taken it.
  void RunHere();
  // Tells the queue that this Work is being waited for (CallQueue::prompt).
  void Waited();
  // Hands a held recv to the worker (CallQueue::hold): this Work is looked at otherwise.
  void Unhold();

  std::shared_ptr<CallQueue> queue_;
  const std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Done> done_;
};

// A group's calls in issue order. One runs at a time (`busy`): on the worker thread, on the
// thread that issued it (a small call when nothing is queued), or on the thread that waits for
// it (ChorusWork::RunHere). Shared with the Works, which may outlive their group: a group
// destroyed has run every call it queued, and its Works then find their calls gone.
//
// A recv whose message has not begun to arrive when its turn comes does not hold up the calls
// issued after it, as Gloo's does not: it waits in `pending` (in issue order) while they run,
// and the worker runs it once its message comes (Communicator::Probe), sleeping in
// Communicator::AwaitMessage when nothing else is queued; a call issued meanwhile wakes it
// (WakeAwaitMessage). So ranks that each irecv before they send do not deadlock. Recvs from
// one peer still run in issue order.
struct CallQueue {
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::function<Status()> run;
    c10::intrusive_ptr<ChorusWork> work;  // null for a refusal's notice to the peers
    int recv_from = -1;                   // a recv: its peer
    Clock::time_point deadline{};         // a recv: when its wait ends (its timeout from issue)
  };
  std::mutex mu;
  // Rung when a call is queued and when one ends: the worker and RunHere wait on it.
  std::condition_variable cv;
  std::deque<Entry> entries;
  std::deque<Entry> pending;  // recvs waiting for their messages, in issue order
  bool busy = false;
  bool stop = false;  // the group is being destroyed: the worker ends once the queue is empty
  // A thread (the worker, or RunHere's) sleeps in AwaitMessage: a call queued must wake it.
  bool awaiting = false;
  // Threads in RunHere that wait to run a pending recv themselves: the worker leaves them
  // `pending`.
  int here = 0;
  // A prompt caller's recv (below) waits in `pending` unknown to the worker, for the caller's
  // wait() to run it on its own thread (RunHere) with no other thread woken. Anything else
  // that may need it served (another call issued, a look at a Work other than wait(), the
  // group's end) hands it to the worker (Unhold).
  bool hold = false;
  // The group's communicator, used only by the thread that has set `busy`, and for
  // WakeAwaitMessage; valid while an entry is queued or pending (the group runs them all
  // before it is destroyed).
  Communicator* comm = nullptr;
  // Whether the caller waits for each call at once: it waited (Work.wait) for the last call it
  // issued, within kPrompt of issuing it and before issuing another, as torch's synchronous
  // calls do. Then a large call, too, runs on the caller's thread when nothing is queued:
  // handing it to the worker and waking the caller back cost more than the call itself up to
  // about 1 MiB. A caller that waits later, or through the future (DDP's reducer), has its
  // large calls queued, to overlap them with its work.
  bool prompt = false;
  const ChorusWork* last = nullptr;  // the last call issued (only compared)
  std::chrono::steady_clock::time_point last_issued;
  bool last_waited = false;
  static constexpr std::chrono::microseconds kPrompt{200};

  // Ends `hold`; true if the worker is to be woken for it. Under `mu`.
  bool Unhold() {
    const bool was = hold;
    hold = false;
    return was;
  }
  // Whether a recv from `peer` issued earlier still waits. Under `mu`.
  bool Pending(int peer) const {
    return std::any_of(pending.begin(), pending.end(),
                       [&](const Entry& e) { return e.recv_from == peer; });
  }
  // Whether a recv from `peer` may run now without waiting for `peer` to send: none from it is
  // pending and its message has begun to arrive. Under `mu`, by the thread that has set busy or
  // while no thread has.
  bool RecvReady(int peer) const { return !Pending(peer) && comm->Probe(peer); }
  // Queues `entry` and wakes the thread that runs or waits for calls. Under `mu`.
  void Push(Entry entry) {
    entries.push_back(std::move(entry));
    if (awaiting) comm->WakeAwaitMessage();
  }
  // Runs recv `entry` on this thread, which has set busy and released `mu`, once its message
  // begins to arrive or its deadline passes; true if it ran. False (`entry` untouched) if a
  // call was queued meanwhile: the caller gives the queue back to the worker.
  bool RunRecvWhenReady(Entry& entry, std::unique_lock<std::mutex>& lock, Status* status);
};

bool CallQueue::RunRecvWhenReady(Entry& entry, std::unique_lock<std::mutex>& lock,
                                 Status* status) {
  const int peers[] = {entry.recv_from};
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (comm->Probe(entry.recv_from) || now >= entry.deadline) {
      lock.unlock();
      *status = entry.run();
      lock.lock();
      return true;
    }
    if (!entries.empty()) return false;
    awaiting = true;
    lock.unlock();
    comm->AwaitMessage(peers, std::chrono::ceil<milliseconds>(entry.deadline - now));
    lock.lock();
    awaiting = false;
  }
}

void ChorusWork::Waited() {
  CallQueue& q = *queue_;
  std::lock_guard<std::mutex> lock(q.mu);
  if (q.last != this || q.last_waited) return;
  q.last_waited = true;
  q.prompt = std::chrono::steady_clock::now() - q.last_issued <= CallQueue::kPrompt;
}

void ChorusWork::Unhold() {
  if (queue_ == nullptr) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    wake = queue_->Unhold();
  }
  if (wake) queue_->cv.notify_all();
}

void ChorusWork::RunHere() {
  CallQueue& q = *queue_;
  std::unique_lock<std::mutex> lock(q.mu);
  const auto mine = [&](const CallQueue::Entry& e) { return e.work.get() == this; };
  // A wait() that cannot run its call now leaves any held recv to the worker.
  const auto wait = [&] {
    if (q.Unhold()) q.cv.notify_all();
    q.cv.wait(lock);
  };
  CallQueue::Entry entry;
  for (;;) {
    const auto it = std::find_if(q.entries.begin(), q.entries.end(), mine);
    if (it != q.entries.end()) {
      // A call runs here once it is next; a recv only while it is all there is to run, since
      // it may wait for its message.
      if (it == q.entries.begin() && !q.busy &&
          (it->recv_from < 0 || (q.entries.size() == 1 && !q.Pending(it->recv_from)))) {
        entry = std::move(q.entries.front());
        q.entries.pop_front();
        break;
      }
      wait();
      continue;
    }
    const auto pit = std::find_if(q.pending.begin(), q.pending.end(), mine);
    if (pit == q.pending.end()) return;  // the worker took it
    if (!q.entries.empty() || q.pending.size() > 1) {
      wait();
      continue;
    }
    if (q.busy) {  // the worker may sleep in AwaitMessage for this very recv: take it over
      ++q.here;
      if (q.awaiting) q.comm->WakeAwaitMessage();
      wait();
      --q.here;
      continue;
    }
    entry = std::move(q.pending.front());
    q.pending.pop_front();
    q.hold = false;
    break;
  }
  q.busy = true;
  Status status;
  if (entry.recv_from >= 0 && !q.RunRecvWhenReady(entry, lock, &status)) {
    // A call was issued meanwhile: the worker runs it, and this recv when its message comes.
    q.pending.push_front(std::move(entry));
    q.busy = false;
    q.cv.notify_all();
    return;
  }
  if (entry.recv_from < 0) {
    lock.unlock();
    status = entry.run();
    lock.lock();
  }
  q.busy = false;
  // Whoever waits for the queue (the worker, other RunHere calls) waits for entries: with none
  // left, waking the worker would only take a core from the peers.
  if (!q.entries.empty() || !q.pending.empty() || q.stop) q.cv.notify_all();
  lock.unlock();
  Finish(status);
}

// ---------------------------------------------------------------- the process group

class ProcessGroupChorus final : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(int rank, int size, Communicator comm, milliseconds timeout)
      : c10d::ProcessGroup(rank, size), comm_(std::move(comm)), timeout_(timeout) {
    queue_->comm = &comm_;
    worker_ = std::thread([this] { Run(); });
  }

  // Runs every call issued before it, then stops the worker. Without the GIL meanwhile: a
  // call's completion may run a Python callback of its future.
  ~ProcessGroupChorus() override {
    std::optional<py::gil_scoped_release> release;
    if (Py_IsInitialized() && PyGILState_Check()) release.emplace();
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->stop = true;
      queue_->hold = false;
    }
    queue_->cv.notify_all();
    worker_.join();
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_stop_ = true;
    }
    done_cv_.notify_all();
    for (std::thread& t : completers_) t.join();
  }

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const at::Tensor t = One("broadcast", CollectiveKind::kBroadcast, tensors);
    const int root = Root("broadcast", CollectiveKind::kBroadcast, opts.rootRank);
    return Issue(
        c10d::OpType::BROADCAST, {t},
        [=, this](const CallOptions& o) {
          return comm_.Broadcast(Elements(t), Elements(t), root, o);
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const at::Tensor t = One("allreduce", CollectiveKind::kAllReduce, tensors);
    const Reduction r = Reducing("allreduce", CollectiveKind::kAllReduce, opts.reduceOp, t);
    return Issue(
        c10d::OpType::ALLREDUCE, {t},
        [=, this](const CallOptions& o) {
          return ReduceInPlace(t, r, [&](ConstBuffer in, MutableBuffer out) {
            return comm_.AllReduce(in, out, r.op, o);
          });
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    const char* what = "allreduce_coalesced";
    if (tensors.empty()) Refuse(what, CollectiveKind::kAllReduce, "no tensors");
    for (const at::Tensor& t : tensors) {
      Dense(what, CollectiveKind::kAllReduce, t);
      if (t.scalar_type() != tensors[0].scalar_type()) {
        Refuse(what, CollectiveKind::kAllReduce, "the tensors must have one dtype");
      }
    }
    const Reduction r = Reducing(what, CollectiveKind::kAllReduce, opts.reduceOp, tensors[0]);
    const std::vector<at::Tensor> ts = tensors;
    return Issue(
        c10d::OpType::ALLREDUCE_COALESCED, ts,
        [=, this](const CallOptions& o) {
          at::Tensor flat = at::cat(Flattened(ts));
          Status s = ReduceInPlace(flat, r, [&](ConstBuffer in, MutableBuffer out) {
            return comm_.AllReduce(in, out, r.op, o);
          });
          if (s.ok()) s = Unpack(flat, ts);
          return s;
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const at::Tensor t = One("reduce", CollectiveKind::kReduce, tensors);
    const int root = Root("reduce", CollectiveKind::kReduce, opts.rootRank);
    const Reduction r = Reducing("reduce", CollectiveKind::kReduce, opts.reduceOp, t);
    return Issue(
        c10d::OpType::REDUCE, {t},
        [=, this](const CallOptions& o) {
          return ReduceInPlace(t, r, [&](ConstBuffer in, MutableBuffer out) {
            return comm_.Reduce(in, out, r.op, root, o);
          });
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    const at::Tensor in = One("allgather", CollectiveKind::kAllGather, inputs);
    if (outputs.size() != 1) {
      Refuse("allgather", CollectiveKind::kAllGather, "one list of output tensors is required");
    }
    const std::vector<at::Tensor> outs = outputs[0];
    Blocks("allgather", CollectiveKind::kAllGather, outs, in);
    return Issue(
        c10d::OpType::ALLGATHER, outs,
        [=, this](const CallOptions& o) {
          at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
          Status s = comm_.AllGather(Elements(in), Elements(flat), o);
          if (s.ok()) s = Unpack(flat, outs);
          return s;
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    const char* what = "_allgather_base (all_gather_into_tensor)";
    Dense(what, CollectiveKind::kAllGather, input);
    Dense(what, CollectiveKind::kAllGather, output);
    Same(what, CollectiveKind::kAllGather, output, input);
    if (output.numel() != size_ * input.numel()) {
      Refuse(what, CollectiveKind::kAllGather,
             "the output has " + std::to_string(output.numel()) + " elements, not " +
                 std::to_string(size_) + " x " + std::to_string(input.numel()));
    }
    const at::Tensor in = input, out = output;
    return Issue(
        c10d::OpType::_ALLGATHER_BASE, {out},
        [=, this](const CallOptions& o) { return comm_.AllGather(Elements(in), Elements(out), o); },
        opts.timeout);
  }

  // output_lists[q][i] receives rank q's inputs[i] (torch's all_gather_coalesced).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const char* what = "allgather_coalesced";
    const auto kind = CollectiveKind::kAllGather;
    if (inputs.empty()) Refuse(what, kind, "no input tensors");
    if (static_cast<int>(output_lists.size()) != size_) {
      Refuse(what, kind,
             "one list of output tensors per rank is required (" + std::to_string(size_) +
                 "), not " + std::to_string(output_lists.size()));
    }
    std::vector<at::Tensor> all_outputs;
    for (const at::Tensor& in : inputs) {
      Dense(what, kind, in);
      Same(what, kind, in, inputs[0]);
    }
    for (const std::vector<at::Tensor>& list : output_lists) {
      if (list.size() != inputs.size()) {
        Refuse(what, kind,
               "each rank's list of outputs must have one tensor per input (" +
                   std::to_string(inputs.size()) + "), not " + std::to_string(list.size()));
      }
      for (size_t i = 0; i < list.size(); ++i) {
        Dense(what, kind, list[i]);
        Same(what, kind, list[i], inputs[i]);
        if (list[i].numel() != inputs[i].numel()) {
          Refuse(what, kind,
                 "output " + std::to_string(i) + " must have " + std::to_string(inputs[i].numel()) +
                     " elements, like input " + std::to_string(i) + ", not " +
                     std::to_string(list[i].numel()));
        }
        all_outputs.push_back(list[i]);
      }
    }
    const std::vector<at::Tensor> ins = inputs;
    return Issue(
        c10d::OpType::ALLGATHER_COALESCED, all_outputs,
        [=, this](const CallOptions& o) {
          // One all-gather of the inputs back to back: rank q's block holds its inputs in order,
          // which is all_outputs' order too.
          at::Tensor send = at::cat(Flattened(ins));
          at::Tensor flat = at::empty({size_ * send.numel()}, send.options());
          Status s = comm_.AllGather(Elements(send), Elements(flat), o);
          if (s.ok()) s = Unpack(flat, all_outputs);
          return s;
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const char* what = "gather";
    const at::Tensor in = One(what, CollectiveKind::kGather, inputs);
    const int root = Root(what, CollectiveKind::kGather, opts.rootRank);
    const std::vector<at::Tensor> outs =
        RootList(what, CollectiveKind::kGather, root, outputs, in, "output");
    return Issue(
        c10d::OpType::GATHER, outs,
        [=, this](const CallOptions& o) {
          at::Tensor flat = rank_ == root ? at::empty({size_ * in.numel()}, in.options()) : in;
          MutableBuffer recv = rank_ == root ? Elements(flat) : MutableBuffer{};
          if (rank_ != root) recv.dtype = Elements(in).dtype;
          Status s = comm_.Gather(Elements(in), recv, root, o);
          if (s.ok() && rank_ == root) s = Unpack(flat, outs);
          return s;
        },
        opts.timeout, size_ * in.nbytes());
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const char* what = "scatter";
    const at::Tensor out = One(what, CollectiveKind::kScatter, outputs);
    const int root = Root(what, CollectiveKind::kScatter, opts.rootRank);
    const std::vector<at::Tensor> ins =
        RootList(what, CollectiveKind::kScatter, root, inputs, out, "input");
    return Issue(
        c10d::OpType::SCATTER, {out},
        [=, this](const CallOptions& o) {
          at::Tensor flat = rank_ == root ? at::cat(Flattened(ins)) : out;
          ConstBuffer send = rank_ == root ? ConstBuffer(Elements(flat)) : ConstBuffer{};
          if (rank_ != root) send.dtype = Elements(out).dtype;
          return comm_.Scatter(send, Elements(out), root, o);
        },
        opts.timeout, size_ * out.nbytes());
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const char* what = "reduce_scatter";
    const at::Tensor out = One(what, CollectiveKind::kReduceScatter, outputs);
    if (inputs.size() != 1) {
      Refuse(what, CollectiveKind::kReduceScatter, "one list of input tensors is required");
    }
    const std::vector<at::Tensor> ins = inputs[0];
    Blocks(what, CollectiveKind::kReduceScatter, ins, out);
    const Reduction r = Reducing(what, CollectiveKind::kReduceScatter, opts.reduceOp, out);
    return Issue(
        c10d::OpType::REDUCE_SCATTER, {out},
        [=, this](const CallOptions& o) {
          at::Tensor flat = at::cat(Flattened(ins));
          return ReduceScatterInto(flat, out, r, o);
        },
        opts.timeout, size_ * out.nbytes());
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    const char* what = "_reduce_scatter_base (reduce_scatter_tensor)";
    Dense(what, CollectiveKind::kReduceScatter, input);
    Dense(what, CollectiveKind::kReduceScatter, output);
    Same(what, CollectiveKind::kReduceScatter, output, input);
    if (input.numel() != size_ * output.numel()) {
      Refuse(what, CollectiveKind::kReduceScatter,
             "the input has " + std::to_string(input.numel()) + " elements, not " +
                 std::to_string(size_) + " x " + std::to_string(output.numel()));
    }
    const Reduction r = Reducing(what, CollectiveKind::kReduceScatter, opts.reduceOp, output);
    const at::Tensor in = input, out = output;
    return Issue(
        c10d::OpType::_REDUCE_SCATTER_BASE, {out},
        [=, this](const CallOptions& o) { return ReduceScatterInto(in, out, r, o); }, opts.timeout,
        in.nbytes());
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    const char* what = "alltoall_base (all_to_all_single)";
    Dense(what, CollectiveKind::kAllToAllV, input);
    Dense(what, CollectiveKind::kAllToAllV, output);
    Same(what, CollectiveKind::kAllToAllV, output, input);
    const std::vector<size_t> send_counts = Splits(what, input, input_splits);
    const std::vector<size_t> recv_counts = Splits(what, output, output_splits);
    const at::Tensor in = input, out = output;
    return Issue(
        c10d::OpType::ALLTOALL_BASE, {out},
        [=, this](const CallOptions& o) {
          // Never in place in chorus: an output that is the input goes through a copy.
          const at::Tensor src = in.is_alias_of(out) ? in.clone() : in;
          return comm_.AllToAllV(Elements(src), send_counts, Elements(out), recv_counts, o);
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    const char* what = "alltoall";
    if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_) {
      Refuse(what, CollectiveKind::kAllToAllV,
             "one input and one output tensor per rank are required (" + std::to_string(size_) +
                 " each)");
    }
    std::vector<size_t> send_counts, recv_counts;
    for (int q = 0; q < size_; ++q) {
      const at::Tensor& i = inputs[static_cast<size_t>(q)];
      const at::Tensor& x = outputs[static_cast<size_t>(q)];
      Dense(what, CollectiveKind::kAllToAllV, i);
      Dense(what, CollectiveKind::kAllToAllV, x);
      Same(what, CollectiveKind::kAllToAllV, i, inputs[0]);
      Same(what, CollectiveKind::kAllToAllV, x, inputs[0]);
      send_counts.push_back(static_cast<size_t>(i.numel()) * UnitsPer(i));
      recv_counts.push_back(static_cast<size_t>(x.numel()) * UnitsPer(x));
    }
    const std::vector<at::Tensor> ins = inputs, outs = outputs;
    return Issue(
        c10d::OpType::ALLTOALL, outs,
        [=, this](const CallOptions& o) {
          at::Tensor send = at::cat(Flattened(ins));
          int64_t total = 0;
          for (const at::Tensor& x : outs) total += x.numel();
          at::Tensor recv = at::empty({total}, send.options());
          Status s = comm_.AllToAllV(Elements(send), send_counts, Elements(recv), recv_counts, o);
          if (s.ok()) s = Unpack(recv, outs);
          return s;
        },
        opts.timeout);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Issue(
        c10d::OpType::BARRIER, {}, [this](const CallOptions& o) { return comm_.Barrier(o); },
        opts.timeout);
  }

  // Point-to-point: one tensor, moved as bytes. A refusal raises on this rank alone (its peer
  // takes no part until its own send or recv, which then waits for the message). A recv whose
  // message has not begun to arrive lets the calls issued after it run meanwhile (CallQueue),
  // so an irecv issued before a send that its peer waits for does not deadlock; its timeout
  // counts from when it was issued.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const at::Tensor t = One("send", std::nullopt, tensors);
    Peer("send", dst);
    return Issue(
        c10d::OpType::SEND, {},
        [this, t, dst, tag](const CallOptions& o) {
          return comm_.Send(Elements(t), dst, {o.timeout, static_cast<uint32_t>(tag)});
        },
        c10d::kUnsetTimeout, t.nbytes());
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const at::Tensor t = One("recv", std::nullopt, tensors);
    Peer("recv", src);
    const auto deadline = CallQueue::Clock::now() + timeout_;
    return Issue(
        c10d::OpType::RECV, {t},
        [this, t, src, tag, deadline](const CallOptions&) {
          const auto left = std::chrono::ceil<milliseconds>(deadline - CallQueue::Clock::now());
          return comm_.Recv(Elements(t), src,
                            {std::max(left, milliseconds(1)), static_cast<uint32_t>(tag)});
        },
        c10d::kUnsetTimeout, 0, src, deadline);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK(false,
                "chorus: recv from any source is not supported (name the sender: "
                "dist.recv(tensor, src=...))");
  }

  std::string Transport() const { return std::string(TransportKindName(comm_.transport())); }

 private:
  // Refuses this rank's call: the peers hear of it in that call (in order, on the worker), and
  // this rank raises now.
  // A point-to-point call (no kind) has no peers to tell.
  [[noreturn]] void Refuse(const std::string& what, std::optional<CollectiveKind> kind,
                           const std::string& why) {
    const std::string reason = "torch " + what + ": " + why;
    if (kind) {
      Enqueue([this, kind = *kind, reason] {
        comm_.RejectCall(kind, reason).IgnoreError();
        return Status::Ok();
      });
    }
    TORCH_CHECK(false, "chorus: ", reason);
  }

  void Peer(const std::string& what, int peer) {
    if (peer < 0 || peer >= size_) {
      Refuse(what, std::nullopt,
             "rank " + std::to_string(peer) + " is not a rank of this group of " +
                 std::to_string(size_));
    }
  }

  void Dense(const std::string& what, std::optional<CollectiveKind> kind, const at::Tensor& t) {
    if (!t.defined()) Refuse(what, kind, "a tensor is undefined");
    if (t.layout() != at::kStrided) Refuse(what, kind, "sparse tensors are not supported");
    if (!t.device().is_cpu()) {
      Refuse(what, kind, "chorus runs on CPU tensors, not " + t.device().str());
    }
    if (!t.is_contiguous()) Refuse(what, kind, "tensors must be contiguous");
    if (t.is_conj() || t.is_neg()) {
      Refuse(what, kind,
             "a conjugate or negative view must be resolved first "
             "(resolve_conj, resolve_neg)");
    }
  }

  void Same(const std::string& what, CollectiveKind kind, const at::Tensor& a,
            const at::Tensor& b) {
    if (a.scalar_type() != b.scalar_type()) {
      Refuse(what, kind,
             std::string("the tensors must have one dtype, not ") + c10::toString(a.scalar_type()) +
                 " and " + c10::toString(b.scalar_type()));
    }
  }

  at::Tensor One(const std::string& what, std::optional<CollectiveKind> kind,
                 const std::vector<at::Tensor>& tensors) {
    if (tensors.size() != 1) {
      Refuse(what, kind, "one tensor per call is supported, not " + std::to_string(tensors.size()));
    }
    Dense(what, kind, tensors[0]);
    return tensors[0];
  }

  int Root(const std::string& what, CollectiveKind kind, int64_t root) {
    if (root < 0 || root >= size_) {
      Refuse(what, kind,
             "root " + std::to_string(root) + " is not a rank of this group of " +
                 std::to_string(size_));
    }
    return static_cast<int>(root);
  }

  // Every tensor of `blocks` (one per rank) is dense and like `one` in dtype and element count.
  void Blocks(const std::string& what, CollectiveKind kind, const std::vector<at::Tensor>& blocks,
              const at::Tensor& one) {
    if (static_cast<int>(blocks.size()) != size_) {
      Refuse(what, kind,
             "one tensor per rank is required (" + std::to_string(size_) + "), not " +
                 std::to_string(blocks.size()));
    }
    for (const at::Tensor& b : blocks) {
      Dense(what, kind, b);
      Same(what, kind, b, one);
      if (b.numel() != one.numel()) {
        Refuse(what, kind,
               "every tensor must have " + std::to_string(one.numel()) +
                   " elements, like this rank's, not " + std::to_string(b.numel()));
      }
    }
  }

  // A gather's or scatter's list of tensors: the root's one list (one tensor per rank, each like
  // `one`); the other ranks may give none.
  std::vector<at::Tensor> RootList(const std::string& what, CollectiveKind kind, int root,
                                   const std::vector<std::vector<at::Tensor>>& lists,
                                   const at::Tensor& one, const std::string& role) {
    if (rank_ != root) {
      if (!lists.empty() && !(lists.size() == 1 && lists[0].empty())) {
        Refuse(what, kind, "only the root takes " + role + " tensors");
      }
      return {};
    }
    if (lists.size() != 1) Refuse(what, kind, "the root needs one list of " + role + " tensors");
    Blocks(what, kind, lists[0], one);
    return lists[0];
  }

  Reduction Reducing(const std::string& what, CollectiveKind kind, const c10d::ReduceOp& op,
                     const at::Tensor& t) {
    Reduction r = PlanReduction(op, t.scalar_type());
    if (!r.refusal.empty()) Refuse(what, kind, r.refusal);
    return r;
  }

  // Element counts per rank from torch's split sizes (rows of dim 0); none: equal blocks.
  std::vector<size_t> Splits(const std::string& what, const at::Tensor& t,
                             const std::vector<int64_t>& splits) {
    const auto kind = CollectiveKind::kAllToAllV;
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    const size_t units = UnitsPer(t);
    std::vector<size_t> counts;
    if (splits.empty()) {
      if (rows % size_ != 0) {
        Refuse(what, kind,
               "dim 0 (" + std::to_string(rows) + ") does not split evenly into " +
                   std::to_string(size_) + " ranks");
      }
      counts.assign(static_cast<size_t>(size_), static_cast<size_t>(rows / size_ * row) * units);
      return counts;
    }
    if (static_cast<int>(splits.size()) != size_) {
      Refuse(what, kind,
             "split sizes must have one entry per rank (" + std::to_string(size_) + "), not " +
                 std::to_string(splits.size()));
    }
    int64_t sum = 0;
    for (int64_t s : splits) {
      if (s < 0) Refuse(what, kind, "a split size is negative");
      sum += s;
      counts.push_back(static_cast<size_t>(s * row) * units);
    }
    if (sum != rows) {
      Refuse(what, kind,
             "split sizes add up to " + std::to_string(sum) + ", not dim 0 (" +
                 std::to_string(rows) + ")");
    }
    return counts;
  }

  static std::vector<at::Tensor> Flattened(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> flat;
    flat.reserve(ts.size());
    for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
    return flat;
  }

  // Copies the call's result out of `flat` into `outs`, back to back. After the call: a
  // failure is this rank's alone (its peers' calls are complete), so it is returned.
  static Status Unpack(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
    try {
      int64_t at = 0;
      for (const at::Tensor& t : outs) {
        t.view({-1}).copy_(flat.narrow(0, at, t.numel()));
        at += t.numel();
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      return Internal(std::string("torch: copying the result out failed: ") + e.what());
    }
  }

  // A reducing call into `t` from `t` (from a scaled copy for PREMUL_SUM, so that a rank
  // whose tensor is not written keeps it as it was), complex elements as pairs.
  template <typename Call>
  static Status ReduceInPlace(const at::Tensor& t, const Reduction& r, Call call) {
    const at::Tensor src = r.premul ? t.mul(*r.premul) : t;
    const size_t n = static_cast<size_t>(t.numel()) * r.per_element;
    return call(ConstBuffer{src.data_ptr(), n, r.dtype}, MutableBuffer{t.data_ptr(), n, r.dtype});
  }

  Status ReduceScatterInto(const at::Tensor& in, const at::Tensor& out, const Reduction& r,
                           const CallOptions& o) {
    at::Tensor src = in;
    if (r.premul) src = in.mul(*r.premul);
    const ConstBuffer send{src.data_ptr(), static_cast<size_t>(src.numel()) * r.per_element,
                           r.dtype};
    const MutableBuffer recv{out.data_ptr(), static_cast<size_t>(out.numel()) * r.per_element,
                             r.dtype};
    return comm_.ReduceScatter(send, recv, r.op, o);
  }

  // Runs `call` in the order issued and returns its Work. A small call (at most kInlineBytes
  // moved) runs at once on the caller's thread when nothing is queued or running: it takes a few
  // microseconds, less than handing it to the worker and waking the caller back. A larger one
  // is queued for the worker, so that the caller (DDP's backward pass) goes on meanwhile; a
  // Work the worker runs is completed by a completer thread (Complete), so that a callback of
  // its future may issue another call and wait for it. A caller that waits for its Work before
  // the worker has taken the call runs it itself (ChorusWork::RunHere).
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> Issue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       Call call, milliseconds timeout, size_t moved = 0,
                                       int recv_from = -1,
                                       CallQueue::Clock::time_point deadline = {}) {
    size_t out_bytes = 0;
    for (const at::Tensor& t : outputs) out_bytes += t.nbytes();
    moved = std::max(moved, out_bytes);
    auto work = c10::make_intrusive<ChorusWork>(type, std::move(outputs), queue_);
    CallOptions o;
    if (timeout != c10d::kUnsetTimeout) o.timeout = timeout;
    const CollectiveKind kind = KindOf(type);
    const bool collective = type != c10d::OpType::SEND && type != c10d::OpType::RECV;
    // The calls' torch work (a copy, a scratch tensor) that can throw comes before the chorus
    // call, and what comes after catches its own errors (Unpack): an exception here means the
    // peers still wait for this rank's call, which is refused for them.
    std::function<Status()> run = [this, call, o, kind, collective]() -> Status {
      try {
        return call(o);
      } catch (const std::exception& e) {
        const std::string why = std::string("torch failed before the call: ") + e.what();
        if (!collective) return Internal(why);
        comm_.RejectCall(kind, why).IgnoreError();
        return Internal(std::string(CollectiveKindName(kind)) + ": " + why);
      }
    };
    CallQueue& q = *queue_;
    std::unique_lock<std::mutex> lock(q.mu);
    q.Unhold();  // woken below: the entries or the pending recvs are not empty then
    if (q.last != nullptr && !q.last_waited) q.prompt = false;
    q.last = work.get();
    q.last_waited = false;
    CallQueue::Entry entry{std::move(run), work, recv_from, deadline};
    if ((moved <= kInlineBytes || q.prompt) && q.entries.empty() && !q.busy) {
      if (recv_from >= 0 && !q.RecvReady(recv_from)) {
        // It waits for its message: the worker serves it, or a prompt caller's wait().
        q.pending.push_back(std::move(entry));
        // Held only while it is the one pending recv: RunHere runs no other.
        q.hold = q.prompt && q.pending.size() == 1;
        const bool held = q.hold;
        q.last_issued = std::chrono::steady_clock::now();
        lock.unlock();
        if (!held) q.cv.notify_all();
        return work;
      }
      q.busy = true;
      lock.unlock();
      const Status s = entry.run();
      lock.lock();
      q.busy = false;
      // Issued by another thread meanwhile, or a RunHere that waits for its pending recv.
      if (!q.entries.empty() || !q.pending.empty()) q.cv.notify_all();
      q.last_issued = std::chrono::steady_clock::now();
      lock.unlock();
      work->Finish(s);
      return work;
    }
    q.Push(std::move(entry));
    q.last_issued = std::chrono::steady_clock::now();
    lock.unlock();
    q.cv.notify_all();
    return work;
  }

  static CollectiveKind KindOf(c10d::OpType type) {
    switch (type) {
      case c10d::OpType::BROADCAST:
        return CollectiveKind::kBroadcast;
      case c10d::OpType::ALLREDUCE:
      case c10d::OpType::ALLREDUCE_COALESCED:
        return CollectiveKind::kAllReduce;
      case c10d::OpType::REDUCE:
        return CollectiveKind::kReduce;
      case c10d::OpType::ALLGATHER:
      case c10d::OpType::_ALLGATHER_BASE:
      case c10d::OpType::ALLGATHER_COALESCED:
        return CollectiveKind::kAllGather;
      case c10d::OpType::GATHER:
        return CollectiveKind::kGather;
      case c10d::OpType::SCATTER:
        return CollectiveKind::kScatter;
      case c10d::OpType::REDUCE_SCATTER:
      case c10d::OpType::_REDUCE_SCATTER_BASE:
        return CollectiveKind::kReduceScatter;
      case c10d::OpType::ALLTOALL_BASE:
      case c10d::OpType::ALLTOALL:
        return CollectiveKind::kAllToAllV;
      default:
        return CollectiveKind::kBarrier;
    }
  }

  // Queues `run` (the call of `work`, or with no Work a refusal's notice) behind every call
  // issued before it.
  void Enqueue(std::function<Status()> run, c10::intrusive_ptr<ChorusWork> work = {}) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->Push({std::move(run), std::move(work)});
    }
    queue_->cv.notify_all();
  }

  // Completes a Work of the worker's on a completer thread, which runs its future's callbacks.
  // There is a completer for every completion waiting: one whose callback waits for another
  // call (PowerSGD's hook does) leaves that call's completion to another thread.
  void Complete(c10::intrusive_ptr<ChorusWork> work, Status status) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_queue_.emplace_back(std::move(work), std::move(status));
    if (done_queue_.size() > static_cast<size_t>(idle_completers_)) {
      completers_.emplace_back([this] { Completer(); });
    } else {
      done_cv_.notify_one();
    }
  }

  void Completer() {
    std::unique_lock<std::mutex> lock(done_mu_);
    for (;;) {
      ++idle_completers_;
      done_cv_.wait(lock, [&] { return done_stop_ || !done_queue_.empty(); });
      --idle_completers_;
      if (done_queue_.empty()) return;  // stopped, and every completion has run
      auto [work, status] = std::move(done_queue_.front());
      done_queue_.pop_front();
      lock.unlock();
      work->Finish(status);
      work.reset();
      lock.lock();
    }
  }

  // The worker: one call at a time, never while another thread runs one (CallQueue::busy). A
  // recv whose message has not begun to arrive goes to `pending`, and the calls after it run;
  // with nothing else queued, the worker runs the first pending recv (of its peer) whose
  // message has come or whose deadline has passed, or sleeps until one has, or a call is
  // issued.
  void Run() {
    CallQueue& q = *queue_;
    std::unique_lock<std::mutex> lock(q.mu);
    for (;;) {
      q.cv.wait(lock, [&] {
        return !q.busy && (!q.entries.empty() || (!q.pending.empty() && q.here == 0 && !q.hold) ||
                           (q.stop && q.pending.empty()));
      });
      if (q.entries.empty() && q.pending.empty()) return;  // stopped, and every call has run
      CallQueue::Entry entry;
      if (!q.entries.empty()) {
        entry = std::move(q.entries.front());
        q.entries.pop_front();
        if (entry.recv_from >= 0 && !q.RecvReady(entry.recv_from)) {
          q.pending.push_back(std::move(entry));
          continue;
        }
      } else {
        const auto now = CallQueue::Clock::now();
        std::vector<int> peers;
        auto next = q.pending.end();
        auto until = CallQueue::Clock::time_point::max();
        for (auto it = q.pending.begin(); it != q.pending.end(); ++it) {
          if (std::find(peers.begin(), peers.end(), it->recv_from) != peers.end()) continue;
          peers.push_back(it->recv_from);  // the first pending recv from this peer
          if (now >= it->deadline || q.comm->Probe(it->recv_from)) {
            next = it;
            break;
          }
          until = std::min(until, it->deadline);
        }
        if (next == q.pending.end()) {
          q.busy = true;
          q.awaiting = true;
          lock.unlock();
          comm_.AwaitMessage(peers, std::chrono::ceil<milliseconds>(until - now));
          lock.lock();
          q.awaiting = false;
          q.busy = false;
          q.cv.notify_all();  // a RunHere that asked for the communicator
          continue;
        }
        entry = std::move(*next);
        q.pending.erase(next);
      }
      q.busy = true;
      lock.unlock();
      const Status status = entry.run();
      if (entry.work != nullptr) Complete(std::move(entry.work), status);
      lock.lock();
      q.busy = false;
      q.cv.notify_all();  // a caller waiting for its call's turn (ChorusWork::RunHere)
    }
  }

  static constexpr size_t kInlineBytes = 64 << 10;

  Communicator comm_;
  const milliseconds timeout_;  // the group's: a recv's deadline counts from its issue
  const std::shared_ptr<CallQueue> queue_ = std::make_shared<CallQueue>();
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<std::pair<c10::intrusive_ptr<ChorusWork>, Status>> done_queue_;
  int idle_completers_ = 0;
  bool done_stop_ = false;
  std::vector<std::thread> completers_;
  std::thread worker_;  // last: starts once the rest is built
};

// The backend's creator: joins a chorus communicator of `size` ranks through torch's store.
c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s) {
  CommOptions base;
  base.rank = rank;
  base.size = size;
  base.store = std::make_shared<StoreOverC10d>(store);
  // A write before the first read: a FileStore read waits out the store's whole timeout for
  // the file if it is not there yet (the count is not read).
  try {
    store->add("chorus/joined", 1);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "chorus: the store torch gave this group fails: ", e.what());
  }
  auto options = CommOptionsFromEnvironment(base);
  TORCH_CHECK(options.ok(), "chorus: ", options.status().ToString());
  const auto timeout = milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  TORCH_CHECK(timeout > milliseconds(0), "chorus: the timeout must be positive");
  options->timeout = timeout;
  Result<Communicator> comm = [&] {
    py::gil_scoped_release release;  // the meeting waits for the other ranks
    return Communicator::Create(*options);
  }();
  TORCH_CHECK(comm.ok(), "chorus: ", comm.status().ToString());
  return c10::make_intrusive<ProcessGroupChorus>(rank, size, std::move(*comm), timeout);
}

}  // namespace
}  // namespace chorus::torch_backend

PYBIND11_MODULE(_torch, m) {
  m.doc() = "chorus as a torch.distributed backend (use `import chorus.torch`)";
  m.def("create_process_group", &chorus::torch_backend::CreateProcessGroup, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
        "A chorus process group of `size` ranks met through torch's `store`.");
  m.def(
      "transport",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> std::string {
        auto* chorus_pg = dynamic_cast<chorus::torch_backend::ProcessGroupChorus*>(pg.get());
        TORCH_CHECK(chorus_pg != nullptr, "not a chorus process group: ", pg->getBackendName());
        return chorus_pg->Transport();
      },
      py::arg("group"), "The chorus transport of a chorus process group (shm, tcp, ...).");
}
