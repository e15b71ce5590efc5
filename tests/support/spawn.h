// Test helper: run one function per rank, each on its own thread, over a local group.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

// Calls fn(comm) for every communicator on its own thread and joins them all.
inline void RunRanks(std::vector<Communicator>& comms,
                     const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (Communicator& comm : comms) threads.emplace_back([&fn, &comm] { fn(comm); });
  for (std::thread& t : threads) t.join();
}

}  // namespace chorus::testing
