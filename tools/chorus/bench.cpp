// chorus bench: nccl-tests-style timing of every collective over chorus
// ranks (threads of this process, or processes on this host), with exact result checking and the
// peer baselines' CSV rows.
//
//   chorus bench -n 4 --op allreduce -b 32 -e 64M -f 4 -c
//   chorus bench --transport shm -n 4 --ops all -b 32 -e 64M -f 4 -c
//   chorus bench --csv --lib chorus -n 4 --ops allreduce,reduce_scatter,allgather --sizes 32,1M,64M
//
// Ranks: --transport thread runs every rank as a thread with its own Communicator (one
// CreateLocalGroup). --transport shm re-executes this program as `chorus launch -n N --no-prefix
// -- chorus bench --rank-worker ...`: each worker process joins the job's communicator from the
// environment and runs the same per-rank code; the launcher stops the job when a rank fails and
// its exit status becomes ours. --transport tcp works the same way. Under mpirun or srun the
// processes are already there: each is one rank, and --transport mpi (in builds with
// chorus::mpi) runs them over MPI_COMM_WORLD through CreateMpiCommunicator:
//
//   mpirun -np 4 chorus bench --transport mpi --ops all -c --sizes 64,1M
//
// Only rank 0 prints, so every transport prints the same lines (the header names it).
//
// Sizes (see bench_config.h) are total buffer bytes as in nccl-tests. The table's count column is
// per rank like nccl-tests (all-gather: elements sent, reduce-scatter: elements received); the
// CSV's count and bytes are the total buffer, like the peers'.
//
// Timing matches the peer baselines (shared/peers/bench_common.h) so rows can be compared: per
// timed iteration all ranks meet at an untimed barrier and each times one call; an iteration
// costs what its slowest rank measured (one max over ranks of the recorded times, after the timed
// loop), and a size reports the median and the minimum over iterations. Without --iters the count
// comes from a probe of 3 calls: enough for 0.2 s, within [20, 10000], followed by an extra
// warm-up of a tenth of that. Sizes slower than 0.1 s per call are capped at about 2 s per
// placement (at least 5 calls) so that a 64 MiB sweep stays short on two cores. The barriers and
// maxima go through a RankGroup (rank_group.h): std::barrier and shared memory on threads, chorus
// collectives between processes.
//
// Checking (-c, patterns in bench_check.h): every element of every rank's output is compared bit
// for bit with the value computed here, and the counts are summed over ranks.
//
// Buffers are allocated once per rank for the largest size and touched before the first call;
// each size refills them outside the timed loop. Every call has a deadline (--timeout-ms); the
// first failure aborts the group, is printed, and ends the run. A watchdog ends a process whose
// ranks make no progress well past the deadline, so the benchmark never hangs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "algo/select.h"
#include "bench_check.h"
#include "bench_config.h"
#include "busy.h"
#include "chorus/chorus.h"
#include "commands.h"
#include "base/collectives.h"
#include "rank_group.h"
#include "tuning_env.h"

namespace chorus::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Automatic iteration count, as the peers choose it (bench_common.h choose_iters), for
// BenchConfig::min_seconds of calls (0.2 s by default); a longer --min-seconds lifts the ceiling
// to kMaxLongIters.
constexpr int kMinIters = 20;
constexpr int kMaxIters = 10000;
constexpr int kMaxLongIters = 4'000'000;
constexpr int kProbeIters = 3;
constexpr int kMaxExtraWarmup = 2000;
// Cap for slow sizes: about this long per placement, but never fewer than kMinCappedIters calls.
constexpr double kMaxSeconds = 2.0;
constexpr int kMinCappedIters = 5;
// Exit codes.
constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;
constexpr int kExitFailed = 3;
constexpr int kExitHung = 4;

enum class Placement : uint8_t { kOutOfPlace, kInPlace };

std::string_view PlacementName(Placement where) {
  return where == Placement::kInPlace ? "in-place" : "out-of-place";
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<uint8_t, FreeDeleter>;

struct Timing {
  double median_s = 0;
  double min_s = 0;
  double mean_s = 0;  // what a user feels: the calls that waited a scheduler slice count
  double max_s = 0;   // the slowest call
  size_t calls = 0;
  double total_s = 0;  // of the timed calls (the slowest rank's, per call)
};

struct Row {
  SizePoint size;
  Timing time[2];          // by Placement
  uint64_t wrong[2] = {};  // by Placement, summed over ranks
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// nccl-tests prints times with fewer decimals as they grow.
std::string FormatTime(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return buf;
}

std::string RightTrimmed(std::string s) {
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

// How many timed calls, and how many extra warm-up calls, for a call that took `probe_s`.
struct IterPlan {
  int iters = 0;
  int extra_warmup = 0;
};

IterPlan ChooseIters(double probe_s, double min_seconds) {
  const bool longer = min_seconds > kDefaultMinSeconds;
  const int max_iters = longer ? kMaxLongIters : kMaxIters;
  double want = probe_s > 0 ? std::ceil(min_seconds / probe_s) : max_iters;
  want = std::clamp<double>(want, kMinIters, max_iters);
  if (!longer && want * probe_s > kMaxSeconds) {
    want = std::max<double>(kMinCappedIters, std::floor(kMaxSeconds / probe_s));
  }
  const int iters = static_cast<int>(want);
  return {iters, std::min(iters / 10, kMaxExtraWarmup)};
}

// Median, minimum and mean of the per-iteration times (already the slowest rank's).
Timing Summarize(std::vector<double>& times) {
  Timing timing;
  for (double t : times) timing.total_s += t;
  timing.calls = times.size();
  timing.mean_s = times.empty() ? 0 : timing.total_s / static_cast<double>(times.size());
  timing.median_s = Median(times);  // sorts
  timing.min_s = times.empty() ? 0 : times.front();
  timing.max_s = times.empty() ? 0 : times.back();
  return timing;
}

// ------------------------------------------------------------------------------ one rank

// One rank's side of the whole run, on any transport. Rank 0 also prints the table and keeps
// the totals.
class BenchRank {
 public:
  BenchRank(const BenchConfig& cfg, RankGroup& group)
      : cfg_(cfg),
        group_(group),
        rank_(group.rank()),
        ranks_(group.size()),
        elem_(DataTypeSize(cfg.dtype)) {
    // --algo applies to the collectives that have it; the others select. Made once: a call
    // allocates nothing.
    for (int k = 0; k < kNumCollectiveKinds; ++k) {
      CallOptions& call = call_[static_cast<size_t>(k)];
      if (internal::Implements(static_cast<CollectiveKind>(k), cfg.algo)) call.algorithm = cfg.algo;
      call.timeout = cfg.timeout;  // a process rank's communicator may have a longer default
    }
    for (BenchOp op : cfg_.ops) {
      sizes_.push_back(MakeSizes(cfg_, op, ranks_));
      patterns_.push_back(MakePatterns(op, cfg_.dtype, cfg_.redop, ranks_));
      for (const SizePoint& s : sizes_.back()) max_elems_ = std::max(max_elems_, s.total);
    }
    layout_.send.reserve(static_cast<size_t>(ranks_));
    layout_.recv.reserve(static_cast<size_t>(ranks_));
  }

  // Every collective and size in turn; the first failure ends it.
  Status Run();
  // Rank 0: wrong elements over every rank, size and placement.
  uint64_t total_wrong() const { return total_wrong_; }

 private:
  Status Allocate();
  Status BenchSize(size_t op_index, const SizePoint& size);
  // One untimed call, with the failure described.
  Status Call(BenchOp op, Placement where, const SizePoint& size);
  Status RunOp(BenchOp op, Placement where, const SizePoint& size);
  internal::CallArgs Args(BenchOp op, Placement where, const SizePoint& size) const;
  Status Described(const Status& status, BenchOp op, Placement where, const SizePoint& size) const;
  void Prepare(size_t op_index, Placement where, const SizePoint& size);
  uint64_t Verify(size_t op_index, Placement where, const SizePoint& size) const;
  void PrintTableHeader(BenchOp op) const;
  void Report(BenchOp op, const Row& row);
  void PrintSummary() const;

  const BenchConfig& cfg_;
  RankGroup& group_;
  const int rank_;
  const int ranks_;
  const size_t elem_;
  std::array<CallOptions, kNumCollectiveKinds> call_;  // by collective
  std::vector<std::vector<SizePoint>> sizes_;          // [op index]
  std::vector<Patterns> patterns_;                     // [op index]
  size_t max_elems_ = 0;
  // The current call's block lengths (LayoutAt), made once per size and op, not per call.
  mutable BlockLayout layout_;
  mutable const SizePoint* layout_size_ = nullptr;
  mutable BenchOp layout_op_ = BenchOp::kAllReduce;
  const BlockLayout& LayoutOf(BenchOp op, const SizePoint& size) const;
  Bytes send_;
  Bytes recv_;

  // Rank 0's totals.
  uint64_t total_wrong_ = 0;
  double busbw_sum_ = 0;
  int busbw_count_ = 0;
};

Status BenchRank::Run() {
  if (cfg_.root >= ranks_) {
    return InvalidArgument("--root " + std::to_string(cfg_.root) + " is not a rank of the " +
                           std::to_string(ranks_) + "-rank job");
  }
  CHORUS_RETURN_IF_ERROR(Allocate());
  CHORUS_RETURN_IF_ERROR(group_.Barrier());
  if (rank_ == 0 && cfg_.csv && cfg_.csv_header) {
    std::printf("lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs\n");
    std::fflush(stdout);
  }
  for (size_t op_index = 0; op_index < cfg_.ops.size(); ++op_index) {
    if (rank_ == 0 && !cfg_.csv) PrintTableHeader(cfg_.ops[op_index]);
    for (const SizePoint& size : sizes_[op_index]) {
      CHORUS_RETURN_IF_ERROR(BenchSize(op_index, size));
    }
    if (rank_ == 0 && !cfg_.csv) std::printf("#\n");
  }
  if (rank_ == 0) PrintSummary();
  return Status::Ok();
}

// Each rank allocates and touches its own buffers once, for the largest size.
Status BenchRank::Allocate() {
  const size_t bytes = std::max<size_t>(4096, (max_elems_ * elem_ + 4095) / 4096 * 4096);
  send_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  recv_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (send_ == nullptr || recv_ == nullptr) {
    return Unavailable("cannot allocate 2 x " + std::to_string(bytes) + " bytes");
  }
  std::memset(send_.get(), 0, bytes);
  std::memset(recv_.get(), 0, bytes);
  return Status::Ok();
}

Status BenchRank::BenchSize(size_t op_index, const SizePoint& size) {
  const BenchOp op = cfg_.ops[op_index];
  Row row;
  row.size = size;
  for (Placement where : {Placement::kOutOfPlace, Placement::kInPlace}) {
    const int slot = static_cast<int>(where);
    if (cfg_.check) {
      Prepare(op_index, where, size);
      CHORUS_RETURN_IF_ERROR(group_.Barrier());
      CHORUS_RETURN_IF_ERROR(Call(op, where, size));
      uint64_t wrong = Verify(op_index, where, size);
      CHORUS_RETURN_IF_ERROR(group_.SumOverRanks(std::span<uint64_t>(&wrong, 1)));
      row.wrong[slot] = wrong;
    }
    // --csv reports out-of-place only (as the peers do), so in-place is not timed there; a
    // collective without an in-place form (all-to-all-v) times its one form twice.
    if (cfg_.csv && where == Placement::kInPlace) continue;

    Prepare(op_index, where, size);
    for (int i = 0; i < cfg_.warmup; ++i) CHORUS_RETURN_IF_ERROR(Call(op, where, size));
    CHORUS_RETURN_IF_ERROR(group_.Barrier());
    std::vector<double> times;
    // Times `n` more calls, each started together; returns the slowest rank's wall time.
    auto timed = [&](int n, double* wall_s) -> Status {
      const Clock::time_point begin = Clock::now();
      for (int i = 0; i < n; ++i) {
        CHORUS_RETURN_IF_ERROR(group_.StartTogether());
        const Clock::time_point start = Clock::now();
        const Status status = RunOp(op, where, size);
        times.push_back(Seconds(Clock::now() - start));
        CHORUS_RETURN_IF_ERROR(Described(status, op, where, size));
      }
      *wall_s = Seconds(Clock::now() - begin);
      // Every rank derives the same plan from the same maximum.
      return group_.MaxOverRanks(std::span<double>(wall_s, 1));
    };
    if (cfg_.iters > 0) {
      double wall_s = 0;
      CHORUS_RETURN_IF_ERROR(timed(cfg_.iters, &wall_s));
    } else {
      // The probe is timed as the calls are (a barrier there once made one 4 ms scheduler
      // tick of a busy machine plan 500 calls for 2 s), and its calls count.
      double probe_s = 0;
      CHORUS_RETURN_IF_ERROR(timed(kProbeIters, &probe_s));
      IterPlan plan = ChooseIters(probe_s / kProbeIters, cfg_.min_seconds);
      for (int i = 0; i < plan.extra_warmup; ++i) CHORUS_RETURN_IF_ERROR(Call(op, where, size));
      times.reserve(static_cast<size_t>(plan.iters));
      // A plan made from a probe that hit a stall falls short of min_seconds: the run goes on,
      // planned again from what the calls so far took, until it spans min_seconds or reaches
      // the plan's cap (a few rounds at most).
      double spent_s = probe_s;
      int done = kProbeIters;
      for (int round = 0; round < 4 && done < plan.iters; ++round) {
        double wall_s = 0;
        CHORUS_RETURN_IF_ERROR(timed(plan.iters - done, &wall_s));
        spent_s += wall_s;
        done = plan.iters;
        if (cfg_.min_seconds <= kDefaultMinSeconds || spent_s >= cfg_.min_seconds) break;
        const IterPlan more = ChooseIters(spent_s / done, cfg_.min_seconds);
        plan.iters = std::max(done, more.iters);
        times.reserve(static_cast<size_t>(plan.iters));
      }
    }
    CHORUS_RETURN_IF_ERROR(group_.MaxOverRanks(times));
    row.time[slot] = Summarize(times);
  }
  if (rank_ == 0) Report(op, row);
  return Status::Ok();
}

Status BenchRank::Call(BenchOp op, Placement where, const SizePoint& size) {
  const Status status = RunOp(op, where, size);
  group_.NoteProgress();  // warm-ups have no barriers
  return Described(status, op, where, size);
}

Status BenchRank::Described(const Status& status, BenchOp op, Placement where,
                            const SizePoint& size) const {
  if (status.ok()) return status;
  return {status.code(), std::string(BenchOpName(op)) + " of " +
                             std::to_string(size.total * elem_) + " B, " +
                             std::string(PlacementName(where)) + ": " + status.ToString()};
}

const BlockLayout& BenchRank::LayoutOf(BenchOp op, const SizePoint& size) const {
  if (layout_size_ != &size || layout_op_ != op) {
    LayoutAt(op, size, ranks_, rank_, &layout_);
    layout_size_ = &size;
    layout_op_ = op;
  }
  return layout_;
}

// The call's buffers, as the collective's count relation (base/collectives.h) has them: out of
// place send_ and recv_; in place recv_, where a smaller buffer is this rank's block of it.
internal::CallArgs BenchRank::Args(BenchOp op, Placement where, const SizePoint& size) const {
  const DataType dt = cfg_.dtype;
  const internal::CollectiveInfo& c = internal::Collective(op);
  internal::CallArgs args{op, {}, {}, cfg_.redop, cfg_.root, {}, {}};
  if (c.counts == internal::Counts::kNone) return args;
  const BlockLayout& layout = LayoutOf(op, size);
  const size_t send_count = OffsetOf(layout.send, layout.send.size());
  const size_t recv_count = OffsetOf(layout.recv, layout.recv.size());
  uint8_t* send = send_.get();
  uint8_t* recv = recv_.get();
  if (where == Placement::kInPlace && !c.in_place.empty()) {
    if (layout.send.size() == layout.recv.size()) {
      send = recv;  // one buffer for both
    } else {
      // The in-place block: this rank's of the buffer with more blocks.
      const bool recv_large = layout.recv.size() > layout.send.size();
      const std::vector<size_t>& large = recv_large ? layout.recv : layout.send;
      uint8_t* own = recv + OffsetOf(large, static_cast<size_t>(rank_)) * elem_;
      if (recv_large) {
        send = own;  // the block, inside the receive buffer
      } else {
        send = recv;  // the whole buffer is the send; the block inside it receives
        recv = own;
      }
    }
  }
  args.send = {send, send_count, dt};
  args.recv = {recv, recv_count, dt};
  if (c.varied) {
    if (internal::SendIsPerRank(c.counts)) args.send_counts = layout.send;
    if (internal::RecvIsPerRank(c.counts)) args.recv_counts = layout.recv;
  }
  return args;
}

Status BenchRank::RunOp(BenchOp op, Placement where, const SizePoint& size) {
  return internal::RunCollective(group_.comm(), Args(op, where, size),
                                 call_[static_cast<size_t>(op)]);
}

void BenchRank::Prepare(size_t op_index, Placement where, const SizePoint& size) {
  using internal::Outcome;
  const BenchOp op = cfg_.ops[op_index];
  const internal::CollectiveInfo& c = internal::Collective(op);
  if (c.outcome == Outcome::kNothing) return;
  const uint8_t* pattern = patterns_[op_index].input[static_cast<size_t>(rank_)].data();
  const internal::CallArgs args = Args(op, where, size);
  auto* in = static_cast<uint8_t*>(const_cast<void*>(args.send.data));
  // Moved data starts from all 0xFF, so that a block nobody wrote shows.
  if (where == Placement::kOutOfPlace || c.outcome == Outcome::kMoved) {
    std::memset(recv_.get(), 0xFF, std::max(args.recv.count, size.total) * elem_);
  }
  // Every block of the send is the rank's pattern from the block's own offset.
  FillPattern(in, args.send.count, elem_, pattern, 0);
}

uint64_t BenchRank::Verify(size_t op_index, Placement where, const SizePoint& size) const {
  using internal::Outcome;
  const BenchOp op = cfg_.ops[op_index];
  const internal::CollectiveInfo& c = internal::Collective(op);
  const Patterns& pat = patterns_[op_index];
  const internal::CallArgs args = Args(op, where, size);
  const auto* out = static_cast<const uint8_t*>(args.recv.data);
  const bool writes_recv = !c.recv_only_at_root || rank_ == cfg_.root;
  switch (c.outcome) {
    case Outcome::kCombined:
      return CountMismatches(out, size.total, elem_, pat.expected.data(), 0);
    case Outcome::kCombinedBlock: {  // rank r holds block r of the send's blocks
      const BlockLayout& layout = LayoutOf(op, size);
      return CountMismatches(out, layout.recv[0], elem_, pat.expected.data(),
                             OffsetOf(layout.send, static_cast<size_t>(rank_)) % kPeriod);
    }
    case Outcome::kCombinedAtRoot:
      return writes_recv ? CountMismatches(out, size.total, elem_, pat.expected.data(), 0) : 0;
    case Outcome::kMoved: {
      if (!writes_recv) return 0;
      const std::vector<size_t> recv = LayoutOf(op, size).recv;  // the sender's replaces it
      uint64_t wrong = 0;
      for (size_t j = 0; j < recv.size(); ++j) {
        const internal::BlockSource from = c.source(rank_, static_cast<int>(j), cfg_.root);
        // Where the block starts in the sender's send, which it filled from offset 0.
        LayoutAt(op, size, ranks_, from.rank, &layout_);
        layout_size_ = nullptr;
        const size_t phase = OffsetOf(layout_.send, static_cast<size_t>(from.block));
        wrong += CountMismatches(out + OffsetOf(recv, j) * elem_, recv[j], elem_,
                                 pat.input[static_cast<size_t>(from.rank)].data(), phase);
      }
      return wrong;
    }
    case Outcome::kNothing:
      break;
  }
  return 0;
}

// ------------------------------------------------------------------------------ rank 0's output

void BenchRank::PrintTableHeader(BenchOp op) const {
  const bool reduces = internal::Collective(op).reduces;
  const std::string algo = cfg_.algo.empty() ? "" : "  algo " + cfg_.algo;
  std::printf("# chorus bench: op %s  ranks %d  dtype %s  redop %s  transport %s%s\n",
              std::string(BenchOpName(op)).c_str(), ranks_,
              std::string(DataTypeName(cfg_.dtype)).c_str(),
              reduces ? std::string(ReduceOpName(cfg_.redop)).c_str() : "none",
              std::string(TransportKindName(group_.transport())).c_str(), algo.c_str());
  std::string step = !cfg_.sizes.empty()   ? "list"
                     : cfg_.step_bytes > 0 ? std::to_string(cfg_.step_bytes) + "(bytes)"
                                           : std::to_string(cfg_.step_factor) + "(factor)";
  std::string iters = cfg_.iters > 0 ? std::to_string(cfg_.iters) : "auto";
  const size_t segment = cfg_.segment_bytes > 0 ? cfg_.segment_bytes : CommOptions{}.segment_bytes;
  std::printf(
      "# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %s validation: %d "
      "timeout: %lld ms segment: %zu B\n#\n",
      cfg_.min_bytes, cfg_.max_bytes, step.c_str(), cfg_.warmup, iters.c_str(), cfg_.check ? 1 : 0,
      static_cast<long long>(cfg_.timeout.count()), segment);
  if (cfg_.busy > 0) {
    std::printf(
        "# beside %d busy process%s; time: the median, mean: the mean per call (at least "
        "%g s of calls)\n",
        cfg_.busy, cfg_.busy == 1 ? "" : "es", cfg_.min_seconds);
  }
  // Column layout of Report(): 44 characters of size, count, type and redop, then two groups of
  // 33 (time, algbw, busbw, #wrong; 42 with the mean after the time), each group's title centred
  // above it.
  const int group = cfg_.mean ? 42 : 33;
  std::string titles = "#" + std::string(static_cast<size_t>(44 + 2 * group), ' ');
  titles.replace(static_cast<size_t>(44 + (group - 12) / 2), 12, "out-of-place");
  titles.replace(static_cast<size_t>(44 + group + (group - 8) / 2), 8, "in-place");
  std::printf("%s\n", RightTrimmed(titles).c_str());
  const auto columns = [this](const char* time, const char* mean, const char* algbw,
                              const char* busbw, const char* wrong) {
    char cell[64];
    if (cfg_.mean) {
      std::snprintf(cell, sizeof(cell), "  %7s  %7s  %6s  %6s  %6s", time, mean, algbw, busbw,
                    wrong);
    } else {
      std::snprintf(cell, sizeof(cell), "  %7s  %6s  %6s  %6s", time, algbw, busbw, wrong);
    }
    return std::string(cell);
  };
  char head[64];
  std::snprintf(head, sizeof(head), "# %10s  %12s  %8s  %6s", "size", "count", "type", "redop");
  const std::string titles_row = columns("time", "mean", "algbw", "busbw", "#wrong");
  std::printf("%s%s%s\n", head, titles_row.c_str(), titles_row.c_str());
  std::snprintf(head, sizeof(head), "# %10s  %12s  %8s  %6s", "(B)", "(elements)", "", "");
  const std::string units = columns("(us)", "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("%s\n", RightTrimmed(head + units + units).c_str());
  std::fflush(stdout);
}

void BenchRank::Report(BenchOp op, const Row& row) {
  const double bytes = static_cast<double>(row.size.total * elem_);
  const double factor = BusFactor(op, ranks_);
  auto algbw = [bytes](const Timing& t) { return t.median_s > 0 ? bytes / t.median_s / 1e9 : 0; };
  total_wrong_ += row.wrong[0] + row.wrong[1];
  if (cfg_.csv) {
    const Timing& t = row.time[0];
    // The mean rides on a comment line before its row, so the row keeps the peers' 9 columns.
    if (cfg_.mean) {
      std::printf("#mean_us,%.3f,%zu,%.3f,%.3f\n", t.mean_s * 1e6, t.calls, t.total_s,
                  t.max_s * 1e6);
    }
    std::printf("%s,%s,%d,%zu,%zu,%.3f,%.3f,%.4f,%.4f\n", cfg_.lib.c_str(),
                std::string(BenchOpName(op)).c_str(), ranks_, row.size.total,
                row.size.total * elem_, t.median_s * 1e6, t.min_s * 1e6, algbw(t),
                algbw(t) * factor);
    if (row.wrong[0] + row.wrong[1] > 0) {
      std::fprintf(stderr, "chorus bench: %s %zu B: %llu wrong out-of-place, %llu in-place\n",
                   std::string(BenchOpName(op)).c_str(), row.size.total * elem_,
                   static_cast<unsigned long long>(row.wrong[0]),
                   static_cast<unsigned long long>(row.wrong[1]));
    }
    std::fflush(stdout);
    return;
  }
  const bool reduces = internal::Collective(op).reduces;
  std::string line(256, '\0');
  int len =
      std::snprintf(line.data(), line.size(), "%12zu  %12zu  %8s  %6s", row.size.total * elem_,
                    row.size.block, std::string(DataTypeName(cfg_.dtype)).c_str(),
                    reduces ? std::string(ReduceOpName(cfg_.redop)).c_str() : "none");
  line.resize(static_cast<size_t>(len));
  for (int slot = 0; slot < 2; ++slot) {
    const Timing& t = row.time[slot];
    char wrong[24];
    if (cfg_.check) {
      std::snprintf(wrong, sizeof(wrong), "%6llu",
                    static_cast<unsigned long long>(row.wrong[slot]));
    } else {
      std::snprintf(wrong, sizeof(wrong), "%6s", "N/A");
    }
    char cell[96];
    const std::string mean = cfg_.mean ? "  " + FormatTime(t.mean_s * 1e6) : "";
    std::snprintf(cell, sizeof(cell), "  %s%s  %6.2f  %6.2f  %s",
                  FormatTime(t.median_s * 1e6).c_str(), mean.c_str(), algbw(t), algbw(t) * factor,
                  wrong);
    line += cell;
    busbw_sum_ += algbw(t) * factor;
    ++busbw_count_;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void BenchRank::PrintSummary() const {
  if (cfg_.csv) return;
  std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(total_wrong_),
              total_wrong_ ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g\n#\n",
              busbw_count_ > 0 ? busbw_sum_ / busbw_count_ : 0.0);
  std::fflush(stdout);
}

// ------------------------------------------------------------------------------ the runs

CommOptions BenchCommOptions(const BenchConfig& cfg, TransportKind transport) {
  CommOptions options;
  options.timeout = cfg.timeout;
  options.transport = transport;
  if (cfg.segment_bytes > 0) options.segment_bytes = cfg.segment_bytes;
  options.tuning_file = TuningFileFromEnvironment();
  return options;
}

Watchdog::Options BenchWatch(const BenchConfig& cfg) {
  return {.program = "chorus bench",
          .stall = 2 * cfg.timeout + std::chrono::seconds(10),
          .exit_code = kExitHung};
}

int FailureExit(const Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "chorus bench: FAILED: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
}

// Threads: every rank of this process. Processes: this worker's rank.
int RunBenchRanks(const BenchConfig& cfg) {
  uint64_t wrong = 0;
  const RankBody body = [&cfg, &wrong](RankGroup& group) {
    BenchRank rank(cfg, group);
    const Status status = rank.Run();
    if (group.rank() == 0) wrong = rank.total_wrong();
    return status;
  };
  Status status;
  switch (cfg.transport) {
    case TransportKind::kThread:
      status = RunThreadRanks(cfg.ranks, BenchCommOptions(cfg, TransportKind::kThread), body,
                              BenchWatch(cfg));
      break;
    case TransportKind::kMpi:
      status = RunMpiRank(BenchCommOptions(cfg, TransportKind::kMpi), body, BenchWatch(cfg));
      break;
    default:
      status = RunProcessRank(BenchCommOptions(cfg, cfg.transport), body, BenchWatch(cfg));
      break;
  }
  if (!status.ok()) return FailureExit(status);
  return wrong > 0 ? kExitWrong : 0;
}

void PrintAlgorithms() {
  std::vector<std::array<std::string, 4>> rows = {
      {"# collective", "name", "allowed when", "what it does"}};
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    rows.push_back({std::string(CollectiveKindName(info.kind)), std::string(info.name),
                    std::string(info.rule), std::string(info.description)});
  }
  std::array<size_t, 3> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::printf("%-*s  %-*s  %-*s  %s\n", static_cast<int>(width[0]), row[0].c_str(),
                static_cast<int>(width[1]), row[1].c_str(), static_cast<int>(width[2]),
                row[2].c_str(), row[3].c_str());
  }
  std::printf(
      "# Of the entries whose rule allows a call, the one the cost model predicts fastest runs\n"
      "# (see `chorus model`; ties go to the earlier entry); --algo NAME forces one.\n");
}

}  // namespace

void AddBenchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench", "nccl-tests-style benchmark of every collective over thread or process ranks");
  sub->add_option("--op", flags->op,
                  "collective: " + BenchOpNames() + " (also all_reduce, bcast, ...)")
      ->capture_default_str();
  sub->add_option("--ops", flags->ops,
                  "comma-separated collectives run one after another, or 'all' (overrides --op)");
  sub->add_option("-t,--transport", flags->transport,
                  "thread: ranks are threads of this process; shm: ranks are processes on this "
                  "host (started through chorus launch); tcp: processes over TCP on loopback; "
                  "mpi: under mpirun, each process one rank over MPI (builds with chorus::mpi)")
      ->capture_default_str();
  sub->add_option("-n,--ranks", flags->ranks,
                  "ranks (threads or processes); under mpirun or srun, the job's size instead")
      ->capture_default_str();
  sub->add_option("-b,--minbytes", flags->min_bytes,
                  "smallest total buffer size in bytes; K, M, G are powers of 1024")
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", flags->max_bytes, "largest total buffer size in bytes")
      ->capture_default_str();
  sub->add_option("-f,--stepfactor", flags->step_factor, "multiply the size by this per step")
      ->capture_default_str();
  sub->add_option("-i,--stepbytes", flags->step_bytes, "add this many bytes per step instead");
  sub->add_option("--sizes", flags->sizes,
                  "comma-separated total buffer sizes (K, M, G allowed) instead of -b/-e/-f/-i");
  sub->add_option("-d,--datatype", flags->dtype,
                  "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64")
      ->capture_default_str();
  sub->add_option("-o,--reduce-op", flags->redop, "sum prod min max avg")->capture_default_str();
  sub->add_option("-w,--warmup_iters,--warmup-iters", flags->warmup, "untimed calls per size")
      ->capture_default_str();
  sub->add_option("--iters", flags->iters,
                  "timed calls per size; 0 = enough for --min-seconds (20..10000 calls, capped "
                  "near 2 s)")
      ->capture_default_str();
  sub->add_option("--min-seconds", flags->min_seconds,
                  "with automatic --iters, time at least this long per size (barrier and call "
                  "per iteration); default 0.2, or 2 with --busy. Above 0.2 the count may reach "
                  "4,000,000 calls and slow sizes are not capped");
  sub->add_option("--busy", flags->busy,
                  "run N busy processes (unbound spinning loops) beside the job for the whole "
                  "run, the load of a data loader or a compile; implies --mean and 2 s per size");
  sub->add_flag("--mean", flags->mean,
                "also report the mean per call (table: a mean column; CSV: a line "
                "'#mean_us,MEAN,CALLS,SECONDS,MAX_US' before each row: the mean, the timed calls, "
                "their total time and the slowest of them)");
  const CLI::Option* check =
      sub->add_option("-c,--check", flags->check,
                      "check every output element: -c or --check=1 enables, --check=0 disables")
          ->expected(0, 1);
  flags->check_given = [check] { return check->count() > 0; };
  sub->add_flag("--csv", flags->csv,
                "print only CSV rows lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,"
                "busbw_GBs (out-of-place; count and bytes of the total buffer)");
  sub->add_flag("--header", flags->csv_header, "with --csv, print the CSV header line first");
  sub->add_option("--lib", flags->lib, "the CSV lib column")->capture_default_str();
  sub->add_option("--root", flags->root,
                  "the root rank of the rooted collectives (broadcast, reduce, gather, scatter "
                  "and their v forms)")
      ->capture_default_str();
  sub->add_option("--timeout-ms", flags->timeout_ms, "deadline of every collective call")
      ->capture_default_str();
  sub->add_option("--segment-bytes", flags->segment_bytes,
                  "CommOptions::segment_bytes (K, M, G allowed); default: the library's");
  sub->add_option("--algo", flags->algo,
                  "run every timed call with this algorithm (CallOptions::algorithm); default: "
                  "the selection table's choice per call");
  sub->add_flag("--list-algos", flags->list_algos,
                "print the algorithm selection table (collective, name, rule, description) and "
                "exit");
  // Internal: set by the parent for each process it starts through chorus launch.
  sub->add_flag("--rank-worker", flags->rank_worker, "")->group("");
  sub->footer(
      "Time = median over iterations of the slowest rank's time; GB = 1e9; busbw = algbw x the "
      "nccl-tests factor: 2(p-1)/p for allreduce, 1 for broadcast and reduce, (p-1)/p for the "
      "others.\nExit status: 0 ok, 1 wrong results, 2 bad "
      "arguments, 3 a chorus call failed, 4 ranks hung; with --transport shm, that of the first "
      "rank to fail (128 + signal for a killed rank), as chorus launch reports it.");
  sub->callback([flags, &exit_code] {
    if (flags->list_algos) {
      PrintAlgorithms();
      exit_code = 0;
      return;
    }
    Result<BenchConfig> cfg = MakeConfig(*flags);
    if (!cfg.ok()) {
      std::fprintf(stderr, "chorus bench: %s\n", cfg.status().message().c_str());
      exit_code = kExitUsage;
      return;
    }
    if (cfg->transport == TransportKind::kMpi && !StartedByForeignLauncher()) {
      // chorus launch could start the processes, but each would then be an MPI job of its own.
      std::fprintf(stderr,
                   "chorus bench: --transport mpi runs as the ranks of an MPI job: start it with "
                   "mpirun -np N chorus bench --transport mpi ... (or srun)\n");
      exit_code = kExitUsage;
      return;
    }
    // The busy processes belong to the parent (a worker only knows how many there are); they
    // outlive an exec into chorus launch and die with this process.
    std::unique_ptr<BusyLoops> busy;
    if (cfg->busy > 0 && !flags->rank_worker && StartedByForeignLauncher()) {
      std::fprintf(stderr,
                   "chorus bench: --busy starts its busy processes from one parent; under mpirun "
                   "or srun every rank would: start them beside the job instead (as "
                   "scripts/compare-peers.sh BUSY=N does)\n");
      exit_code = kExitUsage;
      return;
    }
    if (cfg->busy > 0 && !flags->rank_worker) {
      Result<std::unique_ptr<BusyLoops>> started = BusyLoops::Start(cfg->busy);
      if (!started.ok()) {
        exit_code = FailureExit(started.status());
        return;
      }
      busy = std::move(*started);
    }
    if (flags->rank_worker || StartedByForeignLauncher()) {
      // This process is one of a launcher's ranks (ours, or mpirun's / srun's): processes meet
      // through shared memory on one host, TCP across hosts, unless tcp was asked for.
      if (cfg->transport == TransportKind::kThread) cfg->transport = TransportKind::kAuto;
      exit_code = RunBenchRanks(*cfg);
    } else if (cfg->transport != TransportKind::kThread) {
      exit_code = ExecUnderLauncher("chorus bench", cfg->ranks, WorkerArgs(*flags), kExitFailed);
    } else {
      exit_code = RunBenchRanks(*cfg);
    }
  });
}

}  // namespace chorus::cli
