// 02: one rank per process. Run it under a launcher, which tells each process its rank, the
// world size and where to meet (the store):
//
//   ./build/chorus launch -n 4 -- ./build/examples/02_processes_allreduce
//   mpirun -np 4 ./build/examples/02_processes_allreduce       (one host)
//
// Each rank contributes rank + 1; the sum over ranks is printed and checked. Set
// CHORUS_EXAMPLE_CRASH_RANK=r to make rank r crash mid-job and see how the job stops.
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "chorus/chorus.h"

int main() {
  auto options = chorus::CommOptionsFromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  auto comm = chorus::Communicator::Create(*options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = comm->rank();
  const int size = comm->size();
  if (const char* crash = std::getenv("CHORUS_EXAMPLE_CRASH_RANK");
      crash != nullptr && std::atoi(crash) == rank) {
    std::fprintf(stderr, "rank %d: crashing on purpose\n", rank);
    std::abort();
  }
  std::vector<double> values(1 << 20, rank + 1.0);
  if (chorus::Status s = comm->AllReduce(std::span<double>(values), chorus::ReduceOp::kSum);
      !s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  const double want = size * (size + 1) / 2.0;
  for (double v : values) {
    if (v != want) {
      std::fprintf(stderr, "rank %d: got %g, want %g\n", rank, v, want);
      return 1;
    }
  }
  std::printf("rank %d of %d: all-reduce over %s ok, sum = %g\n", rank, size,
              std::string(chorus::TransportKindName(comm->transport())).c_str(), want);
  return 0;
}
