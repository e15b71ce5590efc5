// What a hand-off of the core costs on this machine: the floor under a small call when ranks
// outnumber the cores (docs/waiting.md, "Four ranks on two cores: the floor of a small call").
//
// Two ranks bound to one CPU pass a token back and forth through a shared word, each yielding
// the core (sched_yield) until the token comes back: one iteration is one round trip, two
// context switches. The ranks are threads of one process, or two processes (a fork), whose
// switch also changes the address space. Beside them, a system call that does nothing
// (getppid) and a sched_yield with no one else on the CPU, which return without a switch.
//
//   build/handoff_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace {

// Binds the calling thread to `cpu`; false when it may not run there.
bool BindTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

// The word the two sides pass: odd values are the pinger's, even ones the ponger's; kStop ends
// the ponger's loop.
constexpr uint64_t kStop = ~uint64_t{0};

void Pong(std::atomic<uint64_t>* word) {
  for (uint64_t expect = 1;; expect += 2) {
    uint64_t v = 0;
    while ((v = word->load(std::memory_order_acquire)) != expect && v != kStop) sched_yield();
    if (v == kStop) return;
    word->store(expect + 1, std::memory_order_release);
  }
}

// Round trips until the benchmark stops, then ends the ponger's loop.
void Ping(benchmark::State& state, std::atomic<uint64_t>* word) {
  uint64_t next = 1;
  for (auto _ : state) {
    word->store(next, std::memory_order_release);
    while (word->load(std::memory_order_acquire) != next + 1) sched_yield();
    next += 2;
  }
  word->store(kStop, std::memory_order_release);
}

void BM_ThreadHandoff(benchmark::State& state) {
  const int cpu = sched_getcpu();
  if (!BindTo(cpu)) {
    state.SkipWithError("cannot bind to a CPU");
    return;
  }
  std::atomic<uint64_t> word{0};
  std::thread ponger([&] {
    BindTo(cpu);
    Pong(&word);
  });
  Ping(state, &word);
  ponger.join();
  state.SetLabel("round trip: 2 switches between threads on one CPU");
}
BENCHMARK(BM_ThreadHandoff)->UseRealTime();

void BM_ProcessHandoff(benchmark::State& state) {
  const int cpu = sched_getcpu();
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED || !BindTo(cpu)) {
    state.SkipWithError("cannot map a shared page or bind to a CPU");
    return;
  }
  auto* word = new (shared) std::atomic<uint64_t>(0);
  const pid_t child = fork();
  if (child == 0) {
    Pong(word);
    _exit(0);
  }
  if (child < 0) {
    state.SkipWithError("fork failed");
  } else {
    Ping(state, word);
    waitpid(child, nullptr, 0);
  }
  munmap(shared, 4096);
  state.SetLabel("round trip: 2 switches between processes on one CPU");
}
BENCHMARK(BM_ProcessHandoff)->UseRealTime();

void BM_EmptySyscall(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(getppid());
}
BENCHMARK(BM_EmptySyscall);

void BM_LoneYield(benchmark::State& state) {
  for (auto _ : state) sched_yield();
  state.SetLabel("no switch unless other work wants the CPU");
}
BENCHMARK(BM_LoneYield);

}  // namespace
