// RankGroup over threads (std::barrier, shared memory) and over processes (chorus collectives),
// the runners that drive a RankBody on each, the watchdog, and the re-exec through chorus launch.
#include "rank_group.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "base/wait.h"

namespace chorus::cli {
namespace {

// Pins the calling thread to the local_rank-th CPU this process may use, as mpirun binds its
// ranks. Left alone, the scheduler sometimes stacks two busy ranks on one core while the other
// idles: a 2-rank 32-byte call then took 3.8 us instead of 0.3. Not when the ranks outnumber
// the CPUs: 4 ranks pinned in pairs measured 6.0 us against 4.0 us floating.
// CHORUS_BIND=none leaves the ranks unbound.
void BindToOwnCore(int local_rank, int local_ranks) {
  const char* bind = std::getenv("CHORUS_BIND");
  if (bind != nullptr && std::string_view(bind) == "none") return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  if (local_ranks > CPU_COUNT(&allowed)) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != local_rank) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    // Best effort: unbound ranks still work. Bound, the CPU is this rank's alone: its waits
    // may spin as long as the policy allows (base/wait.h).
    if (sched_setaffinity(0, sizeof one, &one) == 0) internal::MarkOwnCpu(cpu);
    return;
  }
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Status Prefixed(int rank, const Status& s) {
  return {s.code(), "rank " + std::to_string(rank) + ": " + s.message()};
}

// ------------------------------------------------------------------ thread ranks

// What the thread ranks of one run share. The barrier's completion step is the only writer of
// `stop`, and runs while every rank waits, so all ranks read the same value after a phase and
// leave their loops at the same point.
class ThreadShared {
 public:
  ThreadShared(int ranks, Watchdog& watchdog)
      : watchdog_(watchdog),
        barrier_(ranks, Completion{this}),
        doubles_(static_cast<size_t>(ranks)),
        words_(static_cast<size_t>(ranks)) {}

 private:
  friend class ThreadRankGroup;
  struct Completion {
    ThreadShared* shared;
    void operator()() noexcept {
      shared->stop_ = shared->departed_.load();
      shared->watchdog_.Tick();
    }
  };

  Watchdog& watchdog_;
  std::barrier<Completion> barrier_;
  std::atomic<bool> departed_{false};  // a rank has left: the group is over
  bool stop_ = false;
  // Each rank's operand of the current MaxOverRanks / SumOverRanks, valid between its two phases.
  std::vector<std::span<double>> doubles_;
  std::vector<std::span<uint64_t>> words_;
};

class ThreadRankGroup final : public RankGroup {
 public:
  ThreadRankGroup(Communicator& comm, Watchdog& watchdog, ThreadShared& shared)
      : RankGroup(comm, watchdog), shared_(shared) {}

  Status Barrier() override {
    NoteProgress();
    shared_.barrier_.arrive_and_wait();
    if (shared_.stop_) return Aborted("another rank has stopped");
    return Status::Ok();
  }
  // Not the std::barrier: its waiters sleep on a futex, and a thread that wakes from a sleep
  // beside a busy process is the one the scheduler preempts soon after (a 2-rank 32-byte
  // all-reduce beside one busy loop averaged 27-100 us per timed call after it, 1-5 us after a
  // chorus all-reduce). One-element chorus all-reduces line the ranks up instead, as they do
  // process ranks and as MPI_Barrier does the peers': the first gathers them, the second
  // releases every rank within a spin of the last arrival. A rank that left the group (its
  // body failed) has had its communicator aborted, so these fail on the others.
  Status StartTogether() override {
    NoteProgress();
    if (shared_.departed_.load()) return Aborted("another rank has stopped");
    for (const char* what : {"sync (gather): ", "sync (start): "}) {
      uint32_t token = 0;
      const Status s = comm().AllReduce(std::span<uint32_t>(&token, 1), ReduceOp::kSum);
      if (!s.ok()) return Status(s.code(), what + s.message());
    }
    return Status::Ok();
  }
  Status MaxOverRanks(std::span<double> values) override {
    return Combine(values, shared_.doubles_, [](double a, double b) { return std::max(a, b); });
  }
  Status SumOverRanks(std::span<uint64_t> values) override {
    return Combine(values, shared_.words_, [](uint64_t a, uint64_t b) { return a + b; });
  }

  // Leaves the group for good: later phases complete without this rank, and end the run.
  void Leave() {
    shared_.departed_.store(true);
    shared_.barrier_.arrive_and_drop();
  }

 private:
  // Every rank publishes its operand, waits, reads all of them, and waits again before writing
  // its result, because a peer may still be reading this rank's operand until then.
  template <typename T, typename Op>
  Status Combine(std::span<T> values, std::vector<std::span<T>>& slots, Op op) {
    slots[static_cast<size_t>(rank())] = values;
    CHORUS_RETURN_IF_ERROR(Barrier());
    // Every rank sees every length, so either all of them fail here or none does.
    for (const std::span<T>& other : slots) {
      if (other.size() != values.size()) {
        return Internal("sync: ranks combine spans of different lengths (" +
                        std::to_string(other.size()) + " and " + std::to_string(values.size()) +
                        ")");
      }
    }
    std::vector<T> result(slots[0].begin(), slots[0].end());
    for (size_t r = 1; r < slots.size(); ++r) {
      for (size_t i = 0; i < result.size(); ++i) result[i] = op(result[i], slots[r][i]);
    }
    CHORUS_RETURN_IF_ERROR(Barrier());
    std::copy(result.begin(), result.end(), values.begin());
    return Status::Ok();
  }

  ThreadShared& shared_;
};

// ------------------------------------------------------------------ process ranks

class ProcessRankGroup final : public RankGroup {
 public:
  ProcessRankGroup(Communicator& comm, Watchdog& watchdog, std::chrono::milliseconds timeout)
      : RankGroup(comm, watchdog), call_{.timeout = timeout} {}

  Status Barrier() override {
    uint64_t token = 0;
    return SumOverRanks(std::span<uint64_t>(&token, 1));
  }
  Status MaxOverRanks(std::span<double> values) override {
    NoteProgress();
    const Status s = comm().AllReduce(values, ReduceOp::kMax, call_);
    NoteProgress();
    return s.ok() ? s : Status(s.code(), "sync (float64 max): " + s.message());
  }
  Status SumOverRanks(std::span<uint64_t> values) override {
    NoteProgress();
    const Status s = comm().AllReduce(values, ReduceOp::kSum, call_);
    NoteProgress();
    return s.ok() ? s : Status(s.code(), "sync (uint64 sum): " + s.message());
  }

 private:
  const CallOptions call_;
};

}  // namespace

// ------------------------------------------------------------------ watchdog

Watchdog::Watchdog(Options options, std::function<void()> on_stall)
    : options_(std::move(options)), on_stall_(std::move(on_stall)), thread_([this] { Watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Watch() {
  constexpr auto kAfterAbort = std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = progress_.load();
  Clock::time_point since = Clock::now();
  bool aborted = false;
  while (!done_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (done_) break;
    const uint64_t now_seen = progress_.load();
    if (now_seen != seen) {
      seen = now_seen;
      since = Clock::now();
      continue;
    }
    const Clock::duration stalled = Clock::now() - since;
    if (!aborted && stalled > options_.stall) {
      std::fprintf(stderr, "%s: no progress for %.0f s; aborting the group\n",
                   options_.program.c_str(), Seconds(stalled));
      on_stall_();
      aborted = true;
      since = Clock::now();
    } else if (aborted && stalled > kAfterAbort) {
      std::fprintf(stderr, "%s: ranks still stuck %lld s after Abort(); exiting\n",
                   options_.program.c_str(), static_cast<long long>(kAfterAbort.count()));
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(options_.exit_code);
    }
  }
}

// ------------------------------------------------------------------ runners

Status RunThreadRanks(int ranks, const CommOptions& options, const RankBody& body,
                      const Watchdog::Options& watch) {
  Result<std::vector<Communicator>> group = CreateLocalGroup(ranks, options);
  if (!group.ok()) return group.status();
  std::vector<Communicator>& comms = *group;
  // Declared after the communicators, so it stops watching before they go away.
  Watchdog watchdog(watch, [&comms] {
    for (Communicator& comm : comms) comm.Abort();
  });
  ThreadShared shared(ranks, watchdog);
  std::vector<Status> results(static_cast<size_t>(ranks));
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<size_t>(ranks));
    for (size_t r = 0; r < comms.size(); ++r) {
      threads.emplace_back([&, r] {
        BindToOwnCore(static_cast<int>(r), ranks);
        ThreadRankGroup view(comms[r], watchdog, shared);
        results[r] = body(view);
        if (!results[r].ok()) comms[r].Abort();  // peers waiting on this rank return now
        view.Leave();
      });
    }
  }
  // The root cause is the first failure that is not the kAborted echo of another's.
  int culprit = -1;
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].ok()) continue;
    if (culprit < 0 || (results[static_cast<size_t>(culprit)].code() == StatusCode::kAborted &&
                        results[r].code() != StatusCode::kAborted)) {
      culprit = static_cast<int>(r);
    }
  }
  if (culprit < 0) return Status::Ok();
  return Prefixed(culprit, results[static_cast<size_t>(culprit)]);
}

Status RunProcessRank(const CommOptions& base, const RankBody& body,
                      const Watchdog::Options& watch) {
  // Starting a process on a busy host can take longer than one call may, so joining gets at
  // least kMinJoinTimeout; the sync calls keep the caller's deadline.
  constexpr std::chrono::milliseconds kMinJoinTimeout{30000};
  Result<CommOptions> options = CommOptionsFromEnvironment(base);
  if (!options.ok()) return options.status();
  const std::chrono::milliseconds call_timeout = options->timeout;
  options->timeout = std::max(call_timeout, kMinJoinTimeout);
  Result<Communicator> comm = Communicator::Create(*options);
  if (!comm.ok()) return Prefixed(options->rank, comm.status());
  // Shared-memory ranks run their collectives on this thread alone; TCP ranks have progress
  // threads started in Create that a binding here would not reach, so they float.
  if (comm->transport() == TransportKind::kShm) BindToOwnCore(comm->rank(), comm->size());
  return RunRankOn(*comm, call_timeout, body, watch);
}

Status RunRankOn(Communicator& comm, std::chrono::milliseconds call_timeout, const RankBody& body,
                 const Watchdog::Options& watch) {
  Watchdog watchdog(watch, [&comm] { comm.Abort(); });
  ProcessRankGroup group(comm, watchdog, call_timeout);
  const Status s = body(group);
  if (s.ok()) return s;
  comm.Abort();  // the other processes stop at their next call instead of at its deadline
  return Prefixed(comm.rank(), s);
}

int ExecUnderLauncher(const std::string& program, int ranks,
                      const std::vector<std::string>& worker_args, int exit_code_on_failure) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    std::fprintf(stderr, "%s: cannot find this program's path in /proc/self/exe: %s\n",
                 program.c_str(), ec.message().c_str());
    return exit_code_on_failure;
  }
  std::vector<std::string> args = {self,          "launch", "-n", std::to_string(ranks),
                                   "--no-prefix", "--",     self};
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(self.c_str(), argv.data());
  std::fprintf(stderr, "%s: cannot run %s: %s\n", program.c_str(), self.c_str(),
               std::strerror(errno));
  return exit_code_on_failure;
}

bool StartedByForeignLauncher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

std::optional<TransportKind> ParseCliTransport(std::string_view name) {
  if (name == "thread") return TransportKind::kThread;
  if (name == "shm") return TransportKind::kShm;
  if (name == "tcp") return TransportKind::kTcp;
  return std::nullopt;
}

double Median(std::vector<double>& values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace chorus::cli
