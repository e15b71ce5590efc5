// bench_config.h: `chorus bench`'s flags, their validation into a BenchConfig, and the size
// sweep. Sizes are total buffer bytes as in nccl-tests (all-reduce: the buffer, reduce-scatter:
// the input, all-gather: the output); the per-rank count follows, rounded down, at least one
// element per rank, and a size that rounds to the previous one is skipped.
//
//   Result<BenchConfig> cfg = MakeConfig(flags);          // flags as CLI11 filled them
//   std::vector<SizePoint> sizes = MakeSizes(*cfg, OpOf(CollectiveKind::kAllGather), 4);
//
// Thread safety: values and pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/collectives.h"
#include "chorus/chorus.h"

namespace chorus::cli {

// A benchmarked operation: a collective, whose value is its CollectiveKind and everything about
// it its row in the collective table (base/collectives.h), or kSendRecv, the ring shift of
// messages that nccl-tests and the peers (../shared/peers) call sendrecv: every rank sends
// `count` elements to rank + 1 and receives as many from rank - 1 (Communicator::SendRecv,
// as the peers time MPI_Sendrecv). The bench reads both through InfoOf, so only the call itself is sendrecv's own.
enum class BenchOp : uint8_t {};
inline constexpr BenchOp kSendRecv = static_cast<BenchOp>(kNumCollectiveKinds);
constexpr BenchOp OpOf(CollectiveKind kind) { return static_cast<BenchOp>(kind); }
constexpr bool IsCollectiveOp(BenchOp op) {
  return static_cast<int>(op) < kNumCollectiveKinds;
}
// A collective op's kind (IsCollectiveOp(op) must hold).
constexpr CollectiveKind KindOf(BenchOp op) { return static_cast<CollectiveKind>(op); }
// The op's row: a collective's from the table; sendrecv's in the table's terms (one block
// each way, moved from block 0 of rank - 1, bus factor 1, no in-place form, no algorithms).
const internal::CollectiveInfo& InfoOf(BenchOp op);

// The peers' CSV spelling: allreduce, reduce_scatter, allgather, broadcast, reduce, barrier,
// sendrecv.
std::string_view BenchOpName(BenchOp op);
// Accepts a collective's name or alias in any case, with or without '_' and '-' (allreduce,
// all_reduce, AllReduce, reduce_scatter, bcast, ...), and sendrecv (send_recv).
std::optional<BenchOp> ParseBenchOp(std::string_view name);
// "all": every collective, in table order, then sendrecv.
std::vector<BenchOp> AllBenchOps();
// Every op's name, comma-separated in that order (for --help); with collectives_only, the
// collectives' alone (chorus model models collectives).
std::string BenchOpNames(bool collectives_only = false);
// nccl-tests bus bandwidth factors: what a ring moves per rank relative to the buffer.
double BusFactor(BenchOp op, int ranks);
// "4096", "32K", "64M", "1G", "8KiB", "2mb": suffixes are powers of 1024.
std::optional<size_t> ParseBytes(std::string_view text);

// Automatic iteration counts aim at this much time per size, as the peers do; under --busy at
// kBusyMinSeconds, so that the mean counts the calls that waited a scheduler slice.
constexpr double kDefaultMinSeconds = 0.2;
constexpr double kBusyMinSeconds = 2.0;

struct BenchConfig {
  std::vector<BenchOp> ops;
  TransportKind transport = TransportKind::kThread;
  int ranks = 2;  // the parent's -n; a worker takes its group's size instead
  size_t min_bytes = 32;
  size_t max_bytes = size_t{32} << 20;
  uint64_t step_factor = 2;
  size_t step_bytes = 0;      // > 0: add instead of multiplying
  std::vector<size_t> sizes;  // non-empty: exactly these sizes (--sizes)
  DataType dtype = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  int warmup = 5;
  int iters = 0;  // 0: automatic
  // Automatic counts time at least this long per size (barrier and call per iteration); above
  // the default the 10000-call ceiling and the ~2 s cap of slow sizes no longer apply.
  double min_seconds = kDefaultMinSeconds;
  int busy = 0;       // busy processes beside the job (--busy), started by the parent
  bool mean = false;  // report the mean per call beside the median
  bool check = false;
  bool csv = false;
  bool csv_header = false;
  std::string lib = "chorus";
  std::chrono::milliseconds timeout{30000};
  size_t segment_bytes = 0;  // 0: the library's default
  std::string algo;          // CallOptions::algorithm of every timed call; empty: selection
  int root = 0;              // of the rooted collectives (broadcast, reduce)
  // The v-collectives' blocks: the peers' uneven split (UnevenCounts), or equal blocks, the
  // remainder to the last rank (--split even: the v-call against its even collective).
  bool even_split = false;
};

// What CLI11 writes into; MakeConfig turns it into a BenchConfig, with error messages.
struct BenchFlags {
  std::string op = "allreduce";
  std::string ops;
  std::string transport = "thread";
  int ranks = 2;
  std::string min_bytes = "32";
  std::string max_bytes = "32M";
  uint64_t step_factor = 2;
  std::string step_bytes;
  std::string sizes;
  std::string dtype = "float32";
  std::string redop = "sum";
  int warmup = 5;
  int iters = 0;
  double min_seconds = 0;  // 0: kDefaultMinSeconds, or kBusyMinSeconds with --busy
  int busy = 0;
  bool mean = false;
  std::string check;
  // Whether -c/--check was given at all (CLI11 knows; this header does without its 9 s of
  // compile time).
  std::function<bool()> check_given;
  bool csv = false;
  bool csv_header = false;
  std::string lib = "chorus";
  int64_t timeout_ms = 30000;
  std::string segment_bytes;
  std::string algo;
  int root = 0;
  std::string split = "uneven";
  bool list_algos = false;
  bool rank_worker = false;  // internal: this process is one rank under chorus launch
};

Result<BenchConfig> MakeConfig(const BenchFlags& flags);

// The arguments after the program name that make a worker run what `flags` asks for: every
// flag except --transport and -n (the launcher sets the group), plus --rank-worker.
std::vector<std::string> WorkerArgs(const BenchFlags& flags);

struct SizePoint {
  size_t block = 0;  // elements per rank: the buffer where send and recv have one count, the
                     // reduce-scatter output, the all-gather input; a v-collective's total
  size_t total = 0;  // elements of the large buffer
};

std::vector<SizePoint> MakeSizes(const BenchConfig& cfg, BenchOp op, int ranks);

// The v-collectives' uneven split of n elements over p ranks, as the peers' all-gather-v has it
// (../shared/peers, agv_counts): rank r gets base + r, base = (n - p(p-1)/2) / p, and the last
// rank the remainder (n = 8, p = 3: 1, 2, 5). Below p(p-1)/2 elements: n / p each, the last
// the remainder.
void UnevenCounts(size_t n, int p, std::vector<size_t>* counts);

// The block lengths of one rank's send and recv at a size point: `block` each (as many as the
// count relation has), or a v-collective's split of `total` (UnevenCounts, or with `even`
// total / p each and the remainder to the last); all-to-all-v's rank r sends
// rank q the split's entry (r + q) mod p. A rooted v-collective's ranks all hold the root's
// lengths. Reuses the vectors' room (no allocation once they hold p entries).
struct BlockLayout {
  std::vector<size_t> send;
  std::vector<size_t> recv;
};
void LayoutAt(BenchOp op, const SizePoint& size, int ranks, int rank, bool even,
              BlockLayout* layout);
// Elements before block j.
size_t OffsetOf(const std::vector<size_t>& blocks, size_t j);

}  // namespace chorus::cli
