// Waiting without burning the core a peer needs, and never past a deadline.
//
// Each rank owns a Doorbell: a 32-bit futex word that anyone bumps after changing something the
// rank may be waiting for (a message posted to it, a slot released to it, a group failure).
// A wait polls its condition in three phases (docs/waiting.md has the measurements):
//   1. a `pause` spin, only when ranks fit on their cores: 3 us, or up to 1 ms when the
//      waiting thread is bound to a CPU of its own;
//   2. a sched_yield loop, which hands the core to a runnable peer on the same core (not for
//      a bound thread, whose core has no peer on it);
//   3. a futex sleep on the doorbell, woken by the next Ring().
// Phases are bounded by time, not by iteration count. Deadlines are absolute steady_clock times.
// The sleep is cut into slices, so that conditions nobody rings for (a peer process that died)
// are polled; a change that should ring and does not would cost a slice per wait, which shows
// only when the machine is busy enough to push waiters into the sleep. The checked sleep-only
// policy (WaitMode::kSleepChecked, for tests) makes every wait sleep at once and turns such a
// lost wake-up into an immediate kInternal error instead.
//
// A Waiter runs the waits of one rank. Two things it learns keep a small call cheap:
//   - The spin is earned: a spin that ran out before the condition came is halved, one that
//     caught it is doubled (up to the policy's). Ranks that fit on the cores can still land on
//     one core (the scheduler places woken threads next to their waker, or other work takes the
//     other core); then every spin only delays the peer: a 32-byte call took 7-10 us instead
//     of 0.4 (3.8 us with the spin earned). While the spin is off, one wait in kProbeEvery
//     spins briefly to notice that the peer has a core of its own again.
//     The exception: a rank whose own thread moves all its data (WaitPolicy::
//     spin_out_on_own_cpu), on a CPU it has to itself (MarkOwnCpu: bench and demo bind their
//     ranks so; Create finds it when every rank of the host is bound to a CPU of its own, as
//     mpirun --bind-to core binds them: WaitPolicy::own_cpu), spins the bound cap on every wait.
//     There the spin delays no one, and an earned spin never grows back from waits longer than
//     itself: ranks whose waits last tens of microseconds (a 1 MiB call's segments) would sleep on
//     every one of them.
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
  // `until`. Returns ready() as last seen; the caller loops. When `unrung` is given it is set
  // if the sleep ended with ready() true although nothing rang since the sleep began: either
  // the ring is still on its way (its sender was preempted between the change and the ring)
  // or it was never sent. `*seen_out` is then the sequence number the sleep began at.
  template <typename Ready>
  bool Sleep(Ready&& ready, Deadline until, bool* unrung = nullptr, uint32_t* seen_out = nullptr) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = seq_.load(std::memory_order_seq_cst);
    const bool ok = ready();
    if (!ok) FutexWait(seen, until);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (ok) return true;
    if (!ready()) return false;
    if (unrung != nullptr && seq_.load(std::memory_order_seq_cst) == seen) {
      *unrung = true;
      if (seen_out != nullptr) *seen_out = seen;
    }
    return true;
  }

  // Sleeps until the sequence number moves past `seen` or `until`; true if it moved.
  bool AwaitRing(uint32_t seen, Deadline until) {
    while (seq_.load(std::memory_order_seq_cst) == seen) {
      if (Clock::now() >= until) return false;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (seq_.load(std::memory_order_seq_cst) == seen) FutexWait(seen, until);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    return true;
  }

 private:
  void Wake();
  void FutexWait(uint32_t seen, Deadline until);

  alignas(64) std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> sleepers_{0};
};

// A rank's signs of life, for peers that time out waiting for it and want to know who is
// behind (transport/census.h). Written by the rank's waits, read by anyone; it lives where the
// peers can see it (shared memory for thread and shm ranks).
struct Beacon {
  // steady_clock nanoseconds of the last time a wait of this rank looked at the clock; a
  // waiting rank refreshes it at least once per sleep slice, and a rank taking a census (its
  // wait timed out) as often while it waits for answers.
  std::atomic<int64_t> beat_ns{0};
  void Beat(Clock::time_point now) {
    beat_ns.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }
  // peer + 1 while the rank is blocked waiting on that peer, else 0.
  std::atomic<int32_t> waiting_for{0};
  // The call the rank is in, or was in last (transport/call_tag.h: PublishCall, ReadCall),
  // under a sequence number that is odd while the words are written.
  static constexpr int kCallWords = 4;
  std::atomic<uint32_t> call_version{0};
  std::atomic<uint64_t> call[kCallWords] = {};
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
  // Every sleep that ends with its condition met but no ring is a lost wake-up: the wait
  // fails with WaitResult::kLostWakeup (WaitMode::kSleepChecked).
  bool check_wakeups = false;
  // False for transports that progress only when polled: nothing would wake a sleeper, so a
  // busy machine is no reason to stop yielding.
  bool may_sleep = true;
  // When the ranks fit on the cores and the waiting thread is bound to one CPU (as bench, demo
  // and mpirun bind such ranks), that CPU is its own: spin up to this long, earned as `spin` is,
  // and never yield, since a yield could only hand the core to other work for a time slice.
  // Zero: binding changes nothing.
  std::chrono::nanoseconds bound_spin{0};
  // On a CPU marked by MarkOwnCpu, spin the whole bound_spin on every wait instead of earning
  // it. Only where the rank's own thread moves all of its data (thread and shm ranks): a TCP
  // rank's progress thread, unbound, needs a CPU too, and two ranks spinning out both CPUs
  // would hold it off.
  bool spin_out_on_own_cpu = false;
  // The CPU this rank was found to have to itself when its communicator was made (every rank of
  // its host bound, none other to this CPU: core/meet.h OwnCpu), or -1: spin_out_on_own_cpu
  // applies on it as on a CPU marked by MarkOwnCpu, for this communicator's waits only.
  int own_cpu = -1;
  // A second long yield (Waiter::kLongYield) within this of the one before shows a busy
  // machine, and the waits then skip yielding for `contended_for`. One alone may be a daemon's
  // turn on a quiet machine. (Tests lengthen both, so that a thread held off the CPU cannot
  // close a window before the test has looked.)
  std::chrono::milliseconds second_long_yield_within{100};
  std::chrono::milliseconds contended_for{100};

  // Spin only when every rank has a core of its own (they fit on the CPUs this process may use,
  // or the calling thread is bound to one CPU); yield longer when they share.
  static WaitPolicy For(int ranks_on_this_host);
  // For transports that progress only when polled: yield between polls, never sleep.
  static WaitPolicy PollOnly() {
    return {std::chrono::nanoseconds(0), std::chrono::hours(24 * 365), false, false, {}, false};
  }
  // Sleep at once, every time (WaitMode::kSleep and kSleepChecked).
  static WaitPolicy SleepOnly(bool check_wakeups) {
    return {
        std::chrono::nanoseconds(0), std::chrono::nanoseconds(0), check_wakeups, true, {}, false};
  }
};

// Number of CPUs this process may run on.
int UsableCpus();
// Whether the calling thread may run on exactly one CPU.
bool BoundToOneCpu();
// The one CPU the calling thread may run on, or -1 when it may run on several.
int BoundCpu();
// Records that `cpu` was given to one rank of this process for itself (a thread or process
// bound to it, no other rank on it). A wait on a thread bound to such a CPU spins the whole
// bound cap (WaitPolicy::bound_spin) every time, instead of earning it.
void MarkOwnCpu(int cpu);
// Whether the calling thread is bound to exactly one CPU and MarkOwnCpu marked it.
bool OnOwnCpu();

void CpuRelax();
void YieldCpu();

// The outcome of a wait. kLostWakeup: the condition came true but nothing rang the doorbell
// within kRingGrace (only with WaitPolicy::check_wakeups): a bug in whoever changed it.
enum class WaitResult { kReady, kTimedOut, kInterrupted, kLostWakeup };

// Test hook, null outside tests: a wait that found its condition unmet calls it just before it
// asks whether it was interrupted, so a test can put a peer's last post and exit in that gap
// every time (shm_test: FinishedPeer). Read once per slow-path pass, never on the ready path.
inline std::atomic<void (*)()> g_before_interrupt_check{nullptr};
// Test hook, null outside tests: called in place of each sched_yield of a wait, so that a test
// can make a yield as long as one that gave the core to other work (wait_test).
inline std::atomic<void (*)()> g_yield_for_testing{nullptr};

class Waiter {
 public:
  // A spin shorter than this is not worth starting; also the length of a probe.
  static constexpr std::chrono::nanoseconds kProbe{1000};
  // While spinning is off, one wait in this many is a probe.
  static constexpr uint32_t kProbeEvery = 16;
  // Polls before a spinning wait first reads the clock.
  static constexpr int kFirstPolls = 16;
  // A sched_yield that returns later than this gave the core to other work for a time slice
  // (a peer rank's step takes far less): that wait sleeps at once. A second one soon after
  // shows a busy machine (WaitPolicy::second_long_yield_within, contended_for). One alone may
  // be a daemon's turn on a quiet machine, where yields are what makes ranks that outnumber the
  // cores fast (docs/waiting.md).
  static constexpr std::chrono::microseconds kLongYield{1000};
  // Sleep slice: conditions nobody rings for (a peer that died) are re-polled this often.
  static constexpr std::chrono::milliseconds kSleepSlice{50};
  // With check_wakeups: how long a ring may trail the change it announces (its sender may be
  // preempted in between) before the wait calls it lost.
  static constexpr std::chrono::milliseconds kRingGrace{2000};
  // How often a waiting rank looks again whether its thread is bound (WaitPolicy::bound_spin).
  static constexpr std::chrono::milliseconds kBindingCheckEvery{1000};

  explicit Waiter(const WaitPolicy& policy, Beacon* beacon = nullptr)
      : policy_(policy),
        spin_cap_(policy.spin),
        yield_(policy.yield),
        spin_(policy.spin),
        beacon_(beacon) {}

  // Starts a call: its waits give up `timeout` after the first of them that reads the clock.
  void StartCall(std::chrono::milliseconds timeout) {
    timeout_ = timeout;
    deadline_fixed_ = false;
  }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The current spin budget (for tests and diagnostics).
  std::chrono::nanoseconds spin() const { return spin_; }

  // Waits until ready() is true, interrupted() is true, or the call's deadline passes. Both
  // callables are polled; `interrupted` should be cheap (an atomic load). `peer` (or -1) is
  // what the beacon reports the rank waits on.
  template <typename Ready, typename Interrupted>
  WaitResult Wait(Ready&& ready, Interrupted&& interrupted, Doorbell& bell, int peer = -1) {
    return Wait(ready, interrupted, bell, peer, [] { return false; });
  }
  // The same, and once the wait has lasted kLastingAfter, `lasting()` every kLastingEvery (on
  // the wait's own clock reads: at least once per sleep slice): true interrupts the wait. For
  // checks too slow to poll (a census of the group).
  template <typename Ready, typename Interrupted, typename Lasting>
  WaitResult Wait(Ready&& ready, Interrupted&& interrupted, Doorbell& bell, int peer,
                  Lasting&& lasting);
  static constexpr std::chrono::milliseconds kLastingAfter{20};
  static constexpr std::chrono::milliseconds kLastingEvery{40};

 private:
  std::chrono::nanoseconds NextSpin() {
    if (spin_ >= kProbe || spin_cap_ < kProbe) return spin_;
    return ++unspun_waits_ % kProbeEvery == 0 ? kProbe : std::chrono::nanoseconds(0);
  }
  void SpinPaid() { spin_ = std::min(spin_cap_, std::max(kProbe, 2 * spin_)); }
  void SpinWasted() {
    if (own_cpu_) return;  // nobody shares the CPU: the spin costs no one anything
    spin_ = spin_ / 2 < kProbe ? std::chrono::nanoseconds(0) : spin_ / 2;
  }
  Deadline DeadlineFrom(Clock::time_point now) {
    if (!deadline_fixed_) {
      deadline_ = DeadlineAfter(timeout_, now);
      deadline_fixed_ = true;
    }
    return deadline_;
  }

  // Looks whether this thread is bound to one CPU (at most every kBindingCheckEvery, on a wait
  // that reads the clock anyway) and sets the spin cap and the yield phase to match.
  void CheckBinding(Clock::time_point now);

  WaitPolicy policy_;
  std::chrono::nanoseconds spin_cap_;  // policy_.spin, or policy_.bound_spin while bound
  std::chrono::nanoseconds yield_;     // policy_.yield, or none while bound
  bool own_cpu_ = false;  // on a CPU of its own (MarkOwnCpu, policy.own_cpu): spin_ is the cap
  Clock::time_point binding_checked_until_{};
  std::chrono::nanoseconds spin_;  // earned spin, 0 or in [kProbe, spin_cap_]
  uint32_t unspun_waits_ = 0;
  std::chrono::milliseconds timeout_{0};
  Deadline deadline_{};
  bool deadline_fixed_ = false;
  Clock::time_point contended_until_{};   // until then the machine is busy: sleep, don't yield
  Clock::time_point long_yield_until_{};  // a long yield before then makes the machine busy
  Beacon* beacon_;
};

template <typename Ready, typename Interrupted, typename Lasting>
WaitResult Waiter::Wait(Ready&& ready, Interrupted&& interrupted, Doorbell& bell, int peer,
                        Lasting&& lasting) {
  if (ready()) return WaitResult::kReady;
  // Blocked from here on: say on whom, until the wait returns. A wait that timed out stays
  // marked while its rank takes the census, so that peers asking meanwhile follow it on.
  struct Blocked {
    Beacon* beacon;
    bool timed_out = false;
    Blocked(Beacon* b, int peer) : beacon(b) {
      if (beacon != nullptr) beacon->waiting_for.store(peer + 1, std::memory_order_relaxed);
    }
    ~Blocked() {
      if (beacon != nullptr && !timed_out) beacon->waiting_for.store(0, std::memory_order_relaxed);
    }
  } blocked(beacon_, peer);
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
  if (beacon_ != nullptr) {
    beacon_->Beat(start);
  }
  if (policy_.bound_spin.count() > 0 && start >= binding_checked_until_) CheckBinding(start);
  const Deadline deadline = DeadlineFrom(start);
  Clock::time_point lasting_at = start + kLastingAfter;
  const Clock::time_point spin_end = start + spin;
  // While the machine is known to be busy, yielding only gives the core away for a tick.
  Clock::time_point yield_end =
      start < contended_until_ && policy_.may_sleep ? spin_end : spin_end + yield_;
  for (uint32_t i = 0;; ++i) {
    if (ready()) {
      if (spinning) SpinPaid();
      return WaitResult::kReady;
    }
    if (spinning && (i & 15) != 15) {  // read the clock once every 16 spins
      CpuRelax();
      continue;
    }
    if (auto* hook = g_before_interrupt_check.load(std::memory_order_relaxed)) hook();
    // What made the wait stop may come with what it waited for: a peer that posted its last
    // message and exited normally is gone, yet the message is there to read. So ready() is
    // asked again after interrupted() turned true: everything the peer did before it left is
    // visible by then (its exit, or its departure flag, is observed through the kernel or an
    // acquire load that follows its posts).
    if (interrupted()) return ready() ? WaitResult::kReady : WaitResult::kInterrupted;
    const Clock::time_point now = i == 0 ? start : Clock::now();
    if (beacon_ != nullptr && i != 0) {
      beacon_->Beat(now);
    }
    if (now >= deadline) {
      if (ready()) return WaitResult::kReady;
      blocked.timed_out = true;
      return WaitResult::kTimedOut;
    }
    if (now >= lasting_at) {
      if (lasting()) return ready() ? WaitResult::kReady : WaitResult::kInterrupted;
      lasting_at = now + kLastingEvery;
    }
    if (now < spin_end) {
      CpuRelax();
      continue;
    }
    if (spinning) {
      spinning = false;
      SpinWasted();
    }
    if (now < yield_end) {
      if (auto* yield = g_yield_for_testing.load(std::memory_order_relaxed)) {
        yield();
      } else {
        YieldCpu();
      }
      // A yield that took long handed the core to other work for its time slice: the machine
      // may be busy, and every further yield would push this rank back in the scheduler's
      // queue (EEVDF charges a yield a whole slice). Sleep instead: a wake-up starts afresh.
      if (policy_.may_sleep && Clock::now() - now > kLongYield) {
        yield_end = now;
        // One long yield may be a daemon's turn; a second soon after it is a busy machine.
        if (now < long_yield_until_) contended_until_ = now + policy_.contended_for;
        long_yield_until_ = now + policy_.second_long_yield_within;
      }
    } else {
      // Sleep in slices so that conditions nobody rings for (a dead process) are re-polled.
      const Deadline slice = std::min(deadline, now + kSleepSlice);
      if (!policy_.check_wakeups) {
        if (bell.Sleep(ready, slice)) return WaitResult::kReady;
        continue;
      }
      bool unrung = false;
      uint32_t seen = 0;
      if (!bell.Sleep(ready, slice, &unrung, &seen)) continue;
      if (!unrung || bell.AwaitRing(seen, Clock::now() + kRingGrace)) return WaitResult::kReady;
      return WaitResult::kLostWakeup;
    }
  }
}

}  // namespace chorus::internal
