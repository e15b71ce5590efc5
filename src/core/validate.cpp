// Argument checks (see validate.h).
#include "core/validate.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "algo/select.h"
#include "transport/control.h"

namespace chorus::internal {
namespace {

std::string Str(size_t v) { return std::to_string(v); }

// The most elements of one byte a buffer may hold: room for `size` chunks of it and for byte
// offsets into it.
constexpr size_t kMaxCount = std::numeric_limits<size_t>::max() / 2 / 4096;

class Checker {
 public:
  // The name is built only for an error: a valid call costs no string.
  explicit Checker(CollectiveKind kind) : kind_(kind) {}

  Status Fail(const std::string& what) const {
    return InvalidArgument(std::string(CollectiveKindName(kind_)) + ": " + what);
  }

  Status Buffer(const char* name, const void* data, size_t count, DataType dtype) const {
    return ValidateBuffer(CollectiveKindName(kind_), name, data, count, dtype);
  }

 private:
  CollectiveKind kind_;
};

}  // namespace

Status ValidateBuffer(std::string_view op, const char* name, const void* data, size_t count,
                      DataType dtype) {
  const auto fail = [&](const std::string& what) {
    return InvalidArgument(std::string(op) + ": " + name + what);
  };
  if (!IsValid(dtype)) {
    return fail(".dtype (" + std::to_string(static_cast<int>(dtype)) +
                ") is not a chorus::DataType");
  }
  if (data == nullptr && count > 0) {
    return fail(".data is null but " + std::string(name) + ".count is " + Str(count));
  }
  // Leave room for `size` chunks of this buffer and for byte offsets into it.
  if (count > kMaxCount / DataTypeSize(dtype)) {
    return fail(".count (" + Str(count) + ") is too large");
  }
  return Status::Ok();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

namespace {

Status CheckOverlap(const Checker& check, const CollectiveInfo& c, ConstBuffer send,
                    MutableBuffer recv, bool in_place) {
  if (in_place || !Overlap(send.data, send.bytes(), recv.data, recv.bytes())) return Status::Ok();
  if (c.in_place.empty()) {
    return check.Fail("send and recv overlap, and " + std::string(c.name) +
                      " has no in-place form");
  }
  return check.Fail("send and recv overlap but the call is not in place (in place means " +
                    std::string(c.in_place) + ")");
}

// The count relation of a collective with n-element blocks, and its in-place rule.
Status CheckCounts(const Checker& check, const CollectiveInfo& c, const CallArgs& used,
                   const CallShape& shape) {
  const ConstBuffer send = used.send;
  const MutableBuffer recv = used.recv;
  const size_t p = static_cast<size_t>(shape.size);
  const size_t elem = DataTypeSize(send.dtype);
  // On a rank other than the root a root-only buffer is not looked at: neither its count nor
  // where it lies.
  const bool root_only_ignored =
      c.rooted && shape.rank != used.root && (c.send_only_at_root || c.recv_only_at_root);
  const CallCounts want = CountsOf(c, send.count, recv.count, shape.size);
  const size_t send_blocks = SendBlocks(c.counts, shape.size);
  const size_t recv_blocks = RecvBlocks(c.counts, shape.size);
  if (send_blocks == p && recv_blocks == p && send.count % p != 0) {
    return check.Fail("send.count (" + Str(send.count) + ") is not a multiple of size (" + Str(p) +
                      ")");
  }
  if (!root_only_ignored && (want.send != send.count || want.recv != recv.count)) {
    // Name the buffer that breaks the relation against the one the block comes from.
    const bool send_wrong = want.send != send.count;
    const std::string wrong = send_wrong ? "send" : "recv";
    const std::string given = send_wrong ? "recv" : "send";
    const size_t wrong_blocks = send_wrong ? send_blocks : recv_blocks;
    const size_t given_blocks = send_wrong ? recv_blocks : send_blocks;
    return check.Fail(wrong + ".count (" + Str(send_wrong ? send.count : recv.count) +
                      ") != " + (wrong_blocks > given_blocks ? "size (" + Str(p) + ") * " : "") +
                      given + ".count (" + Str(send_wrong ? recv.count : send.count) + ")");
  }
  // In place: the same buffer where both hold as many blocks, else the small one is this
  // rank's block of the large one.
  const auto* send_at = static_cast<const std::byte*>(send.data);
  const auto* recv_at = static_cast<const std::byte*>(recv.data);
  const size_t own = static_cast<size_t>(shape.rank) * want.block * elem;
  const bool in_place = root_only_ignored || c.counts == Counts::kNone ||
                        (send_blocks == recv_blocks  ? recv_at == send_at
                         : send_blocks > recv_blocks ? recv_at == send_at + own
                                                     : send_at == recv_at + own);
  return CheckOverlap(check, c, send, recv, in_place);
}

// An all-to-all-v's displacements for one buffer (`side` is "send" or "recv"): p entries, each
// block inside the buffer and, when `apart`, no two nonzero blocks sharing an element.
Status CheckDispls(const Checker& check, const char* side, std::span<const size_t> counts,
                   std::span<const size_t> displs, size_t buffer_count, bool apart, size_t p) {
  // Built only for an error, as the Checker's messages.
  const auto name = [side] { return std::string(side) + "_displs"; };
  if (displs.size() != p) {
    return check.Fail(name() + " has " + Str(displs.size()) + " entries, not size (" + Str(p) +
                      ")");
  }
  if (displs.data() == nullptr) return check.Fail(name() + ".data() is null");
  bool ascending = true;  // the nonzero blocks in rank order, each after the one before
  size_t end = 0;
  for (size_t q = 0; q < p; ++q) {
    if (counts[q] == 0) continue;
    if (displs[q] > buffer_count || counts[q] > buffer_count - displs[q]) {
      return check.Fail(name() + "[" + Str(q) + "] (" + Str(displs[q]) + ") + " + side +
                        "_counts[" + Str(q) + "] (" + Str(counts[q]) + ") runs past " + side +
                        ".count (" + Str(buffer_count) + ")");
    }
    ascending = ascending && displs[q] >= end;
    end = displs[q] + counts[q];
  }
  if (!apart || ascending) return Status::Ok();
  // Out of order: sort the nonzero blocks by start (allocates, off the common path).
  std::vector<size_t> order;
  for (size_t q = 0; q < p; ++q) {
    if (counts[q] > 0) order.push_back(q);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return displs[a] != displs[b] ? displs[a] < displs[b] : a < b;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const size_t a = order[i - 1];
    const size_t b = order[i];
    if (displs[a] + counts[a] > displs[b]) {
      return check.Fail(std::string(side) + " blocks " + Str(a) + " [" + Str(displs[a]) + ", " +
                        Str(displs[a] + counts[a]) + ") and " + Str(b) + " [" + Str(displs[b]) +
                        ", " + Str(displs[b] + counts[b]) + ") overlap");
    }
  }
  return Status::Ok();
}

// The same for a v-variant: the arrays this rank uses have one entry per rank, and the
// buffers hold what they say.
Status CheckVariedCounts(const Checker& check, const CollectiveInfo& c, const CallArgs& call,
                         const CallArgs& used, const CallShape& shape) {
  const ConstBuffer send = used.send;
  const MutableBuffer recv = used.recv;
  const size_t p = static_cast<size_t>(shape.size);
  const size_t elem = DataTypeSize(send.dtype);
  const bool both = c.counts == Counts::kBothAreP;
  const bool send_is_p = both || c.counts == Counts::kSendIsP;
  const bool at_root = !c.rooted || shape.rank == call.root;
  const std::string send_name = both ? "send_counts" : "counts";
  const std::string recv_name = both ? "recv_counts" : "counts";
  const auto check_array = [&](const std::string& name, std::span<const size_t> v) -> Status {
    if (v.size() != p) {
      return check.Fail(name + " has " + Str(v.size()) + " entries, not size (" + Str(p) + ")");
    }
    if (v.data() == nullptr) return check.Fail(name + ".data() is null");
    size_t sum = 0;
    for (size_t q = 0; q < p; ++q) {
      sum += std::min(v[q], kMaxCount);  // no wrap-around: each term below kMaxCount
      if (v[q] > kMaxCount || sum > kMaxCount) {
        return check.Fail(name + "[" + Str(q) + "] (" + Str(v[q]) + ") makes the sum too large");
      }
    }
    return Status::Ok();
  };
  if (at_root && send_is_p) CHORUS_RETURN_IF_ERROR(check_array(send_name, call.send_counts));
  if (at_root && (both || !send_is_p)) {
    CHORUS_RETURN_IF_ERROR(check_array(recv_name, call.recv_counts));
  }
  if (!at_root) return Status::Ok();  // its one buffer may hold any count; the root checks it
  const size_t own = static_cast<size_t>(shape.rank);
  if (both && call.send_counts[own] != call.recv_counts[own]) {
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict) on a chain of literal + string.
    std::string text = "send_counts[";
    text += Str(own);
    text += "] (";
    text += Str(call.send_counts[own]);
    text += ") != recv_counts[";
    text += Str(own);
    text += "] (";
    text += Str(call.recv_counts[own]);
    text += "): what a rank sends itself is what it gets";
    return check.Fail(text);
  }
  const CallCounts want = VariedCountsOf(c, call, shape.rank);
  const auto relation = [&](bool is_p, const std::string& name) {
    return is_p ? "the sum of " + name : name + "[" + Str(own) + "]";
  };
  const bool recv_is_p = both || !send_is_p;
  if (!call.send_displs.empty()) {
    CHORUS_RETURN_IF_ERROR(CheckDispls(check, "send", call.send_counts, call.send_displs,
                                       send.count, /*apart=*/false, p));
  } else if (want.send != send.count) {
    return check.Fail("send.count (" + Str(send.count) + ") != " +
                      relation(send_is_p, send_is_p ? send_name : recv_name) + " (" +
                      Str(want.send) + ")");
  }
  if (!call.recv_displs.empty()) {
    CHORUS_RETURN_IF_ERROR(CheckDispls(check, "recv", call.recv_counts, call.recv_displs,
                                       recv.count, /*apart=*/true, p));
  } else if (want.recv != recv.count) {
    return check.Fail("recv.count (" + Str(recv.count) + ") != " +
                      relation(recv_is_p, recv_is_p ? recv_name : send_name) + " (" +
                      Str(want.recv) + ")");
  }
  const auto* send_at = static_cast<const std::byte*>(send.data);
  const auto* recv_at = static_cast<const std::byte*>(recv.data);
  bool in_place = false;
  if (!both) {
    const size_t offset = elem * BlockOffset(send_is_p ? call.send_counts : call.recv_counts,
                                             shape.rank);
    in_place = send_is_p ? recv_at == send_at + offset : send_at == recv_at + offset;
  }
  return CheckOverlap(check, c, send, recv, in_place);
}

}  // namespace

CallArgs Normalized(const CallArgs& call, int rank) {
  const CollectiveInfo& c = Collective(call.kind);
  CallArgs out = call;
  if (c.counts == Counts::kNone) {
    out.send = {nullptr, 0, DataType::kUint8};
    out.recv = {nullptr, 0, DataType::kUint8};
  }
  if (!c.rooted || rank == call.root) return out;
  if (c.send_only_at_root) out.send = out.recv;
  if (c.recv_only_at_root) {
    out.recv = {const_cast<void*>(out.send.data), out.send.count, out.send.dtype};
  }
  return out;
}

Status ValidateCall(const CallShape& shape, const CallArgs& call, const CallOptions& options) {
  if (!IsCollective(static_cast<unsigned>(call.kind))) {
    return InvalidArgument("collective kind " + std::to_string(static_cast<int>(call.kind)) +
                           " is not a chorus::CollectiveKind");
  }
  const CollectiveInfo& c = Collective(call.kind);
  const Checker check(call.kind);
  if (c.rooted && (call.root < 0 || call.root >= shape.size)) {
    return check.Fail("root (" + std::to_string(call.root) + ") must be in [0, size (" +
                      std::to_string(shape.size) + "))");
  }
  // What this rank uses: on a non-root rank a root-only buffer stands for the other one, so
  // the buffer the caller passed is checked under its own name first.
  if (c.rooted && shape.rank != call.root) {
    if (c.send_only_at_root) {
      CHORUS_RETURN_IF_ERROR(
          check.Buffer("recv", call.recv.data, call.recv.count, call.recv.dtype));
    }
    if (c.recv_only_at_root) {
      CHORUS_RETURN_IF_ERROR(
          check.Buffer("send", call.send.data, call.send.count, call.send.dtype));
    }
  }
  if ((!call.send_displs.empty() || !call.recv_displs.empty()) &&
      call.kind != CollectiveKind::kAllToAllV) {
    return check.Fail("displacements are for alltoallv only");
  }
  const CallArgs used = Normalized(call, shape.rank);
  const ConstBuffer send = used.send;
  const MutableBuffer recv = used.recv;
  CHORUS_RETURN_IF_ERROR(check.Buffer("send", send.data, send.count, send.dtype));
  CHORUS_RETURN_IF_ERROR(check.Buffer("recv", recv.data, recv.count, recv.dtype));
  if (recv.dtype != send.dtype) {
    return check.Fail("recv.dtype (" + std::string(DataTypeName(recv.dtype)) + ") != send.dtype (" +
                      std::string(DataTypeName(send.dtype)) + ")");
  }
  if (c.reduces && !IsValid(call.op)) {
    return check.Fail("op (" + std::to_string(static_cast<int>(call.op)) +
                      ") is not a chorus::ReduceOp");
  }
  const size_t elem = DataTypeSize(send.dtype);
  const Status counts =
      c.varied ? CheckVariedCounts(check, c, call, used, shape) : CheckCounts(check, c, used, shape);
  CHORUS_RETURN_IF_ERROR(counts);
  if (options.segment_bytes) {
    const size_t seg = *options.segment_bytes;
    if (seg < elem || seg > shape.max_segment_bytes) {
      return check.Fail("options.segment_bytes (" + Str(seg) + ") must be between one " +
                        std::string(DataTypeName(send.dtype)) + " element (" + Str(elem) +
                        ") and CommOptions::segment_bytes (" + Str(shape.max_segment_bytes) + ")");
    }
  }
  if (options.timeout && options.timeout->count() <= 0) {
    return check.Fail("options.timeout (" + std::to_string(options.timeout->count()) +
                      " ms) must be positive");
  }
  return Status::Ok();
}

Status ValidateCommOptions(const CommOptions& options, int size, const char* op) {
  const std::string prefix = std::string(op) + ": ";
  if (size < 1 || size > 1024) {
    return InvalidArgument(prefix + (std::string(op) == "Create" ? "options.size (" : "n (") +
                           std::to_string(size) + ") must be in [1, 1024]");
  }
  if (options.timeout.count() <= 0) {
    return InvalidArgument(prefix + "options.timeout (" + std::to_string(options.timeout.count()) +
                           " ms) must be positive");
  }
  if (options.segment_bytes < 64 || options.segment_bytes > (size_t{1} << 30)) {
    return InvalidArgument(prefix + "options.segment_bytes (" + Str(options.segment_bytes) +
                           ") must be in [64, 1 GiB]");
  }
  // The fused primitives hold one incoming segment while they wait for an outgoing slot, so a
  // ring needs two slots per link to keep moving.
  if (options.pipeline_depth < 2 || options.pipeline_depth > kMaxPipelineDepth) {
    return InvalidArgument(prefix + "options.pipeline_depth (" +
                           std::to_string(options.pipeline_depth) + ") must be in [2, " +
                           std::to_string(kMaxPipelineDepth) + "]");
  }
  if (options.wait != WaitMode::kAuto && options.wait != WaitMode::kSleep &&
      options.wait != WaitMode::kSleepChecked) {
    return InvalidArgument(prefix + "options.wait (" +
                           std::to_string(static_cast<int>(options.wait)) +
                           ") is not a chorus::WaitMode");
  }
  if (options.slot_stores != SlotStores::kAuto && options.slot_stores != SlotStores::kCached &&
      options.slot_stores != SlotStores::kStream) {
    return InvalidArgument(prefix + "options.slot_stores (" +
                           std::to_string(static_cast<int>(options.slot_stores)) +
                           ") is not a chorus::SlotStores");
  }
  if (options.wire != WireMode::kAuthenticate && options.wire != WireMode::kIntegrity &&
      options.wire != WireMode::kEncrypt) {
    return InvalidArgument(prefix + "options.wire (" +
                           std::to_string(static_cast<int>(options.wire)) +
                           ") is not a chorus::WireMode");
  }
  if (!options.algorithm.empty()) {
    std::vector<std::string_view> known;
    for (const AlgorithmInfo& info : Algorithms()) {
      if (info.name == options.algorithm) return Status::Ok();
      if (std::find(known.begin(), known.end(), info.name) == known.end()) {
        known.push_back(info.name);
      }
    }
    std::string names;
    for (std::string_view name : known) names += (names.empty() ? "" : ", ") + std::string(name);
    return InvalidArgument(prefix + "options.algorithm (\"" + options.algorithm +
                           "\") is not one of: " + names);
  }
  return Status::Ok();
}

}  // namespace chorus::internal
