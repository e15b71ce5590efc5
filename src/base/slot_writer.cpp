// Ordinary or non-temporal stores into staging slots (see slot_writer.h).
#include "base/slot_writer.h"

#include <algorithm>

namespace chorus::internal {

namespace {
// Stream while ordinary stores cost more than this times streaming's (the reader pays for
// streamed messages too, from memory: the sender's cost does not show it), and return to
// ordinary stores below the lower ratio, so that costs near the line do not flip the mode on
// every copy.
constexpr double kStreamAbove = 2.0;
constexpr double kCachedBelow = 1.5;
}  // namespace

StoreChoice::Mode StoreChoice::Next(Clock::time_point now) {
  if (now < next_probe_) return chosen_;
  next_probe_ = now + kProbeEvery;
  return chosen_ == kCached ? kStream : kCached;
}

void StoreChoice::Note(Mode mode, double ns_per_kib) {
  double& cost = cost_[mode];
  if (cost == 0 || ns_per_kib <= cost) {
    cost = ns_per_kib;
  } else {
    cost += (std::min(ns_per_kib, 4 * cost) - cost) / 4;
  }
  if (cost_[kCached] == 0 || cost_[kStream] == 0) return;
  const double ratio = cost_[kCached] / cost_[kStream];
  if (chosen_ == kCached && ratio > kStreamAbove) chosen_ = kStream;
  if (chosen_ == kStream && ratio < kCachedBelow) chosen_ = kCached;
}

SlotWriter::SlotWriter() : block_(std::make_unique<Line[]>(kBlockBytes / sizeof(Line))) {}

SlotWriter::SlotWriter(StoreChoice::Mode mode)
    : fixed_(true),
      fixed_mode_(mode),
      block_(std::make_unique<Line[]>(kBlockBytes / sizeof(Line))) {}

void SlotWriter::Copy(void* slot, const void* src, size_t bytes) {
  Timed(bytes, bytes >= kMinBytes, [&](StoreChoice::Mode mode) {
    if (mode == StoreChoice::kStream) {
      StreamCopy(slot, src, bytes);
    } else {
      CopyBytes(slot, src, bytes);
    }
  });
}

void SlotWriter::Note(StoreChoice::Mode mode, StoreChoice::Clock::time_point start, size_t bytes) {
  const double ns =
      std::chrono::duration<double, std::nano>(StoreChoice::Clock::now() - start).count();
  choice_.Note(mode, ns * 1024 / static_cast<double>(bytes));
}

}  // namespace chorus::internal
