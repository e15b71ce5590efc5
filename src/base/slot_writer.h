// Copies into staging slots that another core reads next, with ordinary stores or with
// non-temporal ones, whichever has lately cost less.
//
// An ordinary store to a line that the reading core holds (it read the slot's last message)
// first takes the line back from that core's cache. When the two cores share a cache that
// costs little: a 256 KiB message goes into a slot at about 24 ns per KiB here, and the reader
// then finds it in the shared cache. But this host (a VM) spends stretches of a few seconds in
// a slow phase in which its two vCPUs no longer share one (the cross-core round trip grows from
// 0.03 to 0.16 us): then the same copy takes 400 ns per KiB, and a 2-rank 1 MiB
// reduce-scatter on shm ranks 240 us instead of 31. Non-temporal stores do not take the lines
// back (the reader's copies are dropped as the line goes to memory): 40-80 ns per KiB in
// both phases, and the reader then reads from memory, which in the fast phase makes the
// whole call twice as slow (66 us against 31) and in the slow one five times faster (47 us).
//
// So the writer times its large copies and streams while ordinary stores cost more than twice
// what streaming does; every 100 ms it copies one message the other way, to notice the phase
// turn. Only the sender decides (the reader reads the slot the same way), so ranks need not
// agree. docs/waiting.md, "The host's two speeds", has the measurements.
//
// Thread safety: one per rank, used by that rank's calls only.
#pragma once

#include <chrono>
#include <cstddef>

namespace chorus::internal {

// The choice itself, fed with measured costs: separate from the clock so tests can drive it.
class StoreChoice {
 public:
  enum Mode { kCached = 0, kStream = 1 };
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kProbeEvery{100};

  // The mode for a copy starting at `now`: the chosen one, or the other one when a probe is
  // due (a mode never measured is probed first).
  Mode Next(Clock::time_point now);
  // A copy in `mode` cost `ns_per_kib`. A cheaper cost is taken at once (a copy cannot run
  // faster than the memory lets it: the phase turned); a dearer one moves the estimate a
  // quarter of the way, at most to 4x (a copy the scheduler interrupted is not a phase).
  void Note(Mode mode, double ns_per_kib);
  Mode chosen() const { return chosen_; }
  // The estimate of `mode`'s cost, ns per KiB; 0 before it was measured.
  double cost(Mode mode) const { return cost_[mode]; }

 private:
  double cost_[2] = {0, 0};
  Mode chosen_ = kCached;
  Clock::time_point next_probe_{};
};

class SlotWriter {
 public:
  SlotWriter() = default;
  // Always `mode`, untimed (CommOptions::slot_stores other than kAuto).
  explicit SlotWriter(StoreChoice::Mode mode) : fixed_(true), fixed_mode_(mode) {}

  // Smaller copies are not timed (the clock would cost a tenth of one) and use ordinary stores.
  static constexpr size_t kTimedBytes = size_t{32} << 10;

  // memcpy(slot, src, bytes), with the stores the choice picks; the stores are complete (fenced)
  // on return, so the release store that posts the message is ordered after them.
  void Copy(void* slot, const void* src, size_t bytes);
  // True when a copy of `bytes` would now stream: a kernel that would write its result straight
  // into a slot writes it to its own buffer and Copy()s it instead.
  bool Streams(size_t bytes) const {
    return bytes >= kTimedBytes &&
           (fixed_ ? fixed_mode_ : choice_.chosen()) == StoreChoice::kStream;
  }
  const StoreChoice& choice() const { return choice_; }

 private:
  StoreChoice choice_;
  bool fixed_ = false;
  StoreChoice::Mode fixed_mode_ = StoreChoice::kCached;
};

}  // namespace chorus::internal
