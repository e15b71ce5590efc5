// rank_group.h: runs one per-rank body on every rank of a group, whether the ranks are threads of
// this process (--transport thread), processes started by `chorus launch` (--transport shm) or
// the ranks of an MPI job (--transport mpi under mpirun).
// `chorus bench` and `chorus demo` write their work once, as a RankBody:
//
//   RankBody body = [&](RankGroup& group) -> Status {
//     for (...) {
//       CHORUS_RETURN_IF_ERROR(group.Barrier());  // untimed: line the ranks up
//       ... time group.comm().AllReduce(...) ...
//     }
//     return group.MaxOverRanks(times);            // after the timed loop
//   };
//   Status s = RunThreadRanks(4, options, body, watch);   // in this process
//   Status s = RunProcessRank(options, body, watch);      // in each worker under chorus launch
//
// The sync calls (Barrier, MaxOverRanks, SumOverRanks) are how ranks agree: on the iteration
// count, on each iteration's slowest time, on totals of wrong elements. Thread ranks use a
// std::barrier and their shared address space; process ranks use chorus collectives (float64 max,
// uint64 sum) on the rank's own communicator. Either way they are ordinary waits with the
// communicator's deadline, and nothing here is meant to be timed.
//
// Failure: a body returns its first error. The runner then aborts that rank's communicator, so
// every other rank fails its next collective or sync call (kAborted) instead of waiting for a
// peer that will not come; RunThreadRanks reports the root cause (the first failure that is not
// such an echo). A watchdog ends the process if no rank makes progress for much longer than a
// call's deadline, so neither command can hang on a call that ignores its deadline.
//
// Thread safety: a RankGroup belongs to the thread driving its rank.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::cli {

// Ends a stuck run: after `stall` without a Tick(), it calls on_stall (which aborts the
// communicators, so that waiting calls return); if there is still no Tick() 10 s later, it ends
// the process with `exit_code`.
class Watchdog {
 public:
  struct Options {
    std::string program;  // "chorus bench", for its messages
    std::chrono::milliseconds stall{0};
    int exit_code = 1;
  };

  Watchdog(Options options, std::function<void()> on_stall);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Tick() { progress_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void Watch();

  const Options options_;
  const std::function<void()> on_stall_;
  std::atomic<uint64_t> progress_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// One rank's view of its group.
class RankGroup {
 public:
  RankGroup(Communicator& comm, Watchdog& watchdog) : comm_(comm), watchdog_(watchdog) {}
  virtual ~RankGroup() = default;
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  Communicator& comm() { return comm_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  TransportKind transport() const { return comm_.transport(); }

  // Returns once every rank has called it; an error when the group is failing.
  virtual Status Barrier() = 0;
  // A barrier that releases the ranks as close together as it can, before a timed call.
  virtual Status StartTogether() { return Barrier(); }
  // Element-wise maximum / sum over ranks, in place; every rank passes the same length.
  virtual Status MaxOverRanks(std::span<double> values) = 0;
  virtual Status SumOverRanks(std::span<uint64_t> values) = 0;

  // Tells the watchdog this rank is still moving (sync calls do it themselves).
  void NoteProgress() { watchdog_.Tick(); }

 private:
  Communicator& comm_;
  Watchdog& watchdog_;
};

using RankBody = std::function<Status(RankGroup& group)>;

// Runs `body` for each of `ranks` thread ranks of one CreateLocalGroup(ranks, options), each on
// its own thread. Returns OK, or the root cause as "rank r: <status>". A failed CreateLocalGroup
// is returned as is.
Status RunThreadRanks(int ranks, const CommOptions& options, const RankBody& body,
                      const Watchdog::Options& watch);

// Joins the job a launcher started (rank, size and store from CommOptionsFromEnvironment on top
// of `base`) and runs `body` on this process's rank. Returns OK or "rank r: <status>".
// base.timeout bounds the sync calls; joining may take up to 30 s if that is longer, so the
// communicator's own default deadline is that. The body passes CallOptions::timeout itself.
Status RunProcessRank(const CommOptions& base, const RankBody& body,
                      const Watchdog::Options& watch);

// Runs `body` on `comm`, one rank of a group of processes (however it was created), with the
// sync calls done as chorus collectives bounded by `call_timeout`, and a watchdog. Returns OK or
// "rank r: <status>"; on failure `comm` is aborted, so the other ranks stop at their next call.
Status RunRankOn(Communicator& comm, std::chrono::milliseconds call_timeout, const RankBody& body,
                 const Watchdog::Options& watch);

// True when the CLI was built with chorus::mpi (CHORUS_WITH_MPI, unsanitized builds).
bool CliHasMpi();

// One rank of an MPI job (started by mpirun or srun): initialises MPI unless this process already
// did, runs `body` on CreateMpiCommunicator(MPI_COMM_WORLD, base) through RunRankOn, destroys the
// communicator and finalises MPI if it initialised it. Ranks and size are the job's.
// kFailedPrecondition in a build without MPI (CliHasMpi() is false).
Status RunMpiRank(const CommOptions& base, const RankBody& body, const Watchdog::Options& watch);

// Replaces this process with `<this program> launch -n ranks --no-prefix -- <this program>
// worker_args...`, so the launcher's exit status becomes ours and signals reach it directly.
// Returns only when that cannot be done: prints why and returns exit_code_on_failure.
int ExecUnderLauncher(const std::string& program, int ranks,
                      const std::vector<std::string>& worker_args, int exit_code_on_failure);

// True when mpirun, srun or another MPI launcher started this process as one rank of a job:
// the CLI then runs as that rank instead of starting ranks itself.
bool StartedByForeignLauncher();

// "thread", "shm" or "tcp"; anything else is nullopt.
std::optional<TransportKind> ParseCliTransport(std::string_view name);

// The median of `values` (reordered); 0 when empty.
double Median(std::vector<double>& values);

}  // namespace chorus::cli
