// Micro-benchmarks of the reduction kernels (src/reduce/kernels.cpp) against a plain loop.
//
//   build-<you>/bench/reduce_bench --benchmark_min_time=0.2
//
// Every kernel runs in place, a = a + b, like the baselines. bytes_per_second counts the bytes of
// ONE vector per call (n * element size), the convention of the "reduce_a+=b_GBs(vector_bytes/s)"
// figure in shared/peers/physlimits.cpp, so the numbers compare directly with it. The memory
// traffic is three times that (read a, read b, write a). Sizes are per vector.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "reduce/reduce.h"

namespace chorus::reduce {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// Page-aligned and touched once, so the timed loop sees no page faults.
Buffer Touched(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return Buffer(static_cast<unsigned char*>(p));
}

// Fills with `pattern` (one element's bytes) repeated.
template <class T>
void Fill(unsigned char* p, size_t bytes, T pattern) {
  for (size_t i = 0; i + sizeof(T) <= bytes; i += sizeof(T))
    std::memcpy(p + i, &pattern, sizeof(T));
}

// bytes_per_second is printed in binary units (GiB/s); the GBps counter is the same rate in the
// project's (and physlimits') decimal GB/s.
void SetBytes(benchmark::State& state, size_t bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// a starts at 0 and b holds ones, so the in-place sums stay finite however long the run.
template <class T>
void BM_SumKernel(benchmark::State& state, DataType dtype, T one) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t n = bytes / sizeof(T);
  Buffer a = Touched(bytes);
  Buffer b = Touched(bytes);
  Fill(b.get(), bytes, one);
  const Kernel& kernel = GetKernel(dtype, ReduceOp::kSum);
  for (auto _ : state) {
    kernel.combine(a.get(), a.get(), b.get(), n);
    benchmark::ClobberMemory();
  }
  SetBytes(state, bytes);
}

// The plain loop as the project's flags compile it (-O2: GCC 12 does not vectorise it).
__attribute__((noinline)) void AddInPlace(float* __restrict a, const float* __restrict b,
                                          size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

// The same loop the way physlimits.cpp builds it (-O3, AVX allowed): the vectoriser's best.
// (clang has no optimize attribute; it vectorises the loop at -O2 already.)
#if defined(__clang__)
#define CHORUS_BENCH_O3
#else
#define CHORUS_BENCH_O3 optimize("O3"),
#endif
__attribute__((noinline, CHORUS_BENCH_O3 target("avx2"))) void AddInPlaceO3(
    float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

template <void (*kAdd)(float* __restrict, const float* __restrict, size_t)>
void BM_PlainLoop(benchmark::State& state) {
  if (kAdd == &AddInPlaceO3 && !__builtin_cpu_supports("avx2")) {
    state.SkipWithError("no AVX2");
    return;
  }
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t n = bytes / sizeof(float);
  Buffer a = Touched(bytes);
  Buffer b = Touched(bytes);
  Fill(b.get(), bytes, 1.0f);
  auto* fa = reinterpret_cast<float*>(a.get());
  const auto* fb = reinterpret_cast<const float*>(b.get());
  for (auto _ : state) {
    kAdd(fa, fb, n);
    benchmark::ClobberMemory();
  }
  SetBytes(state, bytes);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes :
       {int64_t{4} << 10, int64_t{256} << 10, int64_t{4} << 20, int64_t{64} << 20}) {
    b->Arg(bytes);
  }
}

BENCHMARK_CAPTURE(BM_SumKernel, float32, DataType::kFloat32, 1.0f)->Apply(Sizes);
BENCHMARK(BM_PlainLoop<AddInPlace>)->Name("BM_PlainLoop/O2")->Apply(Sizes);
BENCHMARK(BM_PlainLoop<AddInPlaceO3>)->Name("BM_PlainLoop/O3_avx2")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_SumKernel, bfloat16, DataType::kBFloat16, BFloat16{0x3f80})->Arg(4 << 20);
BENCHMARK_CAPTURE(BM_SumKernel, float16, DataType::kFloat16, Float16{0x3c00})->Arg(4 << 20);

}  // namespace
}  // namespace chorus::reduce
