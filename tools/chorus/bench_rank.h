// bench_rank.h: one rank's side of `chorus bench` (bench.cpp), on any transport: the timing
// loop and rank 0's table (bench_rank.cpp), and each collective's buffers, call and check
// (bench_ops.cpp), which read the collective table (base/collectives.h) rather than naming
// collectives, so a new row needs no edit here; sendrecv, the ring shift of messages, has a row
// of its own in those terms (InfoOf, bench_config.h).
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
//
// Thread safety: a BenchRank belongs to the thread driving its rank (see rank_group.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "algo/select.h"
#include "base/collectives.h"
#include "bench_check.h"
#include "bench_config.h"
#include "chorus/chorus.h"
#include "rank_group.h"

namespace chorus::cli {

enum class Placement : uint8_t { kOutOfPlace, kInPlace };

std::string_view PlacementName(Placement where);

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
    message_.timeout = cfg.timeout;
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
  // bench_rank.cpp: the run and its timing loop.
  Status Allocate();
  Status BenchSize(size_t op_index, const SizePoint& size);
  // One untimed call, with the failure described.
  Status Call(BenchOp op, Placement where, const SizePoint& size);
  Status Described(const Status& status, BenchOp op, Placement where, const SizePoint& size) const;
  // bench_ops.cpp: each collective's buffers, call and check, from its row of the table.
  Status RunOp(BenchOp op, Placement where, const SizePoint& size);
  internal::CallArgs Args(BenchOp op, Placement where, const SizePoint& size) const;
  void Prepare(size_t op_index, Placement where, const SizePoint& size);
  uint64_t Verify(size_t op_index, Placement where, const SizePoint& size) const;
  const BlockLayout& LayoutOf(BenchOp op, const SizePoint& size) const;
  // bench_rank.cpp: rank 0's output.
  void PrintTableHeader(BenchOp op) const;
  void Report(BenchOp op, const Row& row);
  void PrintSummary() const;

  const BenchConfig& cfg_;
  RankGroup& group_;
  const int rank_;
  const int ranks_;
  const size_t elem_;
  std::array<CallOptions, kNumCollectiveKinds> call_;  // by collective
  MessageOptions message_;                             // sendrecv's
  std::vector<std::vector<SizePoint>> sizes_;          // [op index]
  std::vector<Patterns> patterns_;                     // [op index]
  size_t max_elems_ = 0;
  // The current call's block lengths (LayoutAt), made once per size and op, not per call.
  mutable BlockLayout layout_;
  mutable const SizePoint* layout_size_ = nullptr;
  mutable BenchOp layout_op_ = OpOf(CollectiveKind::kAllReduce);
  Bytes send_;
  Bytes recv_;

  // Rank 0's totals.
  uint64_t total_wrong_ = 0;
  double busbw_sum_ = 0;
  int busbw_count_ = 0;
};

}  // namespace chorus::cli
