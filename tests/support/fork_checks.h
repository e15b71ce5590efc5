// Test helpers: checks on the exits of forked ranks (support/spawn.h ForkRanks), and the
// killed-rank trial the process transports share: one rank of a four-rank job dies by SIGKILL
// between two all-reduces, and every survivor must fail with an error that names it, within
// the job's timeout. Used by shm_test and tcp_test.
// Thread safety: call from the test's main thread, before it starts any other (ForkRanks).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/spawn.h"

namespace chorus::testing {

// Every rank returned "" and exited 0.
inline void ExpectAllOk(const std::vector<RankExit>& exits) {
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_TRUE(exits[r].ok()) << "rank " << r << " status " << exits[r].status << ": "
                               << exits[r].report;
  }
}

// What differs between the transports' killed-rank trials.
struct KilledRankTrial {
  // Rank r's options for the four-rank job (its timeout is the 20 s the trial allows).
  std::function<CommOptions(int rank)> options;
  // Elements of each all-reduce.
  size_t elements = 0;
  // Whether a survivor may report kAborted as well as kUnavailable (a peer that learnt of the
  // death first may abort the call).
  bool aborted_too = false;
};

// Runs the trial and checks it: rank 2 dies between its 5th and 6th call, ranks 0, 1 and 3
// each fail with kUnavailable (or kAborted, where allowed) naming rank 2, and all of that in
// less than the 20 s timeout: the death is found from the transport, not the deadline.
// Returns the exits, for the transport's own checks afterwards.
inline std::vector<RankExit> RunKilledRankTrial(const KilledRankTrial& trial) {
  const auto start = std::chrono::steady_clock::now();
  const auto exits = ForkRanks(4, [&](int rank) -> std::string {
    CommOptions o = trial.options(rank);
    o.timeout = std::chrono::seconds(20);
    auto comm = Communicator::Create(o);
    if (!comm.ok()) return comm.status().ToString();
    std::vector<float> v(trial.elements, 1.0f);
    for (int i = 0;; ++i) {
      if (rank == 2 && i == 5) raise(SIGKILL);  // dies between its 5th and 6th call
      const Status s = comm->AllReduce(std::span<float>(v), ReduceOp::kSum);
      if (s.ok()) continue;
      if (s.code() != StatusCode::kUnavailable &&
          !(trial.aborted_too && s.code() == StatusCode::kAborted)) {
        return "wrong code: " + s.ToString();
      }
      if (s.message().find("rank 2") == std::string::npos) return "no rank 2 in: " + s.ToString();
      return "";
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r : {0, 1, 3}) EXPECT_TRUE(exits[r].ok()) << "rank " << r << ": " << exits[r].report;
  EXPECT_TRUE(WIFSIGNALED(exits[2].status) && WTERMSIG(exits[2].status) == SIGKILL);
  EXPECT_LT(seconds, 20.0);
  return exits;
}

}  // namespace chorus::testing
