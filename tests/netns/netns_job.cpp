// netns_job: one rank of the multi-host correctness job that tests/netns/run.sh starts in
// network namespaces (fake hosts) under `chorus launch --hosts` or mpirun.
//
//   chorus launch --hosts h1:2,h2:2 --rsh tests/netns/netns-rsh --store-host 10.77.0.254
//       -- netns_job [--counts 1,7,1000] [--crash-rank R --crash-after K] [--until-failure]
//
// It joins the job from the launcher's environment (CommOptionsFromEnvironment, which also reads
// CHORUS_TRANSPORT and CHORUS_TIMEOUT_MS), then runs all-reduce, reduce-scatter and all-gather
// for every count and for float32 and int32, and checks every element against values computed
// here. Every call gets different inputs, so a stale or misrouted segment shows. float32
// runs out of place and sums; int32 runs in place and takes the max in reduce-scatter. Counts are
// per rank: reduce-scatter's recv.count and all-gather's send.count.
//
// Output and exit status (the harness matches these lines):
//   0  "[rank r] ok: N checks on transport T (E elements)"   N collectives verified, T = tcp...
//   1  a call failed, or an element was wrong (the first wrong ones are printed)
//   2  bad arguments or environment
//   3  --crash-rank: rank R died and this rank's call failed with kUnavailable naming "rank R"
//      before its deadline: "[rank r] unavailable after T ms: <status>"
//   4  --until-failure: a call failed as a cut network should make it fail (kDeadlineExceeded,
//      kUnavailable or kAborted): "[rank r] cut off after T ms in round N: <status>"
//
// With --crash-rank R --crash-after K, rank R SIGKILLs itself after its K-th collective. The
// survivors ignore SIGTERM, so that the launcher's reaction to the death (it stops the job) does
// not race the failure detection under test; its SIGKILL after --grace-ms still ends a survivor
// that hangs. --until-failure repeats the whole sequence until a call fails (the harness cuts a
// host off the network meanwhile); there too every rank ignores SIGTERM, so each reports its own
// failure.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/chorus.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitPeerUnavailable = 3;
constexpr int kExitCutOff = 4;
constexpr size_t kMaxReportedMismatches = 5;

struct Flags {
  std::vector<size_t> counts = {1, 7, 1000, 262147, 2097152};
  int crash_rank = -1;
  int crash_after = 0;
  bool until_failure = false;
};

std::optional<long> ParseLong(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--until-failure") {
      flags.until_failure = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "netns_job: %s needs a value\n", argv[i]);
      return std::nullopt;
    }
    std::string_view value = argv[++i];
    if (arg == "--counts") {
      flags.counts.clear();
      while (!value.empty()) {
        size_t comma = value.find(',');
        std::optional<long> n = ParseLong(value.substr(0, comma));
        if (!n || *n < 1) {
          std::fprintf(stderr, "netns_job: --counts wants positive integers\n");
          return std::nullopt;
        }
        flags.counts.push_back(static_cast<size_t>(*n));
        value = comma == std::string_view::npos ? "" : value.substr(comma + 1);
      }
    } else if (arg == "--crash-rank" || arg == "--crash-after") {
      std::optional<long> n = ParseLong(value);
      if (!n || *n < 0 || *n > (1 << 20)) {
        std::fprintf(stderr, "netns_job: %s wants an integer >= 0\n", argv[i - 1]);
        return std::nullopt;
      }
      (arg == "--crash-rank" ? flags.crash_rank : flags.crash_after) = static_cast<int>(*n);
    } else {
      std::fprintf(stderr, "netns_job: unknown option %s\n", argv[i - 1]);
      return std::nullopt;
    }
  }
  if (flags.counts.empty()) {
    std::fprintf(stderr, "netns_job: --counts is empty\n");
    return std::nullopt;
  }
  return flags;
}

// Input element i of rank r in call c. Small integers, so float32 sums are exact; distinct per
// call, rank and position, so a segment that lands in the wrong place or call is caught.
float FloatInput(int call, int r, size_t i) {
  return static_cast<float>(
      static_cast<int64_t>((i * 31 + static_cast<size_t>(call) * 7 + static_cast<size_t>(r) * 13) %
                           1024) -
      512);
}
int32_t IntInput(int call, int r, size_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(call) << 40) ^
               (static_cast<uint64_t>(r) << 52);
  h ^= h >> 29;
  // |value| < 2^26 keeps the sum over up to 16 ranks inside int32.
  return static_cast<int32_t>(h % (1u << 27)) - (1 << 26);
}

class Job {
 public:
  Job(chorus::Communicator& comm, const Flags& flags) : comm_(comm), flags_(flags) {}

  // Runs every call; the first failure's status (or a mismatch) ends the job.
  chorus::Status Run() {
    for (size_t n : flags_.counts) {
      CHORUS_RETURN_IF_ERROR(FloatAllReduce(n));
      CHORUS_RETURN_IF_ERROR(FloatReduceScatter(n));
      CHORUS_RETURN_IF_ERROR(FloatAllGather(n));
      CHORUS_RETURN_IF_ERROR(IntAllReduce(n));
      CHORUS_RETURN_IF_ERROR(IntReduceScatter(n));
      CHORUS_RETURN_IF_ERROR(IntAllGather(n));
    }
    return chorus::Status::Ok();
  }

  int calls() const { return calls_; }
  uint64_t elements() const { return elements_; }
  // How long the call that failed took.
  Clock::duration failed_call_time() const { return failed_call_time_; }

 private:
  // Runs one collective: the crash comes after rank R's K-th, as the test asked.
  chorus::Status Call(const char* what, size_t n, const std::function<chorus::Status()>& call) {
    Clock::time_point start = Clock::now();
    chorus::Status s = call();
    if (!s.ok()) {
      failed_call_time_ = Clock::now() - start;
      return chorus::Status(s.code(), std::string(what) + " count " + std::to_string(n) +
                                          " (call " + std::to_string(calls_ + 1) +
                                          "): " + s.message());
    }
    ++calls_;
    if (comm_.rank() == flags_.crash_rank && calls_ == flags_.crash_after) {
      std::fprintf(stderr, "[rank %d] crashing on purpose after %d collectives\n", comm_.rank(),
                   calls_);
      std::fflush(stderr);
      ::kill(::getpid(), SIGKILL);
    }
    return chorus::Status::Ok();
  }

  template <typename T>
  chorus::Status Check(const char* what, size_t n, std::span<const T> got,
                       const std::function<T(size_t)>& want) {
    size_t wrong = 0;
    std::string first;
    for (size_t i = 0; i < got.size(); ++i) {
      T expected = want(i);
      if (got[i] == expected) continue;
      if (++wrong <= kMaxReportedMismatches) {
        first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                 std::to_string(expected) + ";";
      }
    }
    elements_ += got.size();
    if (wrong == 0) return chorus::Status::Ok();
    return chorus::Internal(std::string(what) + " count " + std::to_string(n) + ": " +
                            std::to_string(wrong) + " of " + std::to_string(got.size()) +
                            " elements wrong:" + first);
  }

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  chorus::Status FloatAllReduce(size_t n) {
    const int c = calls_;
    std::vector<float> send(n), recv(n, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = FloatInput(c, rank(), i);
    CHORUS_RETURN_IF_ERROR(Call("allreduce float32", n, [&] {
      return comm_.AllReduce(std::span<const float>(send), std::span<float>(recv),
                             chorus::ReduceOp::kSum);
    }));
    return Check<float>("allreduce float32", n, recv, [&](size_t i) {
      float sum = 0;
      for (int q = 0; q < size(); ++q) sum += FloatInput(c, q, i);
      return sum;
    });
  }

  chorus::Status FloatReduceScatter(size_t n) {
    const int c = calls_;
    const size_t total = n * static_cast<size_t>(size());
    std::vector<float> send(total), recv(n, -1.0f);
    for (size_t i = 0; i < total; ++i) send[i] = FloatInput(c, rank(), i);
    CHORUS_RETURN_IF_ERROR(Call("reduce_scatter float32", n, [&] {
      return comm_.ReduceScatter(std::span<const float>(send), std::span<float>(recv),
                                 chorus::ReduceOp::kSum);
    }));
    const size_t offset = n * static_cast<size_t>(rank());
    return Check<float>("reduce_scatter float32", n, recv, [&](size_t i) {
      float sum = 0;
      for (int q = 0; q < size(); ++q) sum += FloatInput(c, q, offset + i);
      return sum;
    });
  }

  chorus::Status FloatAllGather(size_t n) {
    const int c = calls_;
    std::vector<float> send(n), recv(n * static_cast<size_t>(size()), -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = FloatInput(c, rank(), i);
    CHORUS_RETURN_IF_ERROR(Call("allgather float32", n, [&] {
      return comm_.AllGather(std::span<const float>(send), std::span<float>(recv));
    }));
    return Check<float>("allgather float32", n, recv,
                        [&](size_t i) { return FloatInput(c, static_cast<int>(i / n), i % n); });
  }

  chorus::Status IntAllReduce(size_t n) {
    const int c = calls_;
    std::vector<int32_t> inout(n);
    for (size_t i = 0; i < n; ++i) inout[i] = IntInput(c, rank(), i);
    CHORUS_RETURN_IF_ERROR(Call("allreduce int32 in place", n, [&] {
      return comm_.AllReduce(std::span<int32_t>(inout), chorus::ReduceOp::kSum);
    }));
    return Check<int32_t>("allreduce int32 in place", n, inout, [&](size_t i) {
      int32_t sum = 0;
      for (int q = 0; q < size(); ++q) sum += IntInput(c, q, i);
      return sum;
    });
  }

  chorus::Status IntReduceScatter(size_t n) {
    const int c = calls_;
    const size_t total = n * static_cast<size_t>(size());
    std::vector<int32_t> buffer(total);
    for (size_t i = 0; i < total; ++i) buffer[i] = IntInput(c, rank(), i);
    const size_t offset = n * static_cast<size_t>(rank());
    // In place: this rank's result block is its own block of the input.
    std::span<int32_t> own(buffer.data() + offset, n);
    CHORUS_RETURN_IF_ERROR(Call("reduce_scatter int32 max in place", n, [&] {
      return comm_.ReduceScatter(std::span<const int32_t>(buffer), own, chorus::ReduceOp::kMax);
    }));
    return Check<int32_t>("reduce_scatter int32 max in place", n, own, [&](size_t i) {
      int32_t best = IntInput(c, 0, offset + i);
      for (int q = 1; q < size(); ++q) best = std::max(best, IntInput(c, q, offset + i));
      return best;
    });
  }

  chorus::Status IntAllGather(size_t n) {
    const int c = calls_;
    std::vector<int32_t> recv(n * static_cast<size_t>(size()), -1);
    const size_t offset = n * static_cast<size_t>(rank());
    for (size_t i = 0; i < n; ++i) recv[offset + i] = IntInput(c, rank(), i);
    std::span<const int32_t> own(recv.data() + offset, n);
    CHORUS_RETURN_IF_ERROR(Call("allgather int32 in place", n,
                                [&] { return comm_.AllGather(own, std::span<int32_t>(recv)); }));
    return Check<int32_t>("allgather int32 in place", n, recv,
                          [&](size_t i) { return IntInput(c, static_cast<int>(i / n), i % n); });
  }

  chorus::Communicator& comm_;
  const Flags& flags_;
  int calls_ = 0;
  uint64_t elements_ = 0;
  Clock::duration failed_call_time_{};
};

// "rank 1" as a word: not the start of "rank 12".
bool NamesRank(const std::string& text, int rank) {
  const std::string needle = "rank " + std::to_string(rank);
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    size_t end = at + needle.size();
    if (end == text.size() || text[end] < '0' || text[end] > '9') return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Flags> flags = ParseFlags(argc, argv);
  if (!flags) return kExitUsage;

  chorus::Result<chorus::CommOptions> options = chorus::CommOptionsFromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "netns_job: %s\n", options.status().ToString().c_str());
    return kExitUsage;
  }
  const int rank = options->rank;
  const int total_calls = static_cast<int>(flags->counts.size()) * 6;
  if (flags->crash_rank >= 0 &&
      (flags->crash_rank >= options->size || flags->crash_after >= total_calls)) {
    std::fprintf(stderr,
                 "netns_job: --crash-rank must be < %d and --crash-after < %d (the job's calls)\n",
                 options->size, total_calls);
    return kExitUsage;
  }
  if ((flags->crash_rank >= 0 && rank != flags->crash_rank) || flags->until_failure) {
    ::signal(SIGTERM, SIG_IGN);
  }

  chorus::Result<chorus::Communicator> comm = chorus::Communicator::Create(*options);
  if (!comm.ok()) {
    std::fprintf(stderr, "[rank %d] Create: %s\n", rank, comm.status().ToString().c_str());
    return kExitFailed;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string transport(chorus::TransportKindName(comm->transport()));
  std::fprintf(stderr, "[rank %d] joined %d ranks on host %s over %s\n", rank, comm->size(), host,
               transport.c_str());

  Job job(*comm, *flags);
  chorus::Status s = job.Run();
  int rounds = 1;
  for (; s.ok() && flags->until_failure; ++rounds) s = job.Run();
  if (s.ok()) {
    std::printf("[rank %d] ok: %d checks on transport %s (%" PRIu64 " elements)\n", rank,
                job.calls(), transport.c_str(), job.elements());
    return 0;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(job.failed_call_time());
  if (flags->crash_rank >= 0 && s.code() == chorus::StatusCode::kUnavailable &&
      NamesRank(s.message(), flags->crash_rank) && ms < options->timeout) {
    std::printf("[rank %d] unavailable after %lld ms: %s\n", rank,
                static_cast<long long>(ms.count()), s.ToString().c_str());
    return kExitPeerUnavailable;
  }
  if (flags->until_failure &&
      (s.code() == chorus::StatusCode::kDeadlineExceeded ||
       s.code() == chorus::StatusCode::kUnavailable || s.code() == chorus::StatusCode::kAborted)) {
    std::printf("[rank %d] cut off after %lld ms in round %d: %s\n", rank,
                static_cast<long long>(ms.count()), rounds, s.ToString().c_str());
    return kExitCutOff;
  }
  std::printf("[rank %d] FAILED after %lld ms: %s\n", rank, static_cast<long long>(ms.count()),
              s.ToString().c_str());
  return kExitFailed;
}
