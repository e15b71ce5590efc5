// The Waiter (base/wait.h): what a wait returns when what it waits for and what interrupts it
// come together, the checked sleep mode's lost wake-up, and deadlines.
#include "base/wait.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "support/timing.h"

namespace chorus::internal {
namespace {

using std::chrono::milliseconds;
using testing::kPrompt;
using testing::kWrongPathWait;

// A peer that posted its last message and exited: the wait sees the exit (interrupted) before
// it looks again at the message. It must take the message, not report the peer gone. Before
// the fix this returned kInterrupted, and a rank whose peer finished normally failed with
// "rank 1 exited while this rank waited for data from it" (the TSan run of make test).
TEST(Waiter, WhatInterruptsAWaitDoesNotHideWhatItWaitedFor) {
  for (const WaitPolicy& policy : {WaitPolicy::For(64), WaitPolicy::For(1),
                                   WaitPolicy::SleepOnly(false), WaitPolicy::PollOnly()}) {
    Waiter waiter(policy);
    waiter.StartCall(milliseconds(1000));
    Doorbell bell;
    int polls = 0;
    bool posted = false;
    auto ready = [&] { return posted; };
    auto interrupted = [&] {
      // The peer posts and exits between the wait's look at the message and this check.
      posted = true;
      return ++polls > 0;
    };
    EXPECT_EQ(waiter.Wait(ready, interrupted, bell), WaitResult::kReady);
  }
}

TEST(Waiter, InterruptedWhenNothingCame) {
  Waiter waiter(WaitPolicy::For(64));
  waiter.StartCall(milliseconds(1000));
  Doorbell bell;
  EXPECT_EQ(waiter.Wait([] { return false; }, [] { return true; }, bell), WaitResult::kInterrupted);
}

TEST(Waiter, TimesOutAtTheCallsDeadline) {
  Waiter waiter(WaitPolicy::SleepOnly(true));
  waiter.StartCall(milliseconds(120));
  Doorbell bell;
  const auto start = Clock::now();
  EXPECT_EQ(waiter.Wait([] { return false; }, [] { return false; }, bell), WaitResult::kTimedOut);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(120));
  EXPECT_LT(took, milliseconds(120) + kPrompt);
}

// Thread `tid` of this process as /proc shows it: its state ('S': asleep in the kernel) and how
// often it has gone to sleep (voluntary context switches). State 0 when it cannot be read.
struct TaskState {
  char state = 0;
  long sleeps = -1;
};
TaskState ReadTask(pid_t tid) {
  TaskState t;
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("State:", 0) == 0 && line.size() > 7) t.state = line[7];
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) t.sleeps = std::stol(line.substr(24));
  }
  return t;
}

// The checked sleep mode: a change that rings the doorbell wakes the waiter; one that does not
// is a lost wake-up, reported as such once the ring grace has passed. The change must come
// while the waiter sleeps: one it saw before sleeping, or between two sleep slices, needed no
// ring. The changer waits until the waiter sleeps, changes the flag, and looks again: a trial
// in which the waiter did not sleep throughout the change proves nothing and is run afresh.
// (A waiter blocks in nothing but its doorbell's futex.)
TEST(Waiter, CheckedSleepWakesOnARingAndReportsAChangeWithoutOne) {
  for (bool ring : {true, false}) {
    bool conclusive = false;
    for (int trial = 0; trial < 20 && !conclusive; ++trial) {
      Waiter waiter(WaitPolicy::SleepOnly(true));
      waiter.StartCall(milliseconds(10000));
      Doorbell bell;
      std::atomic<bool> flag{false};
      std::atomic<pid_t> waiter_tid{0};
      std::atomic<bool> asleep_throughout{false};
      std::thread changer([&] {
        const auto until = Clock::now() + kWrongPathWait;
        TaskState before;
        while (Clock::now() < until) {
          const pid_t tid = waiter_tid.load();
          if (tid != 0 && (before = ReadTask(tid)).state == 'S') break;
          std::this_thread::sleep_for(milliseconds(1));
        }
        flag.store(true);
        const TaskState after = ReadTask(waiter_tid.load());
        asleep_throughout = before.state == 'S' && after.state == 'S' && before.sleeps >= 0 &&
                            after.sleeps == before.sleeps;
        if (ring) bell.Ring();
      });
      const auto start = Clock::now();
      const WaitResult r = waiter.Wait(
          [&] {
            if (waiter_tid.load(std::memory_order_relaxed) == 0) waiter_tid = gettid();
            return flag.load();
          },
          [] { return false; }, bell);
      changer.join();
      if (!asleep_throughout) continue;
      conclusive = true;
      if (ring) {
        EXPECT_EQ(r, WaitResult::kReady);  // that the ring wakes the sleeper: Doorbell below
      } else {
        EXPECT_EQ(r, WaitResult::kLostWakeup);
        EXPECT_GE(Clock::now() - start, Waiter::kRingGrace);
      }
    }
    EXPECT_TRUE(conclusive) << "in 20 trials the waiter never slept throughout the change";
  }
}

// A ring wakes a sleeper: it does not sleep on until its deadline. The deadline is
// kWrongPathWait away, so a sleeper that returns within kPrompt was woken.
TEST(Doorbell, ARingWakesTheSleeperBeforeItsDeadline) {
  Doorbell bell;
  std::atomic<bool> flag{false};
  std::thread changer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    flag.store(true);
    bell.Ring();
  });
  const auto start = Clock::now();
  bool woke = false;
  while (!woke && Clock::now() - start < kWrongPathWait) {
    woke = bell.Sleep([&] { return flag.load(); }, start + kWrongPathWait);
  }
  changer.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(Clock::now() - start, kPrompt);
}

// A ring that trails its change (the changer was preempted in between) is not a lost wake-up.
TEST(Waiter, ALateRingIsNotALostWakeup) {
  Waiter waiter(WaitPolicy::SleepOnly(true));
  waiter.StartCall(milliseconds(10000));
  Doorbell bell;
  std::atomic<bool> flag{false};
  std::thread changer([&] {
    std::this_thread::sleep_for(milliseconds(10));
    flag.store(true);
    std::this_thread::sleep_for(Waiter::kSleepSlice + milliseconds(100));
    bell.Ring();
  });
  EXPECT_EQ(waiter.Wait([&] { return flag.load(); }, [] { return false; }, bell),
            WaitResult::kReady);
  changer.join();
}

// The beacon says whom a blocked wait waits on, and lets go when it returns.
TEST(Waiter, TheBeaconShowsWhomTheRankWaitsOn) {
  Beacon beacon;
  Waiter waiter(WaitPolicy::SleepOnly(false), &beacon);
  waiter.StartCall(milliseconds(5000));
  Doorbell bell;
  std::atomic<bool> flag{false};
  std::atomic<int> seen{-1};
  std::thread watcher([&] {
    while (beacon.waiting_for.load() == 0) std::this_thread::yield();
    seen = beacon.waiting_for.load() - 1;
    flag.store(true);
    bell.Ring();
  });
  EXPECT_EQ(waiter.Wait([&] { return flag.load(); }, [] { return false; }, bell, 3),
            WaitResult::kReady);
  watcher.join();
  EXPECT_EQ(seen.load(), 3);
  EXPECT_EQ(beacon.waiting_for.load(), 0);
  EXPECT_NE(beacon.beat_ns.load(), 0);
}

// A rank whose thread is bound to one CPU, among ranks that fit on the cores, earns a spin of
// up to WaitPolicy::bound_spin; an unbound one never spins longer than WaitPolicy::spin. Each
// wait below is met a few polls after the wait first reads the clock (where the binding is
// looked at), so its spin pays and doubles; a preempted wait halves it, and the next ones
// double it back.
std::chrono::nanoseconds EarnedSpin(const WaitPolicy& policy, bool bind, bool* was_bound) {
  if (bind) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    EXPECT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  }
  *was_bound = BoundToOneCpu();
  Waiter waiter(policy);
  Doorbell bell;
  std::chrono::nanoseconds most{0};
  // Until the spin reaches the bound cap; 200 waits where there is none.
  const int waits = policy.bound_spin.count() > 0 ? 10000 : 200;
  for (int i = 0; i < waits && (most < policy.bound_spin || policy.bound_spin.count() == 0); ++i) {
    waiter.StartCall(milliseconds(60000));
    int polls = 0;
    EXPECT_EQ(
        waiter.Wait([&] { return ++polls > Waiter::kFirstPolls + 4; }, [] { return false; }, bell),
        WaitResult::kReady);
    most = std::max(most, waiter.spin());
  }
  return most;
}

TEST(Waiter, ARankBoundToItsOwnCoreSpinsLongerAndOneUnboundDoesNot) {
  const WaitPolicy fit = WaitPolicy::For(1);
  ASSERT_GT(fit.bound_spin, fit.spin);
  std::chrono::nanoseconds bound_most{0};
  std::chrono::nanoseconds free_most{0};
  bool bound = false;
  bool free_bound = true;
  std::thread([&] { bound_most = EarnedSpin(fit, true, &bound); }).join();
  std::thread([&] { free_most = EarnedSpin(fit, false, &free_bound); }).join();
  EXPECT_TRUE(bound);
  EXPECT_EQ(bound_most, fit.bound_spin);
  if (!free_bound) {  // a one-CPU machine binds every thread
    EXPECT_LE(free_most, fit.spin);
  }
  // Ranks that outnumber the cores never spin, bound or not (this process is not bound to one
  // CPU, which would count as having one of its own).
  if (BoundToOneCpu()) return;
  const WaitPolicy crowded = WaitPolicy::For(UsableCpus() + 1);
  EXPECT_EQ(crowded.bound_spin.count(), 0);
  std::thread([&] { bound_most = EarnedSpin(crowded, true, &bound); }).join();
  EXPECT_EQ(bound_most.count(), 0);
}

// A wait that outlasts its spin halves the earned spin, so waits longer than the spin never
// earn it back: on a CPU of its own (MarkOwnCpu) the spin stays at the bound cap instead. Each
// wait below is met 2 ms after it starts (its condition sleeps that long once), past the 1 ms
// cap, so every spin runs out.
// `by_policy`: the CPU is the policy's own_cpu (as Create finds it) instead of marked.
std::chrono::nanoseconds SpinAfterLongWaits(WaitPolicy policy, bool own, bool by_policy = false) {
  cpu_set_t one;
  CPU_ZERO(&one);
  const int cpu = sched_getcpu();
  CPU_SET(cpu, &one);
  EXPECT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  if (own && by_policy) policy.own_cpu = cpu;
  if (own && !by_policy) MarkOwnCpu(cpu);
  if (!by_policy) {
    EXPECT_EQ(OnOwnCpu(), own);
  }
  Waiter waiter(policy);
  Doorbell bell;
  for (int i = 0; i < 4; ++i) {
    waiter.StartCall(milliseconds(60000));
    int polls = 0;
    EXPECT_EQ(waiter.Wait(
                  [&] {
                    if (++polls == Waiter::kFirstPolls + 4) {
                      std::this_thread::sleep_for(milliseconds(2));
                    }
                    return polls > Waiter::kFirstPolls + 8;
                  },
                  [] { return false; }, bell),
              WaitResult::kReady);
  }
  return waiter.spin();
}

TEST(Waiter, ARankOnACpuOfItsOwnKeepsItsWholeSpinThroughLongWaits) {
  WaitPolicy fit = WaitPolicy::For(1);
  fit.spin_out_on_own_cpu = true;
  std::chrono::nanoseconds marked{0};
  std::chrono::nanoseconds unmarked{0};
  // Unmarked first: the mark is process-wide and stays.
  std::thread([&] { unmarked = SpinAfterLongWaits(fit, false); }).join();
  std::thread([&] { marked = SpinAfterLongWaits(fit, true); }).join();
  EXPECT_LT(unmarked, fit.bound_spin);
  EXPECT_EQ(marked, fit.bound_spin);
  // A policy without spin_out_on_own_cpu (TCP ranks, whose progress thread needs a CPU too)
  // earns its spin on a marked CPU as anywhere else.
  fit.spin_out_on_own_cpu = false;
  std::chrono::nanoseconds earned{0};
  std::thread([&] { earned = SpinAfterLongWaits(fit, true); }).join();
  EXPECT_LT(earned, fit.bound_spin);
}

// The CPU Create found a rank to have to itself (WaitPolicy::own_cpu) counts as marked, for that
// policy's waiter alone; a policy that names another CPU earns its spin. (Its own test process:
// the marks of the test above are process-wide; ctest runs each test alone.)
TEST(Waiter, ThePolicysOwnCpuKeepsTheWholeSpinAsAMarkedOneDoes) {
  WaitPolicy fit = WaitPolicy::For(1);
  fit.spin_out_on_own_cpu = true;
  std::chrono::nanoseconds own{0};
  std::chrono::nanoseconds other{0};
  std::thread([&] { own = SpinAfterLongWaits(fit, true, true); }).join();
  EXPECT_EQ(own, fit.bound_spin);
  bool marked = false;
  std::thread([&] {
    WaitPolicy elsewhere = fit;
    elsewhere.own_cpu = CPU_SETSIZE;  // not a CPU it can be bound to
    other = SpinAfterLongWaits(elsewhere, false, true);
    marked = OnOwnCpu();  // by the test above, when both run in one process
  }).join();
  if (!marked) {
    EXPECT_LT(other, fit.bound_spin);
  }
}

// A yield that comes back late gave the core to other work for a slice. One such yield ends
// that wait's yields (it sleeps); the next wait still yields, since one late yield may be a
// daemon's turn on a quiet machine, and yields are what make ranks that outnumber the cores
// fast. A second late yield soon after the first shows a busy machine: waits then sleep
// without yielding. The hook stands in for sched_yield and takes as long as a yield that gave
// the core away.
std::atomic<int> late_yields{0};
std::atomic<bool> came{false};
std::atomic<bool> late_yield_brings_it{true};
void LateYield() {
  late_yields.fetch_add(1);
  std::this_thread::sleep_for(2 * Waiter::kLongYield);
  if (late_yield_brings_it.load()) came.store(true);  // it arrived meanwhile
}

TEST(Waiter, OneLateYieldLeavesTheYieldsOnAndASecondSoonAfterTurnsThemOff) {
  g_yield_for_testing.store(&LateYield);
  struct Unhook {
    ~Unhook() { g_yield_for_testing.store(nullptr); }
  } unhook;
  Doorbell bell;
  // What the wait waits for comes, with a ring, when the wait first asks whether it was
  // interrupted after `polls` such asks: after its yield or sleep choice of that pass is due.
  auto arrives_at_ask = [&](int polls) {
    return [&bell, polls, asked = 0]() mutable {
      if (++asked == polls) {
        came.store(true);
        bell.Ring();
      }
      return false;
    };
  };
  // Ranks that outnumber the cores: no spin, yield for `yield`, then sleep.
  auto crowded = [](std::chrono::nanoseconds yield) {
    return WaitPolicy{std::chrono::nanoseconds(0), yield, false, true, {}, false};
  };
  auto wait = [&](Waiter& waiter, auto&& interrupted, milliseconds timeout) {
    came.store(false);
    waiter.StartCall(timeout);
    return waiter.Wait([] { return came.load(); }, interrupted, bell);
  };
  {
    // A late yield ends the wait's yields even when much of its yield phase is left.
    Waiter waiter(crowded(std::chrono::seconds(1)));
    late_yield_brings_it.store(false);
    EXPECT_EQ(wait(waiter, arrives_at_ask(2), milliseconds(60000)), WaitResult::kReady);
    EXPECT_EQ(late_yields.load(), 1);
    late_yield_brings_it.store(true);
  }
  Waiter waiter(crowded(std::chrono::microseconds(1000)));
  // Only a wait that yields is met (by its late yield): the deadline ends one that does not.
  auto wait_yielding = [&](Waiter& w) {
    return wait(
        w, [] { return false; }, milliseconds(10000));
  };
  // Late yields further apart than second_long_yield_within: every wait yields. (So they would
  // with one late yield turning the yields off, since that lasts contended_for.) A thread held
  // off the CPU only moves them further apart.
  const WaitPolicy defaults;
  late_yields.store(0);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_EQ(wait_yielding(waiter), WaitResult::kReady);
    EXPECT_EQ(late_yields.load(), i);
    std::this_thread::sleep_for(defaults.second_long_yield_within + milliseconds(20));
  }
  // Two late yields in a row, then a wait that sleeps at once: the ring wakes it, and no yield
  // came first. The windows are a minute here, so that however long this thread is held off
  // the CPU between the waits, the second late yield falls in the first one's window and the
  // last wait in the busy spell the second one starts.
  WaitPolicy patient = crowded(std::chrono::microseconds(1000));
  patient.second_long_yield_within = std::chrono::minutes(1);
  patient.contended_for = std::chrono::minutes(1);
  Waiter busy(patient);
  ASSERT_EQ(wait_yielding(busy), WaitResult::kReady);
  EXPECT_EQ(late_yields.load(), 4);
  ASSERT_EQ(wait_yielding(busy), WaitResult::kReady) << "a wait after one late yield did not yield";
  EXPECT_EQ(late_yields.load(), 5);
  EXPECT_EQ(wait(busy, arrives_at_ask(1), milliseconds(60000)), WaitResult::kReady);
  EXPECT_EQ(late_yields.load(), 5);
}

}  // namespace
}  // namespace chorus::internal
