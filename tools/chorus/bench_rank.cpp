// bench_rank.cpp: the generic part of a `chorus bench` rank (bench_rank.h): the run over
// collectives and sizes, the timing loop with its automatic iteration count, and rank 0's
// table, CSV rows and summary. What a call's buffers hold and how its result is checked is
// per collective, in bench_ops.cpp.
#include "bench_rank.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "base/collectives.h"
#include "bench_config.h"
#include "chorus/chorus.h"
#include "rank_group.h"

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

}  // namespace

std::string_view PlacementName(Placement where) {
  return where == Placement::kInPlace ? "in-place" : "out-of-place";
}

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

// ------------------------------------------------------------------------------ rank 0's output

void BenchRank::PrintTableHeader(BenchOp op) const {
  const bool reduces = InfoOf(op).reduces;
  std::string choices = cfg_.algo.empty() ? "" : "  algo " + cfg_.algo;
  if (InfoOf(op).varied) {
    choices += cfg_.even_split ? "  split even" : "  split uneven";
  }
  std::printf("# chorus bench: op %s  ranks %d  dtype %s  redop %s  transport %s%s\n",
              std::string(BenchOpName(op)).c_str(), ranks_,
              std::string(DataTypeName(cfg_.dtype)).c_str(),
              reduces ? std::string(ReduceOpName(cfg_.redop)).c_str() : "none",
              std::string(TransportKindName(group_.transport())).c_str(), choices.c_str());
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
  const bool reduces = InfoOf(op).reduces;
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

}  // namespace chorus::cli
