// Rate-limited security log lines (see log_limit.h).
#include "base/log_limit.h"

#include <cstdio>

namespace chorus::internal {

std::string WithCommas(uint64_t n) {
  // Appended left to right: GCC 12 at -O3 warns -Wrestrict (a false positive) on insert().
  const std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void LogLimiter::Note(const std::string& peer, const std::string& reason, const char* what) {
  const Clock::time_point now = Clock::now();
  Flush(now);
  const std::string host = peer.substr(0, peer.rfind(':'));
  auto [it, fresh] = windows_.try_emplace({host, reason});
  if (fresh) {
    it->second.ends = now + window_;
    it->second.what = what;
    Write("dropped " + std::string(what) + " from " + peer + ": " + reason);
    return;
  }
  ++it->second.more;
}

void LogLimiter::Flush(Clock::time_point now) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (it->second.ends > now) {
      ++it;
      continue;
    }
    if (it->second.more > 0) {
      Write("dropped " + WithCommas(it->second.more) + " more " + it->second.what + "s from " +
            it->first.first + " in the last " + std::to_string(window_.count()) +
            " s: " + it->first.second);
    }
    it = windows_.erase(it);
  }
}

std::optional<Clock::time_point> LogLimiter::NextFlush() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, w] : windows_) {
    if (w.more > 0 && (!next || w.ends < *next)) next = w.ends;
  }
  return next;
}

void LogLimiter::Write(const std::string& line) {
  // One fprintf per line, so lines from several loops in one process do not interleave.
  std::fprintf(stderr, "%s: %s\n", prefix_.c_str(), line.c_str());
  ++lines_;
}

}  // namespace chorus::internal
