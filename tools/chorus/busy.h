// busy.h: busy processes beside a benchmark (`chorus bench --busy N`), the load a training job's
// data loader or a compile puts on the machine: each is a process of its own spinning in user
// space, unbound, like `( while :; do :; done ) &`.
//
//   Result<std::unique_ptr<BusyLoops>> busy = BusyLoops::Start(2);
//   ... run the job ...                      // the destructor kills and reaps them
//
// The processes are forked before any rank exists and die with the thread that started them
// (PR_SET_PDEATHSIG), also across an exec into chorus launch, so a killed benchmark leaves none.
//
// Thread safety: start and destroy on one thread, before the ranks' threads exist.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::cli {

class BusyLoops {
 public:
  static Result<std::unique_ptr<BusyLoops>> Start(int count);
  ~BusyLoops();
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

  int count() const { return static_cast<int>(pids_.size()); }

 private:
  BusyLoops() = default;
  std::vector<pid_t> pids_;
};

}  // namespace chorus::cli
