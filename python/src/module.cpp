// chorus._chorus: the Python binding of the public C++ API (chorus/chorus.h), on numpy arrays
// without copies. The package's __init__.py re-exports it; docs/python.md is the user's guide.
//
// Every collective takes C-contiguous numpy arrays and hands their memory to the library as it
// is: the buffer protocol's pointer, count and dtype. What the library cannot see (an object
// that is not an array, a read-only or strided array, a dtype chorus has no type for) is refused
// through Communicator::RejectCall, so the other ranks fail the same call at once instead of
// waiting out their deadline. The GIL is released for the whole of every call that may wait.
//
// Errors raise the classes of chorus/errors.py, one per chorus::StatusCode, carrying the code,
// the message and whether the communicator is still usable (after INVALID_ARGUMENT it is).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace py = pybind11;

namespace chorus::python {
namespace {

// ------------------------------------------------------------------------------ the GIL

// Thread ranks (chorus.local_group) hand the GIL to each other at every call: when a call
// returns on two ranks at once, one takes the GIL and the other sleeps in CPython until the
// first enters its next call, and waking it costs more than a small call (measured: 1 MiB
// all-gather on 2 thread ranks, 20 us from C++ against 45 us from Python). So the threads
// leaving a call take turns: one holds the turn from taking the GIL until it enters its next
// call; another waits for the turn without the GIL, spinning a little and then yielding its
// core, and takes the GIL once the holder has let it go, without sleeping. A turn held longer
// than kTurnWait (the holder computes, waits elsewhere or has exited) is not waited for.
constexpr int64_t kTurnWaitNs = 100'000;
std::atomic<int64_t> gil_turn{0};  // when the holder took it, steady_clock ns; 0: free
thread_local bool holds_turn = false;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Releases the GIL for a call that may wait, as py::gil_scoped_release does, and lets the
// next thread leaving a call have the turn; takes both back at the end of the scope.
class CallWithoutGil {
 public:
  CallWithoutGil() : state_(PyEval_SaveThread()) {
    if (holds_turn) {
      holds_turn = false;
      gil_turn.store(0, std::memory_order_release);
    }
  }
  ~CallWithoutGil() {
    int64_t taken = gil_turn.load(std::memory_order_acquire);
    for (int spins = 0;; ++spins) {
      const int64_t now = NowNs();
      if (taken == 0 || now - taken > kTurnWaitNs) {
        if (gil_turn.compare_exchange_weak(taken, now, std::memory_order_acq_rel)) {
          holds_turn = true;
          break;
        }
        continue;  // `taken` is fresh: look again
      }
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        sched_yield();  // the holder may need this core to reach its next call
      }
      taken = gil_turn.load(std::memory_order_acquire);
    }
    PyEval_RestoreThread(state_);
  }
  CallWithoutGil(const CallWithoutGil&) = delete;
  CallWithoutGil& operator=(const CallWithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

// ------------------------------------------------------------------------------ errors

// chorus.errors.BY_CODE, looked up once and kept for the interpreter's life (a static
// py::object would be released after the interpreter is gone).
py::handle ErrorClasses() {
  static py::handle classes =
      py::object(py::module_::import("chorus.errors").attr("BY_CODE")).release();
  return classes;
}

[[noreturn]] void Raise(const Status& status, bool usable) {
  py::object cls = ErrorClasses()[py::int_(static_cast<int>(status.code()))];
  py::object error = cls(status.message(), usable);
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

// A collective's failure: whether the communicator is usable follows from the code alone.
[[noreturn]] void RaiseCall(const Status& status) {
  Raise(status, CommunicatorUsableAfter(status.code()));
}

// Anything that is not a call on a communicator (options, stores, creation).
void Check(const Status& status) {
  if (!status.ok()) Raise(status, false);
}

Status BadArgument(const std::string& what) { return InvalidArgument(what); }

// ------------------------------------------------------------------------------ options

// Seconds (a float, an int or a datetime.timedelta) as milliseconds, or why not.
Status ToMillis(const py::handle& seconds, const char* name, std::chrono::milliseconds* out) {
  double s = 0;
  if (PyFloat_Check(seconds.ptr()) || PyLong_Check(seconds.ptr())) {
    s = PyFloat_AsDouble(seconds.ptr());
  } else if (py::hasattr(seconds, "total_seconds")) {  // datetime.timedelta
    s = PyFloat_AsDouble(seconds.attr("total_seconds")().ptr());
  } else {
    return BadArgument(std::string(name) +
                       " must be seconds (a number or a datetime.timedelta), "
                       "not " +
                       std::string(py::str(seconds.get_type().attr("__name__"))));
  }
  if (PyErr_Occurred()) {  // an int too large for a double
    PyErr_Clear();
    s = -1;
  }
  if (!(s > 0) || !std::isfinite(s) || s > 1e9) {
    return BadArgument(std::string(name) + " (" + std::to_string(s) +
                       " s) must be positive and finite");
  }
  *out = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(s * 1000.0)));
  return Status::Ok();
}

std::chrono::milliseconds Millis(const py::handle& seconds, const char* name) {
  std::chrono::milliseconds ms{0};
  Check(ToMillis(seconds, name, &ms));
  return ms;
}

template <typename Enum, int N>
Enum ParseName(const std::string& value, std::string_view (*name_of)(Enum), const char* what) {
  std::string known;
  for (int i = 0; i < N; ++i) {
    const auto e = static_cast<Enum>(i);
    if (name_of(e) == value) return e;
    known += (known.empty() ? "" : ", ") + std::string(name_of(e));
  }
  Check(BadArgument(std::string(what) + " (\"" + value + "\") is not one of: " + known));
  return Enum{};
}

class PyStore {
 public:
  explicit PyStore(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  const std::shared_ptr<Store>& get() const { return store_; }

  void Set(const std::string& key, const py::bytes& value) {
    std::string v = value;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = store_->Set(key, v);
    }
    Check(s);
  }
  py::bytes Get(const std::string& key, const py::object& timeout) {
    const auto ms = Millis(timeout, "timeout");
    Result<std::string> r = Status::Ok();
    {
      py::gil_scoped_release nogil;
      r = store_->Get(key, ms);
    }
    Check(r.status());
    return py::bytes(*r);
  }
  int64_t Add(const std::string& key, int64_t delta) {
    Result<int64_t> r = Status::Ok();
    {
      py::gil_scoped_release nogil;
      r = store_->Add(key, delta);
    }
    Check(r.status());
    return *r;
  }
  void Wait(const std::vector<std::string>& keys, const py::object& timeout) {
    const auto ms = Millis(timeout, "timeout");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = store_->Wait(keys, ms);
    }
    Check(s);
  }
  bool Delete(const std::string& key) {
    Result<bool> r = Status::Ok();
    {
      py::gil_scoped_release nogil;
      r = store_->Delete(key);
    }
    Check(r.status());
    return *r;
  }
  std::string address() const { return store_->address(); }

 private:
  std::shared_ptr<Store> store_;
};

// CommOptions from keyword arguments; unknown names are a TypeError, as Python does.
CommOptions OptionsFrom(const py::kwargs& kwargs) {
  CommOptions o;
  for (const auto& [key_handle, value] : kwargs) {
    const std::string key = py::str(key_handle);
    if (value.is_none()) continue;
    if (key == "timeout") {
      o.timeout = Millis(value, "timeout");
    } else if (key == "segment_bytes") {
      o.segment_bytes = value.cast<size_t>();
    } else if (key == "pipeline_depth") {
      o.pipeline_depth = value.cast<int>();
    } else if (key == "transport") {
      o.transport =
          ParseName<TransportKind, 5>(value.cast<std::string>(), &TransportKindName, "transport");
    } else if (key == "algorithm") {
      o.algorithm = value.cast<std::string>();
    } else if (key == "wait") {
      o.wait = ParseName<WaitMode, 3>(value.cast<std::string>(), &WaitModeName, "wait");
    } else if (key == "slot_stores") {
      o.slot_stores =
          ParseName<SlotStores, 3>(value.cast<std::string>(), &SlotStoresName, "slot_stores");
    } else if (key == "wire") {
      o.wire = ParseName<WireMode, 3>(value.cast<std::string>(), &WireModeName, "wire");
    } else if (key == "tuning_file") {
      o.tuning_file = value.cast<std::string>();
    } else if (key == "shm_dir") {
      o.shm_dir = value.cast<std::string>();
    } else if (key == "rank") {
      o.rank = value.cast<int>();
    } else if (key == "size") {
      o.size = value.cast<int>();
    } else if (key == "store") {
      o.store = value.cast<PyStore&>().get();
    } else if (key == "store_url") {
      o.store_url = value.cast<std::string>();
    } else if (key == "host_store") {
      o.host_store = value.cast<bool>();
    } else if (key == "name") {
      o.name = value.cast<std::string>();
    } else if (key == "job_id") {
      o.job_id = value.cast<std::string>();
    } else if (key == "secret") {
      o.secret = value.cast<std::string>();
    } else if (key == "listen") {
      o.listen = value.cast<std::string>();
    } else if (key == "host_id") {
      o.host_id = value.cast<std::string>();
    } else {
      throw py::type_error("unexpected option '" + key + "'");
    }
  }
  return o;
}

// ------------------------------------------------------------------------------ buffers

// An array's memory as the library sees it, or why it cannot be used.
struct Array {
  // Keeps the memory alive for the call. A py::object, not a py::array: a default py::array is
  // a new empty numpy array, two of them a call.
  py::object array;
  py::array view() const { return py::reinterpret_borrow<py::array>(array); }
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

std::optional<DataType> DataTypeOf(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  switch (kind) {
    case 'i':
      if (size == 1) return DataType::kInt8;
      if (size == 4) return DataType::kInt32;
      if (size == 8) return DataType::kInt64;
      break;
    case 'u':
      if (size == 1) return DataType::kUint8;
      if (size == 4) return DataType::kUint32;
      if (size == 8) return DataType::kUint64;
      break;
    case 'f':
      if (size == 2) return DataType::kFloat16;
      if (size == 4) return DataType::kFloat32;
      if (size == 8) return DataType::kFloat64;
      break;
    case 'V':  // ml_dtypes.bfloat16 registers itself as a void-kind type of its own name
      if (size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
        return DataType::kBFloat16;
      }
      break;
    default:
      break;
  }
  return std::nullopt;
}

// `as`: the dtype= override (a uint16 array read as bfloat16, say), or empty.
Status ToArray(const py::handle& object, const char* name, bool writable,
               const std::optional<DataType>& as, Array* out) {
  if (!py::isinstance<py::array>(object)) {
    return BadArgument(std::string(name) + " must be a numpy.ndarray, not " +
                       std::string(py::str(object.get_type().attr("__name__"))));
  }
  py::array a = py::reinterpret_borrow<py::array>(object);
  if (!(a.flags() & py::array::c_style)) {
    return BadArgument(std::string(name) +
                       " is not C-contiguous (a strided view or a transpose): pass "
                       "numpy.ascontiguousarray(" +
                       name + ")");
  }
  if (writable && !a.writeable()) {
    return BadArgument(std::string(name) + " is read-only, and this call writes into it");
  }
  // numpy's NPY_ARRAY_ALIGNED: the kernels read whole elements at their natural alignment.
  constexpr int kAligned = 0x0100;
  if (!(a.flags() & kAligned)) {
    return BadArgument(std::string(name) + " is not aligned to its element size: pass a copy");
  }
  const py::dtype dt = a.dtype();
  const char order = py::detail::array_descriptor_proxy(dt.ptr())->byteorder;
  if (order == '>') {  // this build runs little-endian only (x86-64)
    return BadArgument(std::string(name) + " is big-endian: pass " + name + ".astype(" + name +
                       ".dtype.newbyteorder('='))");
  }
  std::optional<DataType> dtype = as;
  if (dtype) {
    // Numbers of another type of the same width only (a uint16 array read as bfloat16): never
    // an array of Python objects, whose pointers must not be summed.
    const char kind = dt.kind();
    if (kind != 'i' && kind != 'u' && kind != 'f' && !DataTypeOf(dt)) {
      return BadArgument(std::string(name) + " has dtype " + std::string(py::str(dt.attr("name"))) +
                         ", which dtype=" + std::string(DataTypeName(*dtype)) +
                         " cannot reinterpret");
    }
    if (static_cast<size_t>(dt.itemsize()) != DataTypeSize(*dtype)) {
      return BadArgument(std::string(name) + " has " + std::to_string(dt.itemsize()) +
                         "-byte elements; dtype=" + std::string(DataTypeName(*dtype)) + " needs " +
                         std::to_string(DataTypeSize(*dtype)));
    }
  } else {
    dtype = DataTypeOf(dt);
    if (!dtype) {
      return BadArgument(std::string(name) + " has dtype " + std::string(py::str(dt.attr("name"))) +
                         ", which chorus has no type for (int8, uint8, int32, uint32, int64, "
                         "uint64, float16, bfloat16, float32, float64; a uint16 array is "
                         "read as bfloat16 with dtype=\"bfloat16\")");
    }
  }
  out->data = writable ? a.mutable_data() : const_cast<void*>(a.data());
  out->count = static_cast<size_t>(a.size());
  out->dtype = *dtype;
  out->array = std::move(a);
  return Status::Ok();
}

// ------------------------------------------------------------------------------ communicator

// A collective by its C++ name ("allreduce") or its method's ("all_reduce").
std::optional<CollectiveKind> KindOf(std::string name) {
  std::erase(name, '_');
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    if (CollectiveKindName(static_cast<CollectiveKind>(i)) == name) {
      return static_cast<CollectiveKind>(i);
    }
  }
  return std::nullopt;
}

py::dict TrafficDict(const Traffic& t) {
  py::dict d;
  d["bytes_sent"] = t.bytes_sent;
  d["bytes_received"] = t.bytes_received;
  d["calls"] = t.calls;
  return d;
}

// The keyword options every collective takes, and a refusal found while reading them.
struct CallKw {
  py::object timeout;
  py::object algorithm;
  py::object dtype;
  Status bad;

  // The root rank argument: an int (numpy's too), else a refusal and 0.
  int Root(const py::handle& root) { return Int(root, "root", "an int rank"); }
  // An int argument in [lo, hi], else a refusal (naming it and `what` it must be) and 0.
  long long Int(const py::handle& v, const char* name, const char* what,
                long long lo = std::numeric_limits<int>::min(),
                long long hi = std::numeric_limits<int>::max()) {
    if (PyLong_Check(v.ptr()) || PyIndex_Check(v.ptr())) {
      const long long r =
          PyLong_AsLongLong(py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr())).ptr());
      if (!PyErr_Occurred() && r >= lo && r <= hi) return r;
      PyErr_Clear();
    }
    if (bad.ok()) {
      bad =
          BadArgument(std::string(name) + " must be " + what + ", not " + std::string(py::str(v)));
    }
    return 0;
  }
};

class PyComm {
 public:
  explicit PyComm(Communicator comm) : comm_(std::make_unique<Communicator>(std::move(comm))) {}

  int rank() { return Live().rank(); }
  int size() { return Live().size(); }
  std::string transport() { return std::string(TransportKindName(Live().transport())); }

  // A collective: validates what the library cannot, then runs `fn(options)` without the GIL.
  // Marks the communicator busy for the call: it belongs to one thread at a time.
  // Every refusal goes through RejectCall, so that the peers fail the same call at once.
  template <typename Fn>
  void Call(CollectiveKind kind, const CallKw& kw, Status refused, Fn&& fn) {
    Communicator& comm = Live();
    Busy busy(this);
    if (refused.ok()) refused = kw.bad;
    CallOptions options;
    if (refused.ok() && !kw.timeout.is_none()) {
      std::chrono::milliseconds ms{0};
      refused = ToMillis(kw.timeout, "timeout", &ms);
      options.timeout = ms;
    }
    if (refused.ok() && !kw.algorithm.is_none()) {
      if (py::isinstance<py::str>(kw.algorithm)) {
        options.algorithm = kw.algorithm.cast<std::string>();
      } else {
        refused = BadArgument("algorithm must be a str");
      }
    }
    if (!refused.ok()) {
      Status s;
      {
        py::gil_scoped_release nogil;
        s = comm.RejectCall(kind, refused.message());
      }
      RaiseCall(s);
    }
    Status s;
    {
      CallWithoutGil nogil;
      s = fn(comm, options);
    }
    if (!s.ok()) RaiseCall(s);
  }

  // Each collective returns its output array (None where the rank has none).
  py::object AllReduce(const py::object& send, const py::object& recv, const py::object& op,
                       const CallKw& kw) {
    return Reducing(CollectiveKind::kAllReduce, send, recv, op, kw, true,
                    [](Communicator& c, ConstBuffer s, MutableBuffer r, ReduceOp rop,
                       const CallOptions& o) { return c.AllReduce(s, r, rop, o); });
  }
  py::object Reduce(const py::object& send, const py::object& recv, const py::object& op, int root,
                    const CallKw& kw) {
    // Only the root's recv is written.
    return Reducing(CollectiveKind::kReduce, send, recv, op, kw, rank() == root,
                    [root](Communicator& c, ConstBuffer s, MutableBuffer r, ReduceOp rop,
                           const CallOptions& o) { return c.Reduce(s, r, rop, root, o); });
  }
  py::object Broadcast(const py::object& send, const py::object& recv, int root, const CallKw& kw) {
    // Only the root's send is read; elsewhere recv alone matters (send may be recv or None).
    const bool at_root = rank() == root;
    const py::object& out = recv.is_none() ? send : recv;
    Array s, r;
    Status refused = Buffers(send.is_none() || !at_root ? out : send, out, kw, &s, &r);
    Call(CollectiveKind::kBroadcast, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.Broadcast({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, root, o);
    });
    return r.array;
  }
  // Send (`data` read) or Recv (`data` written, and returned). The other ranks take no part, so
  // a refusal is raised here alone.
  // send (recv_data is null), recv (send_data is null) or sendrecv (both): the arguments are
  // checked as one, and a refusal raises on this rank only, since no peer takes part. A
  // sendrecv's recv of None is made with send's shape and dtype.
  py::object Message(const char* op, const py::object* send_data, const py::object& to,
                     const py::object* recv_data, const py::object& from, const py::object& tag,
                     const CallKw& kw) {
    Communicator& comm = Live();
    Busy busy(this);
    CallKw k = kw;
    const bool both = send_data != nullptr && recv_data != nullptr;
    const int to_rank = send_data ? static_cast<int>(k.Int(to, both ? "dest" : "peer", "an int rank")) : -1;
    const int from_rank =
        recv_data ? static_cast<int>(k.Int(from, both ? "source" : "peer", "an int rank")) : -1;
    MessageOptions options;
    options.tag = static_cast<uint32_t>(k.Int(tag, "tag", "an int in [0, 2**32)", 0, 0xffffffffLL));
    Status refused = k.bad;
    Array s, r;
    if (refused.ok() && both) {
      refused = SendAndMadeRecv(*send_data, *recv_data, k, &s, &r,
                                [](std::vector<py::ssize_t>&) { return Status::Ok(); });
    } else if (refused.ok()) {
      const std::optional<DataType> as = Override(k, &refused);
      if (refused.ok() && send_data) refused = ToArray(*send_data, "data", false, as, &s);
      if (refused.ok() && recv_data) refused = ToArray(*recv_data, "data", true, as, &r);
    }
    if (refused.ok() && !k.timeout.is_none()) {
      std::chrono::milliseconds ms{0};
      refused = ToMillis(k.timeout, "timeout", &ms);
      options.timeout = ms;
    }
    if (!refused.ok()) Raise(Status(refused.code(), std::string(op) + ": " + refused.message()), true);
    Status st;
    {
      CallWithoutGil nogil;
      const ConstBuffer out{s.data, s.count, s.dtype};
      const MutableBuffer in{r.data, r.count, r.dtype};
      st = both        ? comm.SendRecv(out, to_rank, in, from_rank, options)
           : send_data ? comm.Send(out, to_rank, options)
                       : comm.Recv(in, from_rank, options);
    }
    if (!st.ok()) RaiseCall(st);
    return recv_data ? r.array : py::none();
  }
  // Communicator::Split. Arguments the library cannot see refuse the split's all-gather, so
  // that every rank raises alike.
  std::unique_ptr<PyComm> Split(const py::object& color, const py::object& key,
                                const py::object& timeout) {
    Communicator& comm = Live();
    Busy busy(this);
    CallKw k{timeout, py::none(), py::none(), {}};
    const int c = color.is_none() ? Communicator::kNoColor
                                  : static_cast<int>(k.Int(color, "color", "an int or None"));
    const int order = key.is_none() ? comm.rank() : static_cast<int>(k.Int(key, "key", "an int"));
    CallOptions options;
    if (k.bad.ok() && !timeout.is_none()) {
      std::chrono::milliseconds ms{0};
      k.bad = ToMillis(timeout, "timeout", &ms);
      options.timeout = ms;
    }
    if (!k.bad.ok()) {
      Status rejected;
      {
        py::gil_scoped_release nogil;
        rejected = comm.RejectCall(CollectiveKind::kAllGather, "split: " + k.bad.message());
      }
      if (rejected.code() != StatusCode::kInvalidArgument) RaiseCall(rejected);
      RaiseCall(InvalidArgument("split: " + k.bad.message()));
    }
    Result<std::optional<Communicator>> made = Status::Ok();
    {
      CallWithoutGil nogil;
      made = comm.Split(c, order, options);
    }
    if (!made.ok()) RaiseCall(made.status());
    if (!*made) return nullptr;
    return std::make_unique<PyComm>(std::move(**made));
  }
  // Communicator::Shrink. No peer takes part in this rank's checks, so a refusal raises here.
  std::unique_ptr<PyComm> Shrink(const py::object& exclude, const py::object& timeout) {
    Communicator& comm = Live();
    Busy busy(this);
    CallKw k{timeout, py::none(), py::none(), {}};
    std::vector<int> ranks;
    if (py::isinstance<py::str>(exclude) || !py::isinstance<py::iterable>(exclude)) {
      k.bad = BadArgument("exclude must be a sequence of int ranks, not " +
                          std::string(py::str(exclude)));
    } else {
      for (const py::handle item : exclude) {
        ranks.push_back(static_cast<int>(k.Int(item, "exclude", "a sequence of int ranks")));
      }
    }
    CallOptions options;
    if (k.bad.ok() && !timeout.is_none()) {
      std::chrono::milliseconds ms{0};
      k.bad = ToMillis(timeout, "timeout", &ms);
      options.timeout = ms;
    }
    if (!k.bad.ok()) RaiseCall(InvalidArgument("shrink: " + k.bad.message()));
    Result<Communicator> made = Status::Ok();
    {
      CallWithoutGil nogil;
      made = comm.Shrink(ranks, options);
    }
    if (!made.ok()) RaiseCall(made.status());
    return std::make_unique<PyComm>(std::move(made).value());
  }
  void Barrier(const CallKw& kw) {
    Call(CollectiveKind::kBarrier, kw, Status::Ok(),
         [&](Communicator& c, const CallOptions& o) { return c.Barrier(o); });
  }
  py::object AllToAll(const py::object& send, const py::object& recv, const CallKw& kw) {
    Array s, r;
    Status refused = Buffers(send, recv.is_none() ? send : recv, kw, &s, &r);
    Call(CollectiveKind::kAllToAll, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.AllToAll({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, o);
    });
    return r.array;
  }
  // Output p times the input along axis 0: all-gather, and gather at the root.
  py::object AllGather(const py::object& send, const py::object& recv, const CallKw& kw) {
    Array s, r;
    Status refused = Growing(send, recv, kw, &s, &r);
    Call(CollectiveKind::kAllGather, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.AllGather({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, o);
    });
    return r.array;
  }
  py::object Gather(const py::object& send, const py::object& recv, int root, const CallKw& kw) {
    Array s, r;
    const bool at_root = rank() == root;
    Status refused =
        at_root ? Growing(send, recv, kw, &s, &r) : Buffers(send, send, kw, &s, &r, false);
    Call(CollectiveKind::kGather, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.Gather({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, root, o);
    });
    return at_root ? py::object(r.array) : py::object(py::none());
  }
  // Output a p-th of the input along axis 0: reduce-scatter; scatter (recv given).
  py::object ReduceScatter(const py::object& send, const py::object& recv, const py::object& op,
                           const CallKw& kw) {
    Array s, r;
    Status refused = Shrinking(send, recv, kw, &s, &r);
    ReduceOp rop = ReduceOp::kSum;
    if (refused.ok()) refused = OpOf(op, &rop);
    Call(CollectiveKind::kReduceScatter, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.ReduceScatter({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, rop, o);
    });
    return r.array;
  }
  py::object Scatter(const py::object& send, const py::object& recv, int root, const CallKw& kw) {
    Array s, r;
    const bool at_root = rank() == root;
    Status refused = recv.is_none() ? BadArgument("recv is required (every rank's output)")
                     : at_root      ? Buffers(send, recv, kw, &s, &r)
                                    : Buffers(recv, recv, kw, &s, &r);
    Call(CollectiveKind::kScatter, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.Scatter({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, root, o);
    });
    return r.array;
  }

  // ---- the v-variants: counts in elements, one per rank; a missing recv is made 1-D.
  py::object AllGatherV(const py::object& send, const py::object& counts, const py::object& recv,
                        const CallKw& kw) {
    Array s, r;
    std::vector<size_t> n;
    Status refused = Counts(counts, "counts", &n);
    if (refused.ok()) refused = VariedOut(send, recv, kw, Sum(n), &s, &r);
    Call(CollectiveKind::kAllGatherV, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.AllGatherV({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, n, o);
    });
    return r.array;
  }
  py::object ReduceScatterV(const py::object& send, const py::object& counts,
                            const py::object& recv, const py::object& op, const CallKw& kw) {
    Array s, r;
    std::vector<size_t> n;
    ReduceOp rop = ReduceOp::kSum;
    Status refused = Counts(counts, "counts", &n);
    if (refused.ok()) {
      const int me = rank();
      refused = VariedOut(send, recv, kw, static_cast<size_t>(me) < n.size() ? n[me] : 0, &s, &r);
    }
    if (refused.ok()) refused = OpOf(op, &rop);
    Call(CollectiveKind::kReduceScatterV, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.ReduceScatterV({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, n, rop, o);
    });
    return r.array;
  }
  py::object AllToAllV(const py::object& send, const py::object& send_counts,
                       const py::object& recv, const py::object& recv_counts,
                       const py::object& send_displs, const py::object& recv_displs,
                       const CallKw& kw) {
    Array s, r;
    std::vector<size_t> sn, rn, sd, rd;
    Status refused = Counts(send_counts, "send_counts", &sn);
    if (refused.ok()) refused = Counts(recv_counts, "recv_counts", &rn);
    if (refused.ok() && !send_displs.is_none()) refused = Counts(send_displs, "send_displs", &sd);
    if (refused.ok() && !recv_displs.is_none()) refused = Counts(recv_displs, "recv_displs", &rd);
    // A recv made here ends where the last block does; with displacements its gaps are zeros.
    size_t made = Sum(rn);
    if (!recv_displs.is_none()) {
      made = 0;
      for (size_t q = 0; q < std::min(rn.size(), rd.size()); ++q) {
        if (rn[q] > 0) made = std::max(made, rd[q] + rn[q]);
      }
    }
    if (refused.ok()) refused = VariedOut(send, recv, kw, made, &s, &r);
    if (refused.ok() && recv.is_none() && !recv_displs.is_none() && r.count > 0) {
      std::memset(r.data, 0, r.count * DataTypeSize(r.dtype));
    }
    Call(CollectiveKind::kAllToAllV, kw, refused, [&](Communicator& c, const CallOptions& o) {
      if (send_displs.is_none() && recv_displs.is_none()) {
        return c.AllToAllV({s.data, s.count, s.dtype}, sn, {r.data, r.count, r.dtype}, rn, o);
      }
      return c.AllToAllV({s.data, s.count, s.dtype}, sn, sd, {r.data, r.count, r.dtype}, rn, rd, o);
    });
    return r.array;
  }
  py::object GatherV(const py::object& send, const py::object& counts, const py::object& recv,
                     int root, const CallKw& kw) {
    Array s, r;
    std::vector<size_t> n;
    const bool at_root = rank() == root;
    Status refused;
    if (at_root) {
      refused = Counts(counts, "counts", &n);
      if (refused.ok()) refused = VariedOut(send, recv, kw, Sum(n), &s, &r);
    } else {
      refused = Buffers(send, send, kw, &s, &r, false);
    }
    Call(CollectiveKind::kGatherV, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.GatherV({s.data, s.count, s.dtype}, {r.data, r.count, r.dtype}, n, root, o);
    });
    return at_root ? py::object(r.array) : py::object(py::none());
  }
  py::object ScatterV(const py::object& send, const py::object& counts, const py::object& recv,
                      int root, const CallKw& kw) {
    Array s, r;
    std::vector<size_t> n;
    const bool at_root = rank() == root;
    Status refused =
        recv.is_none() ? BadArgument("recv is required (every rank's output)") : Status::Ok();
    if (refused.ok() && at_root) refused = Counts(counts, "counts", &n);
    if (refused.ok())
      refused = at_root ? Buffers(send, recv, kw, &s, &r) : Buffers(recv, recv, kw, &s, &r);
    Call(CollectiveKind::kScatterV, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return c.ScatterV({s.data, s.count, s.dtype}, n, {r.data, r.count, r.dtype}, root, o);
    });
    return r.array;
  }

  void RejectCall(const std::string& collective, const std::string& reason) {
    const std::optional<CollectiveKind> kind = KindOf(collective);
    if (!kind) throw py::value_error("reject_call: no collective is called '" + collective + "'");
    Communicator& comm = Live();
    Busy busy(this);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = comm.RejectCall(*kind, reason);
    }
    RaiseCall(s);
  }

  void Abort() { Live().Abort(); }
  // None when healthy, else the error a call would raise (not raised). Like the counters, not
  // while another thread runs a call: the communicator belongs to one thread at a time.
  py::object Health() {
    Communicator& comm = Live();
    Busy busy(this);
    const Status s = comm.health();
    if (s.ok()) return py::none();
    py::object cls = ErrorClasses()[py::int_(static_cast<int>(s.code()))];
    return cls(s.message(), false);
  }
  py::dict TrafficOf() {
    Communicator& comm = Live();
    Busy busy(this);
    const TrafficCounters t = comm.traffic();
    py::dict d;
    for (int i = 0; i < kNumCollectiveKinds; ++i) {
      d[py::str(std::string(CollectiveKindName(static_cast<CollectiveKind>(i))))] =
          TrafficDict(t.by_kind[i]);
    }
    d["messages"] = TrafficDict(t.messages);
    d["total"] = TrafficDict(t.total);
    return d;
  }
  void ResetTraffic() {
    Communicator& comm = Live();
    Busy busy(this);
    comm.ResetTraffic();
  }
  void Close() {
    if (busy_.load())
      throw py::value_error("close: the communicator is in a call on another thread");
    comm_.reset();
  }
  bool closed() const { return comm_ == nullptr; }
  bool in_call() const { return busy_.load(); }

 private:
  struct Busy {
    explicit Busy(PyComm* c) : comm(c) {
      if (comm->busy_.exchange(true)) {
        Raise(InvalidArgument("the communicator is already in a call on another thread: a "
                              "communicator belongs to one thread at a time"),
              true);
      }
    }
    ~Busy() { comm->busy_.store(false); }
    PyComm* comm;
  };

  Communicator& Live() {
    if (comm_ == nullptr) throw py::value_error("the communicator is closed");
    return *comm_;
  }

  static size_t Sum(const std::vector<size_t>& v) {
    size_t total = 0;
    for (size_t x : v) total += x;
    return total;
  }

  static std::optional<DataType> Override(const CallKw& kw, Status* refused) {
    if (kw.dtype.is_none()) return std::nullopt;
    const std::string name = py::str(kw.dtype);
    std::optional<DataType> t = ParseDataType(name);
    if (!t) *refused = BadArgument("dtype (\"" + name + "\") is not a chorus data type");
    return t;
  }

  static Status OpOf(const py::object& op, ReduceOp* out) {
    if (py::isinstance<py::str>(op)) {
      const std::string name = op.cast<std::string>();  // a str Enum's value, not its repr
      if (std::optional<ReduceOp> r = ParseReduceOp(name)) {
        *out = *r;
        return Status::Ok();
      }
      return BadArgument("op (\"" + name + "\") is not one of: sum, prod, min, max, avg");
    }
    return BadArgument("op must be a str or chorus.ReduceOp");
  }

  // send read-only, recv written (when `recv_written`).
  static Status Buffers(const py::object& send, const py::object& recv, const CallKw& kw, Array* s,
                        Array* r, bool recv_written = true) {
    Status refused;
    const std::optional<DataType> as = Override(kw, &refused);
    if (!refused.ok()) return refused;
    CHORUS_RETURN_IF_ERROR(ToArray(send, "send", false, as, s));
    return ToArray(recv, "recv", recv_written, as, r);
  }

  // A reducing collective whose recv has send's shape (in place when recv is None); `writes`:
  // whether this rank's recv is written. `run` makes the call.
  template <typename Run>
  py::object Reducing(CollectiveKind kind, const py::object& send, const py::object& recv,
                      const py::object& op, const CallKw& kw, bool writes, Run&& run) {
    Array s, r;
    ReduceOp rop = ReduceOp::kSum;
    Status refused = Buffers(send, recv.is_none() ? send : recv, kw, &s, &r, writes);
    if (refused.ok()) refused = OpOf(op, &rop);
    Call(kind, kw, refused, [&](Communicator& c, const CallOptions& o) {
      return run(c, ConstBuffer{s.data, s.count, s.dtype}, MutableBuffer{r.data, r.count, r.dtype},
                 rop, o);
    });
    return r.array;
  }

  // recv, or when it is None a new array of send's dtype and the shape `shape_of` gives from
  // send's (it may refuse the send instead).
  template <typename ShapeOf>
  static Status SendAndMadeRecv(const py::object& send, const py::object& recv, const CallKw& kw,
                                Array* s, Array* r, ShapeOf&& shape_of) {
    if (!recv.is_none()) return Buffers(send, recv, kw, s, r);
    Status refused;
    const std::optional<DataType> as = Override(kw, &refused);
    if (!refused.ok()) return refused;
    CHORUS_RETURN_IF_ERROR(ToArray(send, "send", false, as, s));
    const py::array sent = s->view();
    std::vector<py::ssize_t> shape(sent.shape(), sent.shape() + sent.ndim());
    CHORUS_RETURN_IF_ERROR(shape_of(shape));
    return ToArray(py::array(sent.dtype(), shape), "recv", true, as, r);
  }

  // A missing recv is made: send's shape with axis 0 p times longer (a 0-d send: (p,)).
  Status Growing(const py::object& send, const py::object& recv, const CallKw& kw, Array* s,
                 Array* r) {
    return SendAndMadeRecv(send, recv, kw, s, r, [&](std::vector<py::ssize_t>& shape) {
      if (shape.empty()) shape.push_back(1);
      shape[0] *= size();
      return Status::Ok();
    });
  }

  // A missing recv is made: send's shape with axis 0 p times shorter; axis 0 must divide.
  Status Shrinking(const py::object& send, const py::object& recv, const CallKw& kw, Array* s,
                   Array* r) {
    const auto p = static_cast<py::ssize_t>(size());
    return SendAndMadeRecv(send, recv, kw, s, r, [&](std::vector<py::ssize_t>& shape) {
      if (shape.empty() || shape[0] % p != 0) {
        return BadArgument(
            "send's first axis (" +
            (shape.empty() ? std::string("none: a 0-d array") : std::to_string(shape[0])) +
            ") is not a multiple of size (" + std::to_string(p) +
            "): pass recv, or a send whose first axis divides");
      }
      shape[0] /= p;
      return Status::Ok();
    });
  }

  // A v-variant's output: recv, or a new 1-D array of `elements`.
  static Status VariedOut(const py::object& send, const py::object& recv, const CallKw& kw,
                          size_t elements, Array* s, Array* r) {
    return SendAndMadeRecv(send, recv, kw, s, r, [&](std::vector<py::ssize_t>& shape) {
      shape.assign(1, static_cast<py::ssize_t>(elements));
      return Status::Ok();
    });
  }

  static Status Counts(const py::object& counts, const char* name, std::vector<size_t>* out) {
    if (counts.is_none()) return BadArgument(std::string(name) + " is required");
    try {
      for (const py::handle item : py::iter(counts)) {
        const auto v = item.cast<int64_t>();
        if (v < 0) {
          return BadArgument(std::string(name) + " holds a negative count (" + std::to_string(v) +
                             ")");
        }
        out->push_back(static_cast<size_t>(v));
      }
    } catch (const py::error_already_set&) {
      return BadArgument(std::string(name) + " must be a sequence of ints");
    } catch (const py::cast_error&) {
      return BadArgument(std::string(name) + " must be a sequence of ints");
    }
    return Status::Ok();
  }

  std::unique_ptr<Communicator> comm_;
  std::atomic<bool> busy_{false};
};

std::vector<std::unique_ptr<PyComm>> CreateLocal(int n, const py::kwargs& kwargs) {
  Result<CommOptions> options = LocalOptionsFromEnvironment(OptionsFrom(kwargs));
  Check(options.status());
  Result<std::vector<Communicator>> group = Status::Ok();
  {
    py::gil_scoped_release nogil;
    group = CreateLocalGroup(n, *options);
  }
  Check(group.status());
  std::vector<std::unique_ptr<PyComm>> out;
  for (Communicator& comm : *group) out.push_back(std::make_unique<PyComm>(std::move(comm)));
  return out;
}

std::unique_ptr<PyComm> Init(const py::kwargs& kwargs) {
  Result<CommOptions> options = CommOptionsFromEnvironment(OptionsFrom(kwargs));
  Check(options.status());
  Result<Communicator> comm = Status::Ok();
  {
    py::gil_scoped_release nogil;
    comm = Communicator::Create(*options);
  }
  Check(comm.status());
  return std::make_unique<PyComm>(std::move(*comm));
}

std::unique_ptr<PyStore> OpenStoreAt(const std::string& url, const std::string& secret,
                                     const py::object& connect_timeout) {
  StoreOptions o;
  o.secret = secret;
  o.connect_timeout = Millis(connect_timeout, "connect_timeout");
  Result<std::shared_ptr<Store>> store = Status::Ok();
  {
    py::gil_scoped_release nogil;
    store = OpenStore(url, o);
  }
  Check(store.status());
  return std::make_unique<PyStore>(*store);
}

// Keyword arguments common to the collectives.
#define CHORUS_CALL_KW                                                               \
  py::kw_only(), py::arg("timeout") = py::none(), py::arg("algorithm") = py::none(), \
                 py::arg("dtype") = py::none()

}  // namespace
}  // namespace chorus::python

PYBIND11_MODULE(_chorus, m) {
  using namespace chorus;
  using namespace chorus::python;
  m.doc() = "chorus collectives on numpy arrays (the C++ binding; import chorus instead)";
  ErrorClasses();  // chorus/__init__.py imported chorus.errors first: look the classes up now

  py::class_<PyStore>(m, "Store", "A key-value store where ranks meet (chorus/store.h).")
      .def("set", &PyStore::Set, py::arg("key"), py::arg("value"), "Sets key to value (bytes).")
      .def("get", &PyStore::Get, py::arg("key"), py::arg("timeout") = 30.0,
           "The value of key, waiting up to timeout seconds for it to be set.")
      .def("add", &PyStore::Add, py::arg("key"), py::arg("delta"),
           "Adds delta to the integer at key (0 when absent); returns the new value.")
      .def("wait", &PyStore::Wait, py::arg("keys"), py::arg("timeout") = 30.0,
           "Waits up to timeout seconds until every key is set.")
      .def("delete", &PyStore::Delete, py::arg("key"), "Removes key; True when it existed.")
      .def_property_readonly("address", &PyStore::address);
  m.def(
      "hash_store", [] { return std::make_unique<PyStore>(MakeHashStore()); },
      "An in-process store, for thread ranks.");
  m.def("open_store", &OpenStoreAt, py::arg("url"), py::arg("secret") = "",
        py::arg("connect_timeout") = 30.0,
        "Opens tcp://host:port (proving secret) or file:///path.");

  py::class_<PyComm>(m, "Communicator", "One rank of a group (chorus::Communicator).")
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("transport", &PyComm::transport)
      .def_property_readonly("closed", &PyComm::closed)
      .def_property_readonly("in_call", &PyComm::in_call,
                             "True while a call runs on this communicator (on any thread).")
      .def(
          "all_reduce",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& op,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            return c.AllReduce(send, recv, op, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", CHORUS_CALL_KW,
          "Reduces send over every rank into recv (send.size elements each); recv=None works in "
          "place on send. Returns recv. op: sum, prod, min, max, avg. Keywords: timeout (seconds, "
          "this call only), algorithm (a name from `chorus bench --list-algos`), dtype (read the "
          "arrays as this chorus type, e.g. \"bfloat16\" for uint16). ")
      .def(
          "reduce_scatter",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& op,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            return c.ReduceScatter(send, recv, op, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", CHORUS_CALL_KW,
          "Reduces send (size blocks of recv.size elements) over every rank; rank r gets block r "
          "in recv. recv=None makes it: send's first axis divided by size. Returns recv. Keywords: "
          "timeout (seconds, this call only), algorithm (a name from `chorus bench --list-algos`), "
          "dtype (read the arrays as this chorus type, e.g. \"bfloat16\" for uint16). ")
      .def(
          "all_gather",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& timeout,
             const py::object& algorithm, const py::object& dtype) {
            return c.AllGather(send, recv, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("recv") = py::none(), CHORUS_CALL_KW,
          "Every rank's send, in rank order, in every rank's recv. recv=None makes it: send's "
          "first axis times size; recv may hold send as its block rank (in place). Returns recv. "
          "Keywords: timeout (seconds, this call only), algorithm (a name from `chorus bench "
          "--list-algos`), dtype (read the arrays as this chorus type, e.g. \"bfloat16\" for "
          "uint16). ")
      .def(
          "broadcast",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& root,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.Broadcast(send, recv, r, kw);
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, CHORUS_CALL_KW,
          "The root's send into every rank's recv; recv=None works in place on send. Away from the "
          "root send is not read. Returns recv. Keywords: timeout (seconds, this call only), "
          "algorithm (a name from `chorus bench --list-algos`), dtype (read the arrays as this "
          "chorus type, e.g. \"bfloat16\" for uint16). ")
      .def(
          "reduce",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& op,
             const py::object& root, const py::object& timeout, const py::object& algorithm,
             const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.Reduce(send, recv, op, r, kw);
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", py::arg("root") = 0,
          CHORUS_CALL_KW,
          "Reduces send over every rank into the root's recv (not written elsewhere); recv=None "
          "works in place. Returns recv. Keywords: timeout (seconds, this call only), algorithm (a "
          "name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def(
          "send",
          [](PyComm& c, const py::object& data, const py::object& peer, const py::object& tag,
             const py::object& timeout, const py::object& dtype) {
            return c.Message("send", &data, peer, nullptr, py::none(), tag,
                             CallKw{timeout, py::none(), dtype, {}});
          },
          py::arg("data"), py::arg("peer"), py::kw_only(), py::arg("tag") = 0,
          py::arg("timeout") = py::none(), py::arg("dtype") = py::none(),
          "Sends data to rank peer; returns once data may be reused, whether or not peer has "
          "called recv yet. Between two ranks messages arrive in the order sent. Keywords: tag "
          "(must be the recv's), timeout (seconds, this call only), dtype (read the array as this "
          "chorus type). ")
      .def(
          "recv",
          [](PyComm& c, const py::object& data, const py::object& peer, const py::object& tag,
             const py::object& timeout, const py::object& dtype) {
            return c.Message("recv", nullptr, py::none(), &data, peer, tag,
                             CallKw{timeout, py::none(), dtype, {}});
          },
          py::arg("data"), py::arg("peer"), py::kw_only(), py::arg("tag") = 0,
          py::arg("timeout") = py::none(), py::arg("dtype") = py::none(),
          "Receives the next message from rank peer into data, whose size, dtype and tag must be "
          "the message's; returns data. Keywords: tag, timeout (seconds, this call only), dtype. ")
      .def(
          "sendrecv",
          [](PyComm& c, const py::object& send, const py::object& dest, const py::object& recv,
             const py::object& source, const py::object& tag, const py::object& timeout,
             const py::object& dtype) {
            return c.Message("sendrecv", &send, dest, &recv, source.is_none() ? dest : source, tag,
                             CallKw{timeout, py::none(), dtype, {}});
          },
          py::arg("send"), py::arg("dest"), py::arg("recv") = py::none(),
          py::arg("source") = py::none(), py::kw_only(), py::arg("tag") = 0,
          py::arg("timeout") = py::none(), py::arg("dtype") = py::none(),
          "Sends send to rank dest and receives the next message from rank source (dest when "
          "None) into recv (made with send's shape and dtype when None), both at once, as "
          "MPI_Sendrecv: a step of a ring or pipeline shift. Returns recv. Keywords: tag (both "
          "messages'), timeout (seconds, this call only), dtype. ")
      .def("split", &PyComm::Split, py::arg("color"), py::arg("key") = py::none(), py::kw_only(),
           py::arg("timeout") = py::none(),
           "A new communicator of the ranks that pass the same color (an int >= 0), ranked by key "
           "(this rank's rank when None; ties by rank), as MPI_Comm_split; None for a rank whose "
           "color is None. Every rank calls it; split(0) duplicates. The new communicator is "
           "independent of this one (its own transport, calls and failures) and may outlive it. "
           "timeout: seconds, the whole split.")
      .def("shrink", &PyComm::Shrink, py::arg("exclude"), py::kw_only(),
           py::arg("timeout") = py::none(),
           "A new communicator of this one's ranks but those in exclude (a sequence of ranks), in "
           "the same order, as ncclCommShrink: for going on after ranks failed or left. Every "
           "rank not excluded calls it with the same list; it makes no call on this communicator, "
           "so it works on a failed one. timeout: seconds.")
      .def(
          "barrier",
          [](PyComm& c, const py::object& timeout) {
            c.Barrier(CallKw{timeout, py::none(), py::none(), {}});
          },
          py::kw_only(), py::arg("timeout") = py::none(),
          "Returns once every rank has entered it. timeout: seconds, this call only.")
      .def(
          "gather",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& root,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.Gather(send, recv, r, kw);
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, CHORUS_CALL_KW,
          "Every rank's send, in rank order, into the root's recv (made when None); returns it at "
          "the root, None elsewhere. Keywords: timeout (seconds, this call only), algorithm (a "
          "name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def(
          "scatter",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& root,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.Scatter(send, recv, r, kw);
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, CHORUS_CALL_KW,
          "Block r of the root's send (read at the root only; None elsewhere) into rank r's recv, "
          "which is required. Returns recv. Keywords: timeout (seconds, this call only), algorithm "
          "(a name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def(
          "all_to_all",
          [](PyComm& c, const py::object& send, const py::object& recv, const py::object& timeout,
             const py::object& algorithm, const py::object& dtype) {
            return c.AllToAll(send, recv, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("recv") = py::none(), CHORUS_CALL_KW,
          "Block q of this rank's send to rank q, whose recv gets it as block rank; recv=None "
          "works in place. Returns recv. Keywords: timeout (seconds, this call only), algorithm (a "
          "name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def(
          "all_gather_v",
          [](PyComm& c, const py::object& send, const py::object& counts, const py::object& recv,
             const py::object& timeout, const py::object& algorithm, const py::object& dtype) {
            return c.AllGatherV(send, counts, recv, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("counts"), py::arg("recv") = py::none(), CHORUS_CALL_KW,
          "all_gather with counts[q] elements from rank q (zeros allowed); recv=None makes a 1-D "
          "array of sum(counts). Returns recv. Keywords: timeout (seconds, this call only), "
          "algorithm (a name from `chorus bench --list-algos`), dtype (read the arrays as this "
          "chorus type, e.g. \"bfloat16\" for uint16). ")
      .def(
          "reduce_scatter_v",
          [](PyComm& c, const py::object& send, const py::object& counts, const py::object& recv,
             const py::object& op, const py::object& timeout, const py::object& algorithm,
             const py::object& dtype) {
            return c.ReduceScatterV(send, counts, recv, op, CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("counts"), py::arg("recv") = py::none(), py::arg("op") = "sum",
          CHORUS_CALL_KW,
          "reduce_scatter with blocks of counts[q] elements; recv=None makes a 1-D array of "
          "counts[rank]. Returns recv. Keywords: timeout (seconds, this call only), algorithm (a "
          "name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def(
          "all_to_all_v",
          [](PyComm& c, const py::object& send, const py::object& send_counts,
             const py::object& recv, const py::object& recv_counts, const py::object& timeout,
             const py::object& algorithm, const py::object& dtype, const py::object& send_displs,
             const py::object& recv_displs) {
            return c.AllToAllV(send, send_counts, recv, recv_counts, send_displs, recv_displs,
                               CallKw{timeout, algorithm, dtype, {}});
          },
          py::arg("send"), py::arg("send_counts"), py::arg("recv") = py::none(),
          py::arg("recv_counts") = py::none(), CHORUS_CALL_KW, py::arg("send_displs") = py::none(),
          py::arg("recv_displs") = py::none(),
          "send_counts[q] elements to rank q, recv_counts[q] from rank q (blocks back to back in "
          "rank order, or starting at send_displs[q] and recv_displs[q] elements, MPI's "
          "MPI_Alltoallv); recv=None makes a 1-D array of sum(recv_counts), or with recv_displs "
          "one that ends where the last block does, zeros outside the blocks. Returns recv. "
          "Keywords: timeout (seconds, this call only), algorithm (a name from `chorus bench "
          "--list-algos`), dtype (read the arrays as this chorus type, e.g. \"bfloat16\" for "
          "uint16), send_displs, recv_displs. ")
      .def(
          "gather_v",
          [](PyComm& c, const py::object& send, const py::object& counts, const py::object& recv,
             const py::object& root, const py::object& timeout, const py::object& algorithm,
             const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.GatherV(send, counts, recv, r, kw);
          },
          py::arg("send"), py::arg("counts") = py::none(), py::arg("recv") = py::none(),
          py::arg("root") = 0, CHORUS_CALL_KW,
          "gather with counts[q] elements from rank q (counts needed at the root only); recv=None "
          "makes a 1-D array at the root. Returns it at the root, None elsewhere. Keywords: "
          "timeout (seconds, this call only), algorithm (a name from `chorus bench --list-algos`), "
          "dtype (read the arrays as this chorus type, e.g. \"bfloat16\" for uint16). ")
      .def(
          "scatter_v",
          [](PyComm& c, const py::object& send, const py::object& counts, const py::object& recv,
             const py::object& root, const py::object& timeout, const py::object& algorithm,
             const py::object& dtype) {
            CallKw kw{timeout, algorithm, dtype, {}};
            const int r = kw.Root(root);
            return c.ScatterV(send, counts, recv, r, kw);
          },
          py::arg("send"), py::arg("counts") = py::none(), py::arg("recv") = py::none(),
          py::arg("root") = 0, CHORUS_CALL_KW,
          "scatter with counts[q] elements to rank q (send and counts read at the root only); recv "
          "is required. Returns recv. Keywords: timeout (seconds, this call only), algorithm (a "
          "name from `chorus bench --list-algos`), dtype (read the arrays as this chorus type, "
          "e.g. \"bfloat16\" for uint16). ")
      .def("reject_call", &PyComm::RejectCall, py::arg("collective"), py::arg("reason"),
           "Refuses this rank's next call, a `collective` (\"allreduce\", ...), as invalid "
           "arguments: raises InvalidArgumentError here, and on every rank that enters it.")
      .def("abort", &PyComm::Abort,
           "Fails the communicator on every rank with ABORTED; safe from any thread.")
      .def("health", &PyComm::Health,
           "None while usable, else the error the next call would raise (not raised).")
      .def("traffic", &PyComm::TrafficOf,
           "Payload bytes sent and received and calls completed, per collective and in total.")
      .def("reset_traffic", &PyComm::ResetTraffic, "Zeroes the traffic counters.")
      .def("close", &PyComm::Close,
           "Destroys the communicator now (garbage collection does it otherwise).");

  m.def("create_local_group", &CreateLocal, py::arg("n"),
        "n ranks as threads of this process (see chorus.create_local_group).");
  m.def("init", &Init, "This process's rank of a launched job (see chorus.init).");
}
