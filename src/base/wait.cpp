// Futex plumbing and the wait policy (see wait.h).
#include "base/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace chorus::internal {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // The futex word is the atomic's object representation; std::atomic<uint32_t> is lock-free
  // and layout-compatible with uint32_t on Linux.
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

// Not FUTEX_PRIVATE_FLAG: the same code sleeps on doorbells in shared memory across processes.
void Doorbell::Wake() { Futex(&seq_, FUTEX_WAKE, INT_MAX, nullptr); }

void Doorbell::FutexWait(uint32_t seen, Deadline until) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // EAGAIN (the word moved), EINTR and ETIMEDOUT all mean: go back and look.
  Futex(&seq_, FUTEX_WAIT, seen, &ts);
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int BoundCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return -1;
}

namespace {

constexpr int kMarkedCpus = 1024;
std::atomic<uint64_t> own_cpus[kMarkedCpus / 64];

bool Marked(int cpu) {
  return cpu >= 0 && cpu < kMarkedCpus &&
         (own_cpus[cpu / 64].load(std::memory_order_relaxed) >> (cpu % 64) & 1) != 0;
}

}  // namespace

bool BoundToOneCpu() { return BoundCpu() >= 0; }

void MarkOwnCpu(int cpu) {
  if (cpu < 0 || cpu >= kMarkedCpus) return;
  own_cpus[cpu / 64].fetch_or(uint64_t{1} << (cpu % 64), std::memory_order_relaxed);
}

bool OnOwnCpu() { return Marked(BoundCpu()); }

// The measurements behind these figures are in docs/waiting.md.
WaitPolicy WaitPolicy::For(int ranks_on_this_host) {
  using std::chrono::microseconds;
  // A process bound to one CPU was most likely given its own by whoever started the job
  // (mpirun, chorus launch --bind core), one per rank; then the ranks fit too. (A whole job
  // squeezed onto one CPU by taskset would be taken for that: its bound spin halves each time it
  // runs out, so it stops spinning within a few waits.)
  if (ranks_on_this_host <= UsableCpus() || BoundToOneCpu()) {
    // Unbound ranks that fit can still land on one core, or share one with other work: a long
    // spin could hold the very core the awaited peer is queued on. So spin briefly, then yield
    // (which hands the core to a peer queued there; a yield that gave it to other work for a
    // slice turns the yields off for a while), and only then sleep. A rank bound to a core of
    // its own spins up to 1 ms instead and never yields: beside a busy process, its peer is
    // back within a time slice, and a rank that had slept would come back later still.
    return {microseconds(3), microseconds(500), false, true, microseconds(1000)};
  }
  return {microseconds(0), microseconds(1000), false, true, {}};
}

void Waiter::CheckBinding(Clock::time_point now) {
  binding_checked_until_ = now + kBindingCheckEvery;
  const int cpu = BoundCpu();  // one affinity read for both questions
  const bool bound = cpu >= 0;
  spin_cap_ = bound ? policy_.bound_spin : policy_.spin;
  yield_ = bound ? std::chrono::nanoseconds(0) : policy_.yield;
  own_cpu_ = policy_.spin_out_on_own_cpu && cpu >= 0 && (cpu == policy_.own_cpu || Marked(cpu));
  spin_ = own_cpu_ ? spin_cap_ : std::min(spin_, spin_cap_);
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

void YieldCpu() { sched_yield(); }

}  // namespace chorus::internal
