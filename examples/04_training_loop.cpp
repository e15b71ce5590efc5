// 04: the communication of a data-parallel training loop: every step all-reduces (averages)
// each gradient bucket, and the replicas stay identical. Run it under a launcher:
//
//   ./build/chorus launch -n 4 -- ./build/examples/04_training_loop [STEPS]
//   CHORUS_TIMEOUT_MS=2000 ./build/chorus launch -n 4 -- ./build/examples/04_training_loop 1000000
//
// A failing step prints the rank, the step and chorus's message, which names the cause and the
// rank behind it (scripts/frozen-rank.sh stops one rank with SIGSTOP and reads what the others
// say).
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "chorus/chorus.h"

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 100;
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
  // Three buckets of "gradients", as DDP cuts a model's parameters.
  std::vector<std::vector<float>> buckets = {std::vector<float>(1 << 16),
                                             std::vector<float>(1 << 14),
                                             std::vector<float>(1 << 10)};
  for (long step = 0; step < steps; ++step) {
    for (auto& bucket : buckets) {
      // Rank r's gradient is r + step; the average over p ranks is (p - 1) / 2 + step.
      bucket.assign(bucket.size(), static_cast<float>(rank + step % 1000));
      const chorus::Status s = comm->AllReduce(std::span<float>(bucket), chorus::ReduceOp::kAvg);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: step %ld: %s\n", rank, step, s.ToString().c_str());
        return 1;
      }
      const float want = static_cast<float>(comm->size() - 1) / 2 + static_cast<float>(step % 1000);
      if (bucket.front() != want || bucket.back() != want) {
        std::fprintf(stderr, "rank %d: step %ld: got %g, want %g\n", rank, step, bucket.front(),
                     want);
        return 1;
      }
    }
  }
  std::printf("rank %d of %d: %ld steps over %s ok\n", rank, comm->size(), steps,
              std::string(chorus::TransportKindName(comm->transport())).c_str());
  return 0;
}
