// Argument checks (see validate.h).
#include "core/validate.h"

#include <cstdint>
#include <limits>
#include <string>

#include "transport/control.h"

namespace chorus::internal {
namespace {

std::string Str(size_t v) { return std::to_string(v); }

class Checker {
 public:
  explicit Checker(CollectiveKind kind) : op_(CollectiveKindName(kind)) {}

  Status Fail(const std::string& what) const { return InvalidArgument(op_ + ": " + what); }

  Status Buffer(const char* name, const void* data, size_t count, DataType dtype) const {
    if (!IsValid(dtype)) {
      return Fail(std::string(name) + ".dtype (" + std::to_string(static_cast<int>(dtype)) +
                  ") is not a chorus::DataType");
    }
    if (data == nullptr && count > 0) {
      return Fail(std::string(name) + ".data is null but " + name + ".count is " + Str(count));
    }
    // Leave room for `size` chunks of this buffer and for byte offsets into it.
    if (count > std::numeric_limits<size_t>::max() / 2 / 4096 / DataTypeSize(dtype)) {
      return Fail(std::string(name) + ".count (" + Str(count) + ") is too large");
    }
    return Status::Ok();
  }

 private:
  std::string op_;
};

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

Status ValidateCall(const CallShape& shape, ConstBuffer send, MutableBuffer recv, ReduceOp op,
                    const CallOptions& options) {
  const Checker check(shape.kind);
  CHORUS_RETURN_IF_ERROR(check.Buffer("send", send.data, send.count, send.dtype));
  CHORUS_RETURN_IF_ERROR(check.Buffer("recv", recv.data, recv.count, recv.dtype));
  if (recv.dtype != send.dtype) {
    return check.Fail("recv.dtype (" + std::string(DataTypeName(recv.dtype)) + ") != send.dtype (" +
                      std::string(DataTypeName(send.dtype)) + ")");
  }
  if (shape.kind != CollectiveKind::kAllGather && !IsValid(op)) {
    return check.Fail("op (" + std::to_string(static_cast<int>(op)) +
                      ") is not a chorus::ReduceOp");
  }
  const size_t p = static_cast<size_t>(shape.size);
  const size_t elem = DataTypeSize(send.dtype);
  // The small buffer's position inside the large one when the call is in place.
  const std::byte* in_place_at = nullptr;
  switch (shape.kind) {
    case CollectiveKind::kAllReduce:
      if (recv.count != send.count) {
        return check.Fail("recv.count (" + Str(recv.count) + ") != send.count (" + Str(send.count) +
                          ")");
      }
      in_place_at = static_cast<const std::byte*>(send.data);
      break;
    case CollectiveKind::kReduceScatter:
      if (send.count != p * recv.count) {
        return check.Fail("send.count (" + Str(send.count) + ") != size (" + Str(p) +
                          ") * recv.count (" + Str(recv.count) + ")");
      }
      in_place_at = static_cast<const std::byte*>(send.data) + shape.rank * recv.count * elem;
      break;
    case CollectiveKind::kAllGather:
      if (recv.count != p * send.count) {
        return check.Fail("recv.count (" + Str(recv.count) + ") != size (" + Str(p) +
                          ") * send.count (" + Str(send.count) + ")");
      }
      in_place_at = static_cast<const std::byte*>(recv.data) + shape.rank * send.count * elem;
      break;
  }
  const bool in_place = shape.kind == CollectiveKind::kAllGather
                            ? send.data == in_place_at
                            : static_cast<const std::byte*>(recv.data) == in_place_at;
  if (!in_place && Overlap(send.data, send.bytes(), recv.data, recv.bytes())) {
    return check.Fail("send and recv overlap but the call is not in place (in place means " +
                      std::string(shape.kind == CollectiveKind::kAllReduce
                                      ? "recv.data == send.data"
                                  : shape.kind == CollectiveKind::kAllGather
                                      ? "send.data == recv.data + rank * send.count"
                                      : "recv.data == send.data + rank * recv.count") +
                      ")");
  }
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
  return Status::Ok();
}

}  // namespace chorus::internal
