// 01: four ranks as threads of one process average a gradient with AllReduce.
//
//   ./build/examples/01_threads_allreduce
#include <cstdio>
#include <span>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

int main() {
  constexpr int kRanks = 4;
  auto group = chorus::CreateLocalGroup(kRanks);
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<float>> grads(kRanks, std::vector<float>(8));
  std::vector<std::thread> threads;
  for (chorus::Communicator& comm : *group) {
    threads.emplace_back([&comm, &grads] {
      std::vector<float>& grad = grads[static_cast<size_t>(comm.rank())];
      for (size_t i = 0; i < grad.size(); ++i) grad[i] = float(comm.rank() + i);
      const chorus::Status s = comm.AllReduce(std::span<float>(grad), chorus::ReduceOp::kAvg);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), s.ToString().c_str());
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("averaged gradient on rank 0:");
  for (float v : grads[0]) std::printf(" %g", v);  // 1.5 2.5 ... 8.5
  std::printf("\n");
  return 0;
}
