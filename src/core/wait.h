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
// A Waiter runs the waits of one rank. Two things it learns keep a small call cheap:
//   - The spin is earned: a spin that ran out before the condition came is halved, one that
//     caught it is doubled (up to the policy's). Ranks that fit on the cores can still land on
//     one core (the scheduler places woken threads next to their waker, or other work takes the
//     other core); then every spin only delays the peer: a 32-byte call took 7-10 us instead
//     of 0.4 (3.8 us with the spin earned). While the spin is off, one wait in kProbeEvery
//     spins briefly to notice that the peer has a core of its own again.
//   - The clock is read only when a wait has to go on: a call's deadline is fixed by its first
//     wait that reads the clock (clock_gettime costs 25-60 ns in this VM, as much as a
//     cache-line hop), and a spin polls kFirstPolls times before its first clock read.
//
// Thread safety: Ring() from any thread (or process, when the word lives in shared memory);
// Sleep() from the owning rank only; a Waiter belongs to one rank's thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus::internal {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// now + timeout, saturating: a timeout of years means "no deadline", not an overflow.
inline Deadline DeadlineAfter(std::chrono::milliseconds timeout, Clock::time_point now) {
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now)) {
    return Deadline::max();
  }
  return now + timeout;
}
inline Deadline DeadlineAfter(std::chrono::milliseconds timeout) {
  return DeadlineAfter(timeout, Clock::now());
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

class Waiter {
 public:
  // A spin shorter than this is not worth starting; also the length of a probe.
  static constexpr std::chrono::nanoseconds kProbe{1000};
  // While spinning is off, one wait in this many is a probe.
  static constexpr uint32_t kProbeEvery = 16;
  // Polls before a spinning wait first reads the clock.
  static constexpr int kFirstPolls = 16;

  explicit Waiter(const WaitPolicy& policy) : policy_(policy), spin_(policy.spin) {}

  // Starts a call: its waits give up `timeout` after the first of them that reads the clock.
  void StartCall(std::chrono::milliseconds timeout) {
    timeout_ = timeout;
    deadline_fixed_ = false;
  }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The current spin budget (for tests and diagnostics).
  std::chrono::nanoseconds spin() const { return spin_; }

  // Waits until ready() is true, interrupted() is true, or the call's deadline passes. Both
  // callables are polled; `interrupted` should be cheap (an atomic load).
  template <typename Ready, typename Interrupted>
  WaitResult Wait(Ready&& ready, Interrupted&& interrupted, Doorbell& bell);

 private:
  std::chrono::nanoseconds NextSpin() {
    if (spin_ >= kProbe || policy_.spin < kProbe) return spin_;
    return ++unspun_waits_ % kProbeEvery == 0 ? kProbe : std::chrono::nanoseconds(0);
  }
  void SpinPaid() { spin_ = std::min(policy_.spin, std::max(kProbe, 2 * spin_)); }
  void SpinWasted() { spin_ = spin_ / 2 < kProbe ? std::chrono::nanoseconds(0) : spin_ / 2; }
  Deadline DeadlineFrom(Clock::time_point now) {
    if (!deadline_fixed_) {
      deadline_ = DeadlineAfter(timeout_, now);
      deadline_fixed_ = true;
    }
    return deadline_;
  }

  WaitPolicy policy_;
  std::chrono::nanoseconds spin_;  // earned spin, 0 or in [kProbe, policy_.spin]
  uint32_t unspun_waits_ = 0;
  std::chrono::milliseconds timeout_{0};
  Deadline deadline_{};
  bool deadline_fixed_ = false;
};

template <typename Ready, typename Interrupted>
WaitResult Waiter::Wait(Ready&& ready, Interrupted&& interrupted, Doorbell& bell) {
  if (ready()) return WaitResult::kReady;
  const std::chrono::nanoseconds spin = NextSpin();
  bool spinning = spin.count() > 0;
  if (spinning) {
    for (int i = 0; i < kFirstPolls; ++i) {
      CpuRelax();
      if (ready()) {
        SpinPaid();
        return WaitResult::kReady;
      }
    }
  }
  const Clock::time_point start = Clock::now();
  const Deadline deadline = DeadlineFrom(start);
  const Clock::time_point spin_end = start + spin;
  const Clock::time_point yield_end = spin_end + policy_.yield;
  for (uint32_t i = 0;; ++i) {
    if (ready()) {
      if (spinning) SpinPaid();
      return WaitResult::kReady;
    }
    if (spinning && (i & 15) != 15) {  // read the clock once every 16 spins
      CpuRelax();
      continue;
    }
    if (interrupted()) return WaitResult::kInterrupted;
    const Clock::time_point now = i == 0 ? start : Clock::now();
    if (now >= deadline) return ready() ? WaitResult::kReady : WaitResult::kTimedOut;
    if (now < spin_end) {
      CpuRelax();
      continue;
    }
    if (spinning) {
      spinning = false;
      SpinWasted();
    }
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
