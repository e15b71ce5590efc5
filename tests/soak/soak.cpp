// chorus_soak: collectives under CPU contention, every result checked, the slowest call kept.
//
//   chorus_soak --seconds 600 --busy 4                  # what `make soak` runs
//   chorus_soak --seconds 60 --busy 2 --max-bytes 4M    # the bounded form in `make test`
//
// Beside `--busy` busy-loop processes (the contention), it runs jobs one after another until the
// time is up: each job picks a transport (thread, shm, tcp), a rank count (2 to --max-ranks)
// and a seed, and its ranks then make the same random sequence of calls: all-reduce,
// reduce-scatter or all-gather, any dtype and op, a count from 0 to --max-bytes (log-uniform),
// an algorithm the table has for the collective (or the selection's own choice), in place or
// not. Every output element is compared with the exact expected value (tests/support/
// pattern.h). Any wrong element, failed call or missed deadline fails the run, naming the
// call. At the end: jobs, calls, and per transport and size the median and the slowest call.
//
// Exit status: 0 all well, 1 a wrong result or a failed call, 2 bad arguments.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algo/select.h"
#include "chorus/chorus.h"
#include "support/matrix.h"

namespace chorus::soak {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  double seconds = 60;
  int busy = 2;
  int max_ranks = 8;
  size_t max_bytes = size_t{16} << 20;
  int calls_per_job = 40;
  unsigned seed = 1;
  std::vector<TransportKind> transports = {TransportKind::kThread, TransportKind::kShm,
                                           TransportKind::kTcp};
  std::chrono::milliseconds timeout{60000};
};

struct Call {
  CollectiveKind kind;
  DataType dtype;
  ReduceOp op;
  size_t count;  // per-rank block for RS/AG, whole buffer for the others
  int root = 0;
  std::string algorithm;
  bool in_place;
};

// The same sequence on every rank of a job.
std::vector<Call> PlanJob(unsigned seed, int p, const Flags& flags) {
  std::mt19937_64 rng(seed);
  std::vector<Call> calls;
  const auto algorithms = internal::Algorithms();
  for (int i = 0; i < flags.calls_per_job; ++i) {
    Call c;
    c.kind = static_cast<CollectiveKind>(rng() % kNumCollectiveKinds);
    c.dtype = static_cast<DataType>(rng() % kNumDataTypes);
    c.op = internal::Collective(c.kind).reduces ? static_cast<ReduceOp>(rng() % kNumReduceOps)
                                                : ReduceOp::kSum;
    c.root = static_cast<int>(rng() % static_cast<unsigned>(p));
    // Bytes log-uniform over [1, max_bytes]; one call in 16 has no elements at all.
    const double log_max = std::log2(static_cast<double>(flags.max_bytes));
    const auto bytes =
        static_cast<size_t>(std::exp2(std::uniform_real_distribution<>(0, log_max)(rng)));
    size_t total = rng() % 16 == 0 ? 0 : std::max<size_t>(1, bytes / DataTypeSize(c.dtype));
    c.count = internal::Collective(c.kind).counts == internal::Counts::kSame
                  ? total
                  : (total + static_cast<size_t>(p) - 1) / static_cast<size_t>(p);
    std::vector<std::string> names{""};  // the selection's choice
    for (const auto& a : algorithms) {
      if (a.kind == c.kind && a.name != "hierarchical") names.emplace_back(a.name);
    }
    c.algorithm = names[rng() % names.size()];
    // In place, or for all-to-all-v displaced blocks.
    const internal::CollectiveInfo& info = internal::Collective(c.kind);
    c.in_place = rng() % 2 == 0 && (testing::HasInPlace(info) || testing::TakesDispls(info));
    calls.push_back(c);
  }
  return calls;
}

std::string Describe(const Call& c, int p) {
  std::ostringstream out;
  out << CollectiveKindName(c.kind) << " " << DataTypeName(c.dtype) << " " << ReduceOpName(c.op)
      << " count " << c.count << " p " << p << " algo "
      << (c.algorithm.empty() ? "(selected)" : c.algorithm) << (c.in_place ? " in-place" : "");
  return out.str();
}

// Runs `calls` on one rank; returns lines "time <bytes> <seconds>" and "error <text>".
std::string RunRank(Communicator& comm, const std::vector<Call>& calls) {
  const int p = comm.size();
  const int r = comm.rank();
  size_t max_total = 1;
  for (const Call& c : calls) max_total = std::max(max_total, testing::BufferElementsOf(c.kind, c.count, p));
  testing::CallBuffers buffers(max_total);
  std::ostringstream report;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const size_t total = testing::TotalOf(c.kind, c.count, p);
    const size_t elem = DataTypeSize(c.dtype);
    const CallOptions options{.algorithm = c.algorithm};
    const auto start = Clock::now();
    const testing::CheckedResult got = testing::CheckedCall(comm, c.kind, c.dtype, c.op, c.count,
                                                            c.root, c.in_place, options, buffers);
    const Status& s = got.status;
    const std::string& diff = got.diff;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!s.ok()) {
      report << "error call " << i << " (" << Describe(c, p) << ") rank " << r << ": "
             << s.ToString() << "\n";
      return report.str();
    }
    if (!diff.empty()) {
      report << "error call " << i << " (" << Describe(c, p) << ") rank " << r << ": wrong " << diff
             << "\n";
    }
    report << "time " << total * elem << " " << seconds << "\n";
  }
  return report.str();
}

struct Totals {
  int jobs = 0;
  uint64_t calls = 0;
  std::vector<std::string> errors;
  // transport -> size bucket (power of two, bytes) -> call times (slowest rank's view per rank)
  std::map<std::string, std::map<size_t, std::vector<double>>> times;
};

void Absorb(const std::string& transport, const std::string& report, Totals* totals) {
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("error ", 0) == 0) {
      totals->errors.push_back(transport + ": " + line.substr(6));
    } else if (line.rfind("time ", 0) == 0) {
      size_t bytes = 0;
      double seconds = 0;
      std::istringstream(line.substr(5)) >> bytes >> seconds;
      size_t bucket = 1;
      while (bucket < bytes) bucket <<= 1;
      totals->times[transport][bytes == 0 ? 0 : bucket].push_back(seconds);
      ++totals->calls;
    } else if (!line.empty()) {
      totals->errors.push_back(transport + ": " + line);
    }
  }
}

void RunJob(TransportKind kind, int p, unsigned seed, const Flags& flags, Totals* totals) {
  const std::vector<Call> calls = PlanJob(seed, p, flags);
  const std::string name(TransportKindName(kind));
  CommOptions base{.timeout = flags.timeout, .wait = testing::TestWaitMode()};
  std::vector<std::string> reports = testing::RunGroup(
      kind, p, [&](Communicator& comm) { return RunRank(comm, calls); }, base);
  for (const std::string& report : reports) Absorb(name, report, totals);
  ++totals->jobs;
}

std::vector<pid_t> StartBusyLoops(int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::atomic<uint64_t> spin{0};
      for (;;) spin.fetch_add(1, std::memory_order_relaxed);
    }
    pids.push_back(pid);
  }
  return pids;
}

std::string Size(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "chorus_soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds") {
      flags.seconds = std::stod(value());
    } else if (a == "--busy") {
      flags.busy = std::stoi(value());
    } else if (a == "--max-ranks") {
      flags.max_ranks = std::clamp(std::stoi(value()), 2, 16);
    } else if (a == "--max-bytes") {
      std::string v = value();
      size_t scale = 1;
      if (!v.empty() && (v.back() == 'K' || v.back() == 'M' || v.back() == 'G')) {
        scale = v.back() == 'K' ? 1024 : v.back() == 'M' ? (1 << 20) : (size_t{1} << 30);
        v.pop_back();
      }
      flags.max_bytes = std::stoull(v) * scale;
    } else if (a == "--calls") {
      flags.calls_per_job = std::stoi(value());
    } else if (a == "--seed") {
      flags.seed = static_cast<unsigned>(std::stoul(value()));
    } else if (a == "--timeout-ms") {
      flags.timeout = std::chrono::milliseconds(std::stol(value()));
    } else if (a == "--transports") {
      flags.transports.clear();
      std::istringstream in(value());
      std::string t;
      while (std::getline(in, t, ',')) {
        if (t == "thread")
          flags.transports.push_back(TransportKind::kThread);
        else if (t == "shm")
          flags.transports.push_back(TransportKind::kShm);
        else if (t == "tcp")
          flags.transports.push_back(TransportKind::kTcp);
        else {
          std::fprintf(stderr, "chorus_soak: unknown transport '%s'\n", t.c_str());
          return 2;
        }
      }
    } else {
      std::fprintf(stderr,
                   "usage: chorus_soak [--seconds S] [--busy N] [--max-ranks P] [--max-bytes B] "
                   "[--calls N] [--seed N] [--timeout-ms T] [--transports thread,shm,tcp]\n");
      return 2;
    }
  }
  std::printf("chorus_soak: %.0f s, %d busy loops, p <= %d, up to %s per call, seed %u\n",
              flags.seconds, flags.busy, flags.max_ranks, Size(flags.max_bytes).c_str(),
              flags.seed);
  std::fflush(stdout);
  const std::vector<pid_t> busy = StartBusyLoops(flags.busy);
  Totals totals;
  std::mt19937 rng(flags.seed);
  const auto end = Clock::now() + std::chrono::duration<double>(flags.seconds);
  while (Clock::now() < end && totals.errors.empty()) {
    const TransportKind kind = flags.transports[rng() % flags.transports.size()];
    const int p = 2 + static_cast<int>(rng() % static_cast<unsigned>(flags.max_ranks - 1));
    RunJob(kind, p, static_cast<unsigned>(rng()), flags, &totals);
  }
  for (pid_t pid : busy) kill(pid, SIGKILL);
  for (pid_t pid : busy) waitpid(pid, nullptr, 0);

  std::printf("jobs %d, calls %llu, failures %zu\n", totals.jobs,
              static_cast<unsigned long long>(totals.calls), totals.errors.size());
  std::printf("%-8s %10s %8s %12s %12s\n", "transport", "size <=", "calls", "median ms",
              "slowest ms");
  for (auto& [transport, buckets] : totals.times) {
    for (auto& [bucket, times] : buckets) {
      std::sort(times.begin(), times.end());
      std::printf("%-8s %10s %8zu %12.3f %12.3f\n", transport.c_str(), Size(bucket).c_str(),
                  times.size(), 1e3 * times[times.size() / 2], 1e3 * times.back());
    }
  }
  for (const std::string& e : totals.errors) std::printf("FAIL %s\n", e.c_str());
  return totals.errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace chorus::soak

int main(int argc, char** argv) { return chorus::soak::Main(argc, argv); }
