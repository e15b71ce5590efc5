// Waiting without burning the core a peer needs, and never past a deadline.
//
// Each rank owns a Doorbell: a 32-bit futex word that anyone bumps after changing something the
// rank may be waiting for (a message posted to it, a slot released to it, a group failure).
// A wait polls its condition in three phases (ARCHITECTURE.md section 6, measured here):
//   1. a short `pause` spin, only when ranks fit on their cores;
//   2. a sched_yield loop, which hands the core to a runnable peer on the same core;
//   3. a futex sleep on the doorbell, woken by the next Ring().
// Phases are bounded by time, not by iteration count. Deadlines are absolute steady_clock times.
//
// Thread safety: Ring() from any thread (or process, when the word lives in shared memory);
// Sleep() from the owning rank only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus::internal {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// now + timeout, saturating: a timeout of years means "no deadline", not an overflow.
inline Deadline DeadlineAfter(std::chrono::milliseconds timeout) {
  const Clock::time_point now = Clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now)) {
    return Deadline::max();
  }
  return now + timeout;
}

class Doorbell {
 public:
  // Wakes the owner if it sleeps. Call after publishing the change it should see.
  void Ring() {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) Wake();
  }

  // One sleep phase: announce the sleep, re-check `ready`, then sleep until a Ring() or
  // `until`. Returns ready() as last seen; the caller loops.
  template <typename Ready>
  bool Sleep(Ready&& ready, Deadline until) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = seq_.load(std::memory_order_seq_cst);
    bool ok = ready();
    if (!ok) FutexWait(seen, until);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return ok || ready();
  }

 private:
  void Wake();
  void FutexWait(uint32_t seen, Deadline until);

  alignas(64) std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> sleepers_{0};
};

// What is left of `deadline`, at least 1 ms (for APIs that take a timeout).
inline std::chrono::milliseconds Remaining(Deadline deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// How long to spin and to yield before sleeping.
struct WaitPolicy {
  std::chrono::nanoseconds spin{0};
  std::chrono::nanoseconds yield{0};

  // Spin only when every rank has a core of its own; yield longer when they share.
  static WaitPolicy For(int ranks_on_this_host);
  // For transports that progress only when polled: yield between polls, never sleep.
  static WaitPolicy PollOnly() {
    return {std::chrono::nanoseconds(0), std::chrono::hours(24 * 365)};
  }
};

// Number of CPUs this process may run on.
int UsableCpus();

void CpuRelax();
void YieldCpu();

// The outcome of a wait that did not see its condition.
enum class WaitResult { kReady, kTimedOut, kInterrupted };

// Waits until ready() is true, `interrupted()` is true, or `deadline` passes. Both callables are
// polled; `interrupted` should be cheap (an atomic load).
template <typename Ready, typename Interrupted>
WaitResult WaitUntil(Ready&& ready, Interrupted&& interrupted, Doorbell& bell,
                     const WaitPolicy& policy, Deadline deadline) {
  if (ready()) return WaitResult::kReady;
  const Clock::time_point start = Clock::now();
  const Clock::time_point spin_end = start + policy.spin;
  const Clock::time_point yield_end = spin_end + policy.yield;
  bool spinning = policy.spin.count() > 0;
  for (uint32_t i = 0;; ++i) {
    if (ready()) return WaitResult::kReady;
    if (spinning && (i & 15) != 0) {  // read the clock once every 16 spins
      CpuRelax();
      continue;
    }
    if (interrupted()) return WaitResult::kInterrupted;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return ready() ? WaitResult::kReady : WaitResult::kTimedOut;
    if (now < spin_end) {
      CpuRelax();
      continue;
    }
    spinning = false;
    if (now < yield_end) {
      YieldCpu();
    } else {
      // Sleep in slices so that conditions nobody rings for (a dead process) are re-polled.
      const Deadline slice = std::min(deadline, now + std::chrono::milliseconds(50));
      if (bell.Sleep(ready, slice)) return WaitResult::kReady;
    }
  }
}

}  // namespace chorus::internal
