// Security log lines that a flood cannot turn into a flood of lines.
//
// A dropped stranger is logged at once the first time its reason comes from its host in a
// window; later ones in the same window are only counted, and when the window ends one line
// sums them up:
//
//   chorus tcp rank 3: dropped connection from 127.0.0.1:40312: wrong secret
//   chorus tcp rank 3: dropped 1,234 more connections from 127.0.0.1 in the last 10 s: wrong secret
//
//   LogLimiter log("chorus tcp rank 3");
//   log.Note("127.0.0.1:40312", "wrong secret");   // from the event loop
//   log.Flush(Clock::now());                       // now and then (NextFlush() says when)
//
// Thread safety: one thread (an event loop) uses a LogLimiter.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "base/wait.h"

namespace chorus::internal {

class LogLimiter {
 public:
  explicit LogLimiter(std::string prefix, std::chrono::seconds window = std::chrono::seconds(10))
      : prefix_(std::move(prefix)), window_(window) {}
  // What was only counted so far is written: a closing store or rank leaves no drop unsaid.
  ~LogLimiter() { Flush(Clock::time_point::max()); }
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // A connection from `peer` ("host:port") was dropped for `reason`.
  void Note(const std::string& peer, const std::string& reason, const char* what = "connection");
  // Writes the summary of every window that has ended by `now`.
  void Flush(Clock::time_point now);
  // When the next window ends, if one is open.
  std::optional<Clock::time_point> NextFlush() const;

  // Lines written so far (for tests).
  uint64_t lines() const { return lines_; }

 private:
  struct Window {
    Clock::time_point ends;
    uint64_t more = 0;  // noted after the first, not yet written
    std::string what;
  };
  void Write(const std::string& line);

  const std::string prefix_;
  const std::chrono::seconds window_;
  std::map<std::pair<std::string, std::string>, Window> windows_;  // (host, reason)
  uint64_t lines_ = 0;
};

// "1,234".
std::string WithCommas(uint64_t n);

}  // namespace chorus::internal
