// A program written the way a user of chorus would: only the public header, two ranks as two
// threads, one all-reduce. Built by both consumer projects to prove the package works.
#include <chorus/chorus.h>

#include <cstdint>
#include <iostream>
#include <span>
#include <thread>
#include <vector>

int main() {
  auto group = chorus::CreateLocalGroup(2);
  if (!group.ok()) {
    std::cerr << "CreateLocalGroup: " << group.status() << "\n";
    return 1;
  }
  // Rank r contributes {r+1, 10(r+1), 100(r+1)}, so the sums are {3, 30, 300}.
  std::vector<std::vector<int32_t>> data = {{1, 10, 100}, {2, 20, 200}};
  std::vector<chorus::Status> status(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      status[r] = (*group)[r].AllReduce(std::span<int32_t>(data[r]), chorus::ReduceOp::kSum);
    });
  }
  for (std::thread& t : ranks) t.join();
  const std::vector<int32_t> expected = {3, 30, 300};
  for (int r = 0; r < 2; ++r) {
    if (!status[r].ok() || data[r] != expected) {
      std::cerr << "rank " << r << ": " << status[r] << ", got " << data[r][0] << " " << data[r][1]
                << " " << data[r][2] << "\n";
      return 1;
    }
  }
  std::cout << "chorus consumer: all-reduce over 2 ranks OK\n";
  return 0;
}
