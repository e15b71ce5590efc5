// Writes of large messages that another core reads next (into staging slots, or a direct
// all-reduce's chunk), with ordinary stores or with non-temporal ones, whichever has lately
// cost less.
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
// So the writer times its large writes and streams while ordinary stores cost more than twice
// what streaming does; every 100 ms it writes one message the other way, to notice the phase
// turn. Only the sender decides (the reader reads the slot the same way), so ranks need not
// agree. docs/waiting.md, "Stores into a slot", has the measurements.
//
// Thread safety: one per rank, used by that rank's calls only.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "base/stream_copy.h"

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
  // quarter of the way towards it, counting it at most 4x the estimate, so 1.75x per copy at
  // most (a copy the scheduler interrupted is not a phase).
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
  // Smaller messages use ordinary stores, untimed. Below it the sender's cost does not tell the
  // phases apart: a 32 KiB message costs the sender 150-190 ns per KiB with ordinary stores
  // even while the cores share a cache (its lines are still in the reader's), and 45-58
  // streamed, yet the call is faster with ordinary stores, the reader finding the message in the
  // shared cache (2-rank 64 KiB all-gather on shm: 5.4 us, streamed 5.7).
  static constexpr size_t kMinBytes = size_t{256} << 10;
  // Produce() writes at most this much at once, a block of a result of kMinBytes or more (the
  // reader holds the whole result, so each block's cost tells the phases apart as a large
  // copy's does); blocks under half of it are not timed.
  static constexpr size_t kBlockBytes = size_t{32} << 10;
  // One large write in this many reads the clock (and may probe the other mode): the clock
  // costs about 25 ns, a few percent of a 32 KiB block.
  static constexpr unsigned kTimeEvery = 4;

  SlotWriter();
  // Always `mode`, untimed (CommOptions::slot_stores other than kAuto).
  explicit SlotWriter(StoreChoice::Mode mode);

  // memcpy(slot, src, bytes), with the stores the choice picks; the stores are complete (fenced)
  // on return, so the release store that posts the message is ordered after them.
  void Copy(void* slot, const void* src, size_t bytes);
  // Writes `bytes` (at most kBlockBytes) of a result of kMinBytes or more that a peer reads next
  // to `out`: `write(dst)` produces them at dst, which is `out` itself with ordinary stores, or
  // the writer's own block, then streamed to `out`. Fenced as Copy is.
  template <typename Write>
  void Produce(void* out, size_t bytes, Write&& write) {
    const auto run = [&](StoreChoice::Mode mode) {
      if (mode == StoreChoice::kStream) {
        write(static_cast<void*>(block_.get()));
        StreamCopy(out, block_.get(), bytes);
      } else {
        write(out);
      }
    };
    if (bytes > kBlockBytes) {  // not a block: no room for it
      write(out);
      return;
    }
    if (bytes < kBlockBytes / 2) {  // a segment's tail: its time would be mostly the clock's
      run(Current());
      return;
    }
    Timed(bytes, /*large=*/true, run);
  }
  // True when a write of `bytes` would now stream: a kernel that would write its result
  // straight into a slot writes it to its own buffer and Copy()s it instead.
  bool Streams(size_t bytes) const {
    return bytes >= kMinBytes && Current() == StoreChoice::kStream;
  }
  const StoreChoice& choice() const { return choice_; }

 private:
  struct alignas(64) Line {
    unsigned char bytes[64];
  };
  // The stores an untimed large write uses.
  StoreChoice::Mode Current() const { return fixed_ ? fixed_mode_ : choice_.chosen(); }
  // Runs run(mode) for a write of `bytes` (part of a message of kMinBytes or more when `large`),
  // timing it when one is due, and notes the cost.
  template <typename Run>
  void Timed(size_t bytes, bool large, const Run& run) {
    if (!large) {
      run(StoreChoice::kCached);
      return;
    }
    if (fixed_ || ++writes_ % kTimeEvery != 0) {
      run(Current());
      return;
    }
    const StoreChoice::Clock::time_point start = StoreChoice::Clock::now();
    const StoreChoice::Mode mode = choice_.Next(start);
    run(mode);
    Note(mode, start, bytes);
  }
  void Note(StoreChoice::Mode mode, StoreChoice::Clock::time_point start, size_t bytes);

  StoreChoice choice_;
  bool fixed_ = false;
  StoreChoice::Mode fixed_mode_ = StoreChoice::kCached;
  unsigned writes_ = 0;
  std::unique_ptr<Line[]> block_;  // kBlockBytes, touched once at construction
};

}  // namespace chorus::internal
