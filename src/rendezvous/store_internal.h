// Pieces every store shares: argument checks, deadlines, the wording of errors, the integer
// values behind Add, an owning file descriptor, and the factories OpenStore dispatches to.
//
// Keeping the checks and the messages here is what makes the stores interchangeable: the same
// bad call fails with the same code on every store, and a timed-out wait always reads
//   "store <address>: waited 30 s for keys rank/2, rank/3"
// naming only the keys that are still missing.
//
// Thread safety: free functions without shared state.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/errno_text.h"
#include "base/unique_fd.h"
#include "base/wait.h"
#include "chorus/store.h"

namespace chorus::internal {

using StoreClock = std::chrono::steady_clock;
using StoreDeadline = StoreClock::time_point;

// DeadlineAfter (now + timeout, saturating) is base/wait.h's: one definition for the stores and
// the communicator, since a file that includes both headers cannot have two.

// Whole milliseconds left until `deadline`, rounded up so that a poll never wakes early; 0 when
// it has passed.
inline int64_t MillisecondsLeft(StoreDeadline deadline) {
  const auto left = deadline - StoreClock::now();
  if (left <= StoreClock::duration::zero()) return 0;
  return std::chrono::ceil<std::chrono::milliseconds>(left).count();
}

// "300 ms", "30 s", "1.5 s".
inline std::string FormatWaited(std::chrono::milliseconds waited) {
  const int64_t ms = waited.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string frac = std::to_string(1000 + ms % 1000).substr(1);  // always three digits
    while (frac.back() == '0') frac.pop_back();
    s += "." + frac;
  }
  return s + " s";
}

// "key a" or "keys a, b, c".
inline std::string NameKeys(const std::vector<std::string>& keys) {
  std::string s = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size(); ++i) s += (i == 0 ? "" : ", ") + keys[i];
  return s;
}

// Prefixes a non-OK status with the store it came from: "store file:///x: <message>".
inline Status InStore(const std::string& address, const Status& status) {
  if (status.ok()) return status;
  return Status(status.code(), "store " + address + ": " + status.message());
}

inline Status WaitTimedOut(const std::string& address, std::chrono::milliseconds timeout,
                           const std::vector<std::string>& missing) {
  return DeadlineExceeded("store " + address + ": waited " + FormatWaited(timeout) + " for " +
                          NameKeys(missing));
}

// Argument checks, worded "<op>: ..."; callers wrap them with InStore.
inline Status CheckKey(std::string_view op, const std::string& key) {
  if (key.empty()) return InvalidArgument(std::string(op) + ": empty key");
  if (key.size() > kStoreMaxKeyBytes) {
    return InvalidArgument(std::string(op) + ": key of " + std::to_string(key.size()) +
                           " bytes exceeds the limit of " + std::to_string(kStoreMaxKeyBytes) +
                           " (key starts with \"" + key.substr(0, 32) + "\")");
  }
  return Status::Ok();
}

inline Status CheckValue(const std::string& key, const std::string& value) {
  if (value.size() > kStoreMaxValueBytes) {
    return InvalidArgument("set: value of key " + key + " has " + std::to_string(value.size()) +
                           " bytes, more than the limit of " + std::to_string(kStoreMaxValueBytes));
  }
  return Status::Ok();
}

inline Status CheckTimeout(std::string_view op, std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) {
    return InvalidArgument(std::string(op) + ": negative timeout (" +
                           std::to_string(timeout.count()) + " ms)");
  }
  return Status::Ok();
}

inline Status CheckKeys(std::string_view op, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) CHORUS_RETURN_IF_ERROR(CheckKey(op, key));
  return Status::Ok();
}

// Add's arithmetic, shared so that every store parses and overflows alike. Values are decimal
// text ("42", "-7"), so Get on a counter returns something readable.
inline Result<int64_t> ApplyAdd(const std::string& key, const std::string* current, int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (current->empty() || ec != std::errc() || ptr != end) {
      return InvalidArgument("add to key " + key + ": its value (\"" + current->substr(0, 32) +
                             "\") is not a decimal integer");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return InvalidArgument("add to key " + key + ": " + std::to_string(value) + " + " +
                           std::to_string(delta) + " overflows int64");
  }
  return sum;
}

// The factories behind OpenStore. `directory` is absolute; `host` is a name or an address
// literal without brackets.
Result<std::shared_ptr<Store>> OpenFileStore(const std::string& directory);
Result<std::shared_ptr<Store>> OpenTcpStore(const std::string& host, uint16_t port,
                                            const StoreOptions& options);

// "tcp://127.0.0.1:29500", "tcp://[::1]:29500".
inline std::string TcpUrl(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "tcp://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace chorus::internal
