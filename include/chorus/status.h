// chorus/status.h: how every chorus call reports success or failure.
//
// Each API call returns a [[nodiscard]] Status (or Result<T> when it also produces a value).
// The message names the operation and the argument, e.g.
//   "allreduce: recv.count (10) != send.count (12)".
// The code tells the caller what to do next; see the comments on StatusCode.
//
//   chorus::Status s = comm.AllReduce(send, recv, chorus::ReduceOp::kSum);
//   if (!s.ok()) std::cerr << s << "\n";
//
// Thread safety: Status and Result are values; copy them freely.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "chorus/export.h"

namespace chorus {
CHORUS_API_BEGIN

// Whether a communicator is still usable follows from the code alone: after kInvalidArgument it
// is; after any other failure of a call it is failed, and every later call returns that failure
// (CommunicatorUsableAfter below says the same in code).
enum class StatusCode : uint8_t {
  kOk = 0,
  // A call's arguments are wrong: this rank rejected them before sending anything, or another
  // rank rejected its own (the message names that rank and its reason). Every rank that
  // entered the call returns this code and abandons the call; its output buffers hold nothing
  // meaningful. The communicator stays usable: fix the call. Also returned by Create and
  // CreateLocalGroup for bad options, and by stores for bad keys or values.
  kInvalidArgument,
  // A wait ran past its deadline. The communicator is failed: recreate it. The message names
  // the rank that is behind (absent from the call, stopped, or furthest back).
  kDeadlineExceeded,
  // A peer is gone (exited, crashed, unreachable). The communicator is failed: recreate it
  // without that peer.
  kUnavailable,
  // Abort() was called (on this rank or another). The communicator is failed: recreate it.
  kAborted,
  // The ranks disagree: on a call (collective, count, type, op, algorithm, or the order of
  // calls; the message names both sides), or at Create on their options or the job they belong
  // to. A bug in the program or its launch. The communicator is failed: fix the calls and
  // recreate it.
  kFailedPrecondition,
  // The request is valid but this build or transport does not support it. No communicator
  // call returns it today; one that did would leave the communicator failed, as below.
  kUnimplemented,
  // A bug in chorus (for example a wait that became ready without its doorbell ringing, under
  // WaitMode::kSleepChecked): please report it with the message. The communicator is failed.
  kInternal,
};

// Whether a communicator whose call returned `code` can still be used: true after kOk and
// kInvalidArgument, false after every other code (the communicator is failed; recreate it).
constexpr bool CommunicatorUsableAfter(StatusCode code) {
  return code == StatusCode::kOk || code == StatusCode::kInvalidArgument;
}

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DEADLINE_EXCEEDED: allreduce: ..." or "OK".
  std::string ToString() const;

  // Marks a Status as deliberately dropped.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit on purpose
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // Precondition: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

CHORUS_API_END
}  // namespace chorus

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define CHORUS_RETURN_IF_ERROR(expr) \
  CHORUS_RETURN_IF_ERROR_IMPL_(CHORUS_CONCAT_(chorus_status_, __COUNTER__), expr)
#define CHORUS_RETURN_IF_ERROR_IMPL_(var, expr) \
  do {                                          \
    ::chorus::Status var = (expr);              \
    if (!var.ok()) return var;                  \
  } while (0)
#define CHORUS_CONCAT_(a, b) CHORUS_CONCAT_INNER_(a, b)
#define CHORUS_CONCAT_INNER_(a, b) a##b
