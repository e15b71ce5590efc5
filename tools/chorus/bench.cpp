// chorus bench: nccl-tests-style timing of all-reduce, reduce-scatter and all-gather over chorus's
// thread ranks, with exact result checking and the peer baselines' CSV rows.
//
//   chorus bench -n 4 --op allreduce -b 32 -e 64M -f 4 -c
//   chorus bench --csv --lib chorus -n 4 --ops allreduce,reduce_scatter,allgather -b 32 -e 64M
//
// Sizes are total buffer bytes as in nccl-tests (all-reduce: the buffer, reduce-scatter: the
// input, all-gather: the output); the per-rank count follows, rounded down, at least one element
// per rank, and a size that rounds to the previous one is skipped. The table's count column is
// per rank like nccl-tests (all-gather: elements sent, reduce-scatter: elements received); the
// CSV's count and bytes are the total buffer, like the peers'.
//
// Timing matches the peer baselines (shared/peers/bench_common.h) so rows can be compared: every
// rank is a thread driving its own Communicator; per timed iteration all ranks meet at a
// std::barrier (not timed) and each times one call; an iteration costs what its slowest rank
// measured, and a size reports the median and the minimum over iterations. Without --iters the
// count comes from a probe of 3 calls: enough for 0.2 s, within [20, 10000], followed by an extra
// warm-up of a tenth of that. Sizes slower than 0.1 s per call are capped at about 2 s per
// placement (at least 5 calls) so that a 64 MiB sweep stays short on two cores.
//
// Checking (-c) fills inputs with small non-negative integers that every dtype (int8 and bfloat16
// included) holds exactly, chosen per reduce op so that no partial result leaves that range: prod
// multiplies a few 2s among 1s, avg gets sums that are multiples of the rank count. Values repeat
// with a prime period, so a block written at a wrong offset shows up, and outputs are prefilled
// with 0xFF bytes (NaN, -1 or the type's maximum), which is never an expected value. Every
// element of every rank's output is compared bit for bit with the value computed here.
//
// Buffers are allocated once per rank for the largest size and touched before the first call;
// each size refills them outside the timed loop. Every call has a deadline (--timeout-ms); the
// first failure aborts the group, is printed, and ends the run. A watchdog ends the process if
// ranks make no progress well past the deadline, so the benchmark never hangs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "commands.h"

namespace chorus::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Checking patterns repeat with this prime period (in elements).
constexpr size_t kPeriod = 251;
// Automatic iteration count, as the peers choose it (bench_common.h choose_iters).
constexpr double kMinSeconds = 0.2;
constexpr int kMinIters = 20;
constexpr int kMaxIters = 10000;
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

enum class BenchOp : uint8_t { kAllReduce, kReduceScatter, kAllGather };
enum class Placement : uint8_t { kOutOfPlace, kInPlace };

// The peers' CSV spelling.
std::string_view BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce:
      return "allreduce";
    case BenchOp::kReduceScatter:
      return "reduce_scatter";
    case BenchOp::kAllGather:
      return "allgather";
  }
  return "unknown";
}

std::string_view PlacementName(Placement where) {
  return where == Placement::kInPlace ? "in-place" : "out-of-place";
}

// Accepts allreduce, all_reduce, all-reduce, AllReduce, ... (and likewise for the other two).
std::optional<BenchOp> ParseBenchOp(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c != '_' && c != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (key == "allreduce") return BenchOp::kAllReduce;
  if (key == "reducescatter") return BenchOp::kReduceScatter;
  if (key == "allgather") return BenchOp::kAllGather;
  return std::nullopt;
}

// nccl-tests bus bandwidth factors: what a ring moves per rank relative to the buffer.
double BusFactor(BenchOp op, int ranks) {
  const double p = ranks;
  return op == BenchOp::kAllReduce ? 2.0 * (p - 1) / p : (p - 1) / p;
}

// "4096", "32K", "64M", "1G", "8KiB", "2mb": suffixes are powers of 1024.
std::optional<size_t> ParseBytes(std::string_view text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string suffix;
  for (; i < text.size(); ++i) {
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  }
  if (suffix.ends_with("IB")) {
    suffix.resize(suffix.size() - 2);
    if (suffix.empty()) return std::nullopt;  // "iB" alone means nothing
  } else if (suffix.ends_with("B")) {
    suffix.pop_back();
  }
  int shift = 0;
  if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  if (value > (UINT64_MAX >> shift)) return std::nullopt;
  return static_cast<size_t>(value << shift);
}

// ------------------------------------------------------------------------------ configuration

struct BenchConfig {
  std::vector<BenchOp> ops;
  int ranks = 2;
  size_t min_bytes = 32;
  size_t max_bytes = size_t{32} << 20;
  uint64_t step_factor = 2;
  size_t step_bytes = 0;  // > 0: add instead of multiplying
  DataType dtype = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  int warmup = 5;
  int iters = 0;  // 0: automatic
  bool check = false;
  bool csv = false;
  bool csv_header = false;
  std::string lib = "chorus";
  std::chrono::milliseconds timeout{30000};
  size_t segment_bytes = 0;  // 0: the library's default
};

// What CLI11 writes into; turned into a BenchConfig (with error messages) by MakeConfig.
struct BenchFlags {
  std::string op = "allreduce";
  std::string ops;
  int ranks = 2;
  std::string min_bytes = "32";
  std::string max_bytes = "32M";
  uint64_t step_factor = 2;
  std::string step_bytes;
  std::string dtype = "float32";
  std::string redop = "sum";
  int warmup = 5;
  int iters = 0;
  std::string check;
  const CLI::Option* check_option = nullptr;
  bool csv = false;
  bool csv_header = false;
  std::string lib = "chorus";
  int64_t timeout_ms = 30000;
  std::string segment_bytes;
};

Status ParseOpList(std::string_view list, std::vector<BenchOp>& ops) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    const std::string_view name = list.substr(start, end - start);
    if (name == "all") {
      ops.insert(ops.end(), {BenchOp::kAllReduce, BenchOp::kReduceScatter, BenchOp::kAllGather});
    } else if (!name.empty()) {
      const std::optional<BenchOp> op = ParseBenchOp(name);
      if (!op) {
        return InvalidArgument("unknown collective '" + std::string(name) +
                               "' (allreduce, reducescatter, allgather, all)");
      }
      ops.push_back(*op);
    }
    start = end + 1;
  }
  if (ops.empty()) return InvalidArgument("no collective given");
  return Status::Ok();
}

Result<size_t> ParseBytesFlag(std::string_view flag, const std::string& text) {
  const std::optional<size_t> bytes = ParseBytes(text);
  if (!bytes) {
    return InvalidArgument(std::string(flag) + ": cannot read '" + text +
                           "' as a byte count (digits, optional K, M or G)");
  }
  return *bytes;
}

Result<BenchConfig> MakeConfig(const BenchFlags& f) {
  BenchConfig cfg;
  CHORUS_RETURN_IF_ERROR(ParseOpList(f.ops.empty() ? f.op : f.ops, cfg.ops));
  if (f.ranks < 1) return InvalidArgument("--ranks must be >= 1, got " + std::to_string(f.ranks));
  cfg.ranks = f.ranks;

  Result<size_t> min_bytes = ParseBytesFlag("--minbytes", f.min_bytes);
  if (!min_bytes.ok()) return min_bytes.status();
  Result<size_t> max_bytes = ParseBytesFlag("--maxbytes", f.max_bytes);
  if (!max_bytes.ok()) return max_bytes.status();
  cfg.min_bytes = *min_bytes;
  cfg.max_bytes = *max_bytes;
  if (cfg.min_bytes > cfg.max_bytes) {
    return InvalidArgument("--minbytes (" + std::to_string(cfg.min_bytes) + ") > --maxbytes (" +
                           std::to_string(cfg.max_bytes) + ")");
  }
  if (!f.step_bytes.empty()) {
    Result<size_t> step = ParseBytesFlag("--stepbytes", f.step_bytes);
    if (!step.ok()) return step.status();
    if (*step == 0) return InvalidArgument("--stepbytes must be > 0");
    cfg.step_bytes = *step;
  } else if (f.step_factor < 2) {
    return InvalidArgument("--stepfactor must be >= 2, got " + std::to_string(f.step_factor));
  }
  cfg.step_factor = f.step_factor;

  const std::optional<DataType> dtype = ParseDataType(f.dtype);
  if (!dtype) return InvalidArgument("unknown --datatype '" + f.dtype + "'");
  cfg.dtype = *dtype;
  const std::optional<ReduceOp> redop = ParseReduceOp(f.redop);
  if (!redop)
    return InvalidArgument("unknown --reduce-op '" + f.redop + "' (sum prod min max avg)");
  cfg.redop = *redop;

  if (f.warmup < 0) return InvalidArgument("--warmup_iters must be >= 0");
  if (f.iters < 0) return InvalidArgument("--iters must be >= 1 (or 0 for automatic)");
  cfg.warmup = f.warmup;
  cfg.iters = f.iters;

  if (f.check_option != nullptr && f.check_option->count() > 0) {
    std::string v;
    for (char c : f.check) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v.empty() || v == "1" || v == "true" || v == "yes" || v == "on") {
      cfg.check = true;
    } else if (v == "0" || v == "false" || v == "no" || v == "off") {
      cfg.check = false;
    } else {
      return InvalidArgument("--check takes 0 or 1, got '" + f.check + "'");
    }
  }
  cfg.csv = f.csv;
  cfg.csv_header = f.csv_header;
  cfg.lib = f.lib;
  if (f.timeout_ms <= 0) return InvalidArgument("--timeout-ms must be > 0");
  cfg.timeout = std::chrono::milliseconds(f.timeout_ms);
  if (!f.segment_bytes.empty()) {
    Result<size_t> seg = ParseBytesFlag("--segment-bytes", f.segment_bytes);
    if (!seg.ok()) return seg.status();
    if (*seg == 0) return InvalidArgument("--segment-bytes must be > 0");
    cfg.segment_bytes = *seg;
  }
  return cfg;
}

// ------------------------------------------------------------------------------ sizes

struct SizePoint {
  size_t block = 0;  // elements per rank: all-reduce the buffer, reduce-scatter the output,
                     // all-gather the input
  size_t total = 0;  // elements of the large buffer
};

std::vector<SizePoint> MakeSizes(const BenchConfig& cfg, BenchOp op) {
  const size_t elem = DataTypeSize(cfg.dtype);
  const size_t ranks = static_cast<size_t>(cfg.ranks);
  std::vector<SizePoint> sizes;
  size_t bytes = cfg.min_bytes;
  while (true) {
    SizePoint point;
    if (op == BenchOp::kAllReduce) {
      point.block = std::max<size_t>(1, bytes / elem);
      point.total = point.block;
    } else {
      point.block = std::max<size_t>(1, bytes / (ranks * elem));
      point.total = point.block * ranks;
    }
    if (sizes.empty() || sizes.back().total != point.total) sizes.push_back(point);
    size_t next;
    if (cfg.step_bytes > 0) {
      if (bytes > cfg.max_bytes - cfg.step_bytes) break;
      next = bytes + cfg.step_bytes;
    } else if (bytes == 0) {
      next = 1;
    } else {
      if (bytes > cfg.max_bytes / cfg.step_factor) break;
      next = bytes * cfg.step_factor;
    }
    if (next > cfg.max_bytes) break;
    bytes = next;
  }
  return sizes;
}

// ------------------------------------------------------------------------------ check patterns

// Largest value every partial result may reach and still be exact in `dtype`; it also keeps
// expected values away from the 0xFF prefill (-1 or the type's maximum).
int64_t ExactLimit(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return 100;
    case DataType::kUint8:
    case DataType::kBFloat16:  // 8 significant bits: integers up to 256
      return 200;
    case DataType::kFloat16:  // 11 significant bits: integers up to 2048
      return 2000;
    default:
      return int64_t{1} << 20;
  }
}

uint32_t Mix(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 1) * 0xC2B2AE3Du;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  h *= 0x846CA68Bu;
  h ^= h >> 16;
  return h;
}

int64_t Pick(uint32_t rank, size_t k, uint32_t salt, int64_t bound) {  // in [0, bound)
  return static_cast<int64_t>(Mix(rank, static_cast<uint32_t>(k), salt) %
                              static_cast<uint32_t>(bound));
}

void StoreValue(DataType dtype, int64_t v, uint8_t* dst) {
  auto put = [dst](auto x) { std::memcpy(dst, &x, sizeof(x)); };
  switch (dtype) {
    case DataType::kInt8:
      put(static_cast<int8_t>(v));
      break;
    case DataType::kUint8:
      put(static_cast<uint8_t>(v));
      break;
    case DataType::kInt32:
      put(static_cast<int32_t>(v));
      break;
    case DataType::kUint32:
      put(static_cast<uint32_t>(v));
      break;
    case DataType::kInt64:
      put(static_cast<int64_t>(v));
      break;
    case DataType::kUint64:
      put(static_cast<uint64_t>(v));
      break;
    case DataType::kFloat16:
      put(ToFloat16(static_cast<float>(v)).bits);
      break;
    case DataType::kBFloat16:
      put(ToBFloat16(static_cast<float>(v)).bits);
      break;
    case DataType::kFloat32:
      put(static_cast<float>(v));
      break;
    case DataType::kFloat64:
      put(static_cast<double>(v));
      break;
  }
}

// One period of every rank's input and of the expected result, as bytes of the element type.
struct Patterns {
  size_t elem = 0;
  std::vector<std::vector<uint8_t>> input;  // [rank], kPeriod elements
  std::vector<uint8_t> expected;            // reductions only, kPeriod elements
};

// Values of all ranks at pattern position k, chosen so that the reduction is exact.
void ReductionInputs(ReduceOp redop, int64_t limit, size_t k, std::vector<int64_t>& v) {
  const int p = static_cast<int>(v.size());
  const auto up = static_cast<uint32_t>(p);
  std::fill(v.begin(), v.end(), 0);
  switch (redop) {
    case ReduceOp::kSum:
      if (p <= limit) {
        const int64_t top = std::min<int64_t>(8, limit / p);
        for (int r = 0; r < p; ++r) v[r] = Pick(r, k, 1, top + 1);
      } else {  // too many ranks for dense values: one contributor per position
        v[k % up] = 1 + Pick(0, k, 2, 7);
      }
      break;
    case ReduceOp::kProd: {  // 2^t for t <= 6 fits every dtype
      const int64_t twos = Pick(0, k, 3, std::min(6, p) + 1);
      const int64_t first = Pick(0, k, 4, p);
      for (int r = 0; r < p; ++r) v[r] = ((r - first + p) % p < twos) ? 2 : 1;
      break;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      for (int r = 0; r < p; ++r) v[r] = Pick(r, k, 5, std::min<int64_t>(limit, 100) + 1);
      break;
    case ReduceOp::kAvg:
      if (p == 1) {
        v[0] = Pick(0, k, 6, 9);
      } else if (limit / (p - 1) >= 2) {
        // The last rank tops the sum up to a multiple of p: sum <= (p-1)(top+1) <= limit.
        const int64_t top = std::min<int64_t>(8, limit / (p - 1) - 1);
        int64_t sum = 0;
        for (int r = 0; r + 1 < p; ++r) sum += v[r] = Pick(r, k, 7, top + 1);
        v[p - 1] = (p - sum % p) % p;
      } else if (p <= limit) {  // one contributor of a multiple of p
        v[k % up] = p * (1 + Pick(0, k, 8, limit / p));
      }  // else all zero: nothing else keeps the average exact in this dtype
      break;
  }
}

int64_t Reduce(ReduceOp redop, const std::vector<int64_t>& v) {
  int64_t acc = v[0];
  for (size_t r = 1; r < v.size(); ++r) {
    switch (redop) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v[r];
        break;
      case ReduceOp::kProd:
        acc *= v[r];
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v[r]);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v[r]);
        break;
    }
  }
  return redop == ReduceOp::kAvg ? acc / static_cast<int64_t>(v.size()) : acc;
}

Patterns MakePatterns(BenchOp op, DataType dtype, ReduceOp redop, int ranks) {
  Patterns pat;
  pat.elem = DataTypeSize(dtype);
  pat.input.assign(ranks, std::vector<uint8_t>(kPeriod * pat.elem));
  const int64_t limit = ExactLimit(dtype);
  std::vector<int64_t> v(ranks);
  if (op == BenchOp::kAllGather) {
    // Nothing is combined; values only need to tell ranks and positions apart.
    for (int r = 0; r < ranks; ++r) {
      for (size_t k = 0; k < kPeriod; ++k) {
        StoreValue(dtype, Pick(r, k, 9, std::min<int64_t>(limit, 100) + 1),
                   &pat.input[r][k * pat.elem]);
      }
    }
    return pat;
  }
  pat.expected.resize(kPeriod * pat.elem);
  for (size_t k = 0; k < kPeriod; ++k) {
    ReductionInputs(redop, limit, k, v);
    for (int r = 0; r < ranks; ++r) StoreValue(dtype, v[r], &pat.input[r][k * pat.elem]);
    StoreValue(dtype, Reduce(redop, v), &pat.expected[k * pat.elem]);
  }
  return pat;
}

// dst[j] = table[(phase + j) % kPeriod] for j < n.
void FillPattern(uint8_t* dst, size_t n, size_t elem, const uint8_t* table, size_t phase) {
  size_t k = phase % kPeriod;
  while (n > 0) {
    const size_t run = std::min(n, kPeriod - k);
    std::memcpy(dst, table + k * elem, run * elem);
    dst += run * elem;
    n -= run;
    k = 0;
  }
}

// How many of out[j], j < n, differ from table[(phase + j) % kPeriod] (bit for bit).
uint64_t CountMismatches(const uint8_t* out, size_t n, size_t elem, const uint8_t* table,
                         size_t phase) {
  uint64_t wrong = 0;
  size_t k = phase % kPeriod;
  while (n > 0) {
    const size_t run = std::min(n, kPeriod - k);
    const uint8_t* want = table + k * elem;
    if (std::memcmp(out, want, run * elem) != 0) {
      for (size_t j = 0; j < run; ++j) {
        wrong += std::memcmp(out + j * elem, want + j * elem, elem) != 0 ? 1 : 0;
      }
    }
    out += run * elem;
    n -= run;
    k = 0;
  }
  return wrong;
}

// ------------------------------------------------------------------------------ the run

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<uint8_t, FreeDeleter>;

struct RankBuffers {
  Bytes send;
  Bytes recv;
};

struct Timing {
  double median_s = 0;
  double min_s = 0;
};

struct Row {
  SizePoint size;
  Timing time[2];          // by Placement
  uint64_t wrong[2] = {};  // by Placement
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

class BenchRun {
 public:
  BenchRun(const BenchConfig& cfg, std::vector<Communicator>& comms)
      : cfg_(cfg),
        comms_(comms),
        ranks_(cfg.ranks),
        elem_(DataTypeSize(cfg.dtype)),
        barrier_(cfg.ranks, OnPhase{this}),
        probe_s_(cfg.ranks),
        times_s_(cfg.ranks),
        wrong_(cfg.ranks) {
    for (BenchOp op : cfg_.ops) {
      sizes_.push_back(MakeSizes(cfg_, op));
      patterns_.push_back(MakePatterns(op, cfg_.dtype, cfg_.redop, ranks_));
      for (const SizePoint& s : sizes_.back()) max_elems_ = std::max(max_elems_, s.total);
    }
  }

  // Drives every rank to the end (or the first failure); returns the process exit code.
  int Run();

 private:
  // Runs once per barrier phase while every rank waits: the only place `stop_` changes, so all
  // ranks read the same value between two barriers and leave their loops at the same point.
  struct OnPhase {
    BenchRun* run;
    void operator()() noexcept {
      run->stop_ = run->failed_.load();
      run->progress_.fetch_add(1);
    }
  };

  // Waits for all ranks; true when the run must stop.
  bool Sync() {
    barrier_.arrive_and_wait();
    return stop_;
  }
  void Fail(const std::string& message);
  void Watch();
  void RankMain(int rank);
  bool BenchSize(int rank, size_t op_index, const SizePoint& size, RankBuffers& bufs);
  Status RunOp(int rank, BenchOp op, Placement where, const SizePoint& size, RankBuffers& bufs);
  void Prepare(int rank, size_t op_index, Placement where, const SizePoint& size,
               RankBuffers& bufs);
  uint64_t Verify(int rank, size_t op_index, Placement where, const SizePoint& size,
                  const RankBuffers& bufs) const;
  Timing Summarize(int iters) const;
  void PrintTableHeader(BenchOp op) const;
  void Report(BenchOp op, const Row& row);

  const BenchConfig& cfg_;
  std::vector<Communicator>& comms_;
  const int ranks_;
  const size_t elem_;
  std::vector<std::vector<SizePoint>> sizes_;  // [op index]
  std::vector<Patterns> patterns_;             // [op index]
  size_t max_elems_ = 0;

  std::barrier<OnPhase> barrier_;
  std::atomic<bool> failed_{false};
  bool stop_ = false;
  std::atomic<uint64_t> progress_{0};
  std::mutex error_mu_;
  std::string first_error_;

  // Exchange between ranks: each rank writes its slot before a Sync, rank 0 reads after it.
  std::vector<double> probe_s_;
  std::vector<std::vector<double>> times_s_;
  std::vector<uint64_t> wrong_;
  // Written by rank 0 between two Syncs, read by all after the second.
  int iters_ = 0;
  int extra_warmup_ = 0;

  // Rank 0's totals.
  uint64_t total_wrong_ = 0;
  double busbw_sum_ = 0;
  int busbw_count_ = 0;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool done_ = false;
};

void BenchRun::Fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.empty()) first_error_ = message;
  }
  failed_.store(true);
}

Status BenchRun::RunOp(int rank, BenchOp op, Placement where, const SizePoint& size,
                       RankBuffers& bufs) {
  Communicator& comm = comms_[rank];
  const DataType dt = cfg_.dtype;
  const bool in_place = where == Placement::kInPlace;
  uint8_t* send = bufs.send.get();
  uint8_t* recv = bufs.recv.get();
  uint8_t* own = recv + static_cast<size_t>(rank) * size.block * elem_;  // in-place block
  switch (op) {
    case BenchOp::kAllReduce: {
      const MutableBuffer out{recv, size.total, dt};
      if (in_place) return comm.AllReduce(out, out, cfg_.redop);
      return comm.AllReduce(ConstBuffer{send, size.total, dt}, out, cfg_.redop);
    }
    case BenchOp::kReduceScatter:
      if (in_place) {
        return comm.ReduceScatter(ConstBuffer{recv, size.total, dt},
                                  MutableBuffer{own, size.block, dt}, cfg_.redop);
      }
      return comm.ReduceScatter(ConstBuffer{send, size.total, dt},
                                MutableBuffer{recv, size.block, dt}, cfg_.redop);
    case BenchOp::kAllGather:
      return comm.AllGather(ConstBuffer{in_place ? own : send, size.block, dt},
                            MutableBuffer{recv, size.total, dt});
  }
  return Internal("bench: unknown collective");
}

void BenchRun::Prepare(int rank, size_t op_index, Placement where, const SizePoint& size,
                       RankBuffers& bufs) {
  const BenchOp op = cfg_.ops[op_index];
  const uint8_t* in = patterns_[op_index].input[rank].data();
  const bool in_place = where == Placement::kInPlace;
  uint8_t* send = bufs.send.get();
  uint8_t* recv = bufs.recv.get();
  switch (op) {
    case BenchOp::kAllReduce:
    case BenchOp::kReduceScatter:
      FillPattern(in_place ? recv : send, size.total, elem_, in, 0);
      if (!in_place) {
        const size_t out = op == BenchOp::kAllReduce ? size.total : size.block;
        std::memset(recv, 0xFF, out * elem_);
      }
      break;
    case BenchOp::kAllGather:
      std::memset(recv, 0xFF, size.total * elem_);
      FillPattern(in_place ? recv + static_cast<size_t>(rank) * size.block * elem_ : send,
                  size.block, elem_, in, 0);
      break;
  }
}

uint64_t BenchRun::Verify(int rank, size_t op_index, Placement where, const SizePoint& size,
                          const RankBuffers& bufs) const {
  const Patterns& pat = patterns_[op_index];
  const uint8_t* recv = bufs.recv.get();
  const size_t own_offset = static_cast<size_t>(rank) * size.block;
  switch (cfg_.ops[op_index]) {
    case BenchOp::kAllReduce:
      return CountMismatches(recv, size.total, elem_, pat.expected.data(), 0);
    case BenchOp::kReduceScatter: {
      // Rank r holds elements [r*block, (r+1)*block) of the reduced input.
      const uint8_t* out = where == Placement::kInPlace ? recv + own_offset * elem_ : recv;
      return CountMismatches(out, size.block, elem_, pat.expected.data(), own_offset % kPeriod);
    }
    case BenchOp::kAllGather: {
      uint64_t wrong = 0;
      for (int s = 0; s < ranks_; ++s) {
        wrong += CountMismatches(recv + static_cast<size_t>(s) * size.block * elem_, size.block,
                                 elem_, pat.input[s].data(), 0);
      }
      return wrong;
    }
  }
  return 0;
}

// Median and minimum over iterations of the slowest rank's time.
Timing BenchRun::Summarize(int iters) const {
  std::vector<double> slowest(iters, 0.0);
  for (const std::vector<double>& t : times_s_) {
    for (int i = 0; i < iters; ++i) slowest[i] = std::max(slowest[i], t[i]);
  }
  std::sort(slowest.begin(), slowest.end());
  const size_t n = slowest.size();
  Timing timing;
  timing.median_s = n % 2 ? slowest[n / 2] : 0.5 * (slowest[n / 2 - 1] + slowest[n / 2]);
  timing.min_s = slowest.front();
  return timing;
}

bool BenchRun::BenchSize(int rank, size_t op_index, const SizePoint& size, RankBuffers& bufs) {
  const BenchOp op = cfg_.ops[op_index];
  Row row;
  row.size = size;
  // --csv reports out-of-place only (as the peers do), so in-place is not timed there.
  for (Placement where : {Placement::kOutOfPlace, Placement::kInPlace}) {
    const int slot = static_cast<int>(where);
    auto run = [&] {
      const Status status = RunOp(rank, op, where, size, bufs);
      progress_.fetch_add(1, std::memory_order_relaxed);  // warm-ups have no barriers
      if (!status.ok()) {
        Fail("rank " + std::to_string(rank) + ": " + std::string(BenchOpName(op)) + " of " +
             std::to_string(size.total * elem_) + " B, " + std::string(PlacementName(where)) +
             ": " + status.ToString());
        comms_[rank].Abort();  // peers waiting in this call return now, not at the deadline
      }
      return status.ok();
    };

    if (cfg_.check) {
      Prepare(rank, op_index, where, size, bufs);
      if (Sync()) return false;
      wrong_[rank] = run() ? Verify(rank, op_index, where, size, bufs) : 0;
      if (Sync()) return false;
      if (rank == 0) {
        for (uint64_t w : wrong_) row.wrong[slot] += w;
      }
    }
    if (cfg_.csv && where == Placement::kInPlace) continue;

    Prepare(rank, op_index, where, size, bufs);
    for (int i = 0; i < cfg_.warmup && run(); ++i) {
    }
    if (Sync()) return false;
    int iters = cfg_.iters;
    if (iters == 0) {
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < kProbeIters; ++i) {
        if (Sync()) return false;
        run();
      }
      probe_s_[rank] = Seconds(Clock::now() - start) / kProbeIters;
      if (Sync()) return false;
      if (rank == 0) {
        const double probe = *std::max_element(probe_s_.begin(), probe_s_.end());
        double want = probe > 0 ? std::ceil(kMinSeconds / probe) : kMaxIters;
        want = std::clamp<double>(want, kMinIters, kMaxIters);
        if (want * probe > kMaxSeconds) {
          want = std::max<double>(kMinCappedIters, std::floor(kMaxSeconds / probe));
        }
        iters_ = static_cast<int>(want);
        extra_warmup_ = std::min(iters_ / 10, kMaxExtraWarmup);
      }
      if (Sync()) return false;
      iters = iters_;
      for (int i = 0; i < extra_warmup_ && run(); ++i) {
      }
    }

    std::vector<double>& times = times_s_[rank];
    times.assign(iters, 0.0);
    for (int i = 0; i < iters; ++i) {
      if (Sync()) return false;
      const Clock::time_point start = Clock::now();
      const Status status = RunOp(rank, op, where, size, bufs);
      times[i] = Seconds(Clock::now() - start);
      if (!status.ok()) {
        Fail("rank " + std::to_string(rank) + ": " + std::string(BenchOpName(op)) + " of " +
             std::to_string(size.total * elem_) + " B, " + std::string(PlacementName(where)) +
             ": " + status.ToString());
        comms_[rank].Abort();
      }
    }
    if (Sync()) return false;
    if (rank == 0) row.time[slot] = Summarize(iters);
  }
  if (rank == 0) Report(op, row);
  return true;
}

void BenchRun::PrintTableHeader(BenchOp op) const {
  const bool reduces = op != BenchOp::kAllGather;
  std::printf("# chorus bench: op %s  ranks %d  dtype %s  redop %s  transport thread\n",
              std::string(BenchOpName(op)).c_str(), ranks_,
              std::string(DataTypeName(cfg_.dtype)).c_str(),
              reduces ? std::string(ReduceOpName(cfg_.redop)).c_str() : "none");
  std::string step = cfg_.step_bytes > 0 ? std::to_string(cfg_.step_bytes) + "(bytes)"
                                         : std::to_string(cfg_.step_factor) + "(factor)";
  std::string iters = cfg_.iters > 0 ? std::to_string(cfg_.iters) : "auto";
  const size_t segment = cfg_.segment_bytes > 0 ? cfg_.segment_bytes : CommOptions{}.segment_bytes;
  std::printf(
      "# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %s validation: %d "
      "timeout: %lld ms segment: %zu B\n#\n",
      cfg_.min_bytes, cfg_.max_bytes, step.c_str(), cfg_.warmup, iters.c_str(), cfg_.check ? 1 : 0,
      static_cast<long long>(cfg_.timeout.count()), segment);
  // Column layout of Report(): 44 characters of size, count, type and redop, then two groups of
  // 33 (time, algbw, busbw, #wrong), each group's title centred above it.
  std::string titles = "#" + std::string(109, ' ');
  titles.replace(44 + (33 - 12) / 2, 12, "out-of-place");
  titles.replace(77 + (33 - 8) / 2, 8, "in-place");
  std::printf("%s\n", RightTrimmed(titles).c_str());
  const char* format = "# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s";
  char line[160];
  std::snprintf(line, sizeof(line), format, "size", "count", "type", "redop", "time", "algbw",
                "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("%s\n", line);
  std::snprintf(line, sizeof(line), format, "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)",
                "", "(us)", "(GB/s)", "(GB/s)", "");
  std::printf("%s\n", RightTrimmed(line).c_str());
  std::fflush(stdout);
}

void BenchRun::Report(BenchOp op, const Row& row) {
  const double bytes = static_cast<double>(row.size.total * elem_);
  const double factor = BusFactor(op, ranks_);
  auto algbw = [bytes](const Timing& t) { return t.median_s > 0 ? bytes / t.median_s / 1e9 : 0; };
  total_wrong_ += row.wrong[0] + row.wrong[1];
  if (cfg_.csv) {
    const Timing& t = row.time[0];
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
  const bool reduces = op != BenchOp::kAllGather;
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
    std::snprintf(cell, sizeof(cell), "  %s  %6.2f  %6.2f  %s",
                  FormatTime(t.median_s * 1e6).c_str(), algbw(t), algbw(t) * factor, wrong);
    line += cell;
    busbw_sum_ += algbw(t) * factor;
    ++busbw_count_;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void BenchRun::RankMain(int rank) {
  // Each rank allocates and touches its own buffers once, for the largest size.
  const size_t bytes = std::max<size_t>(4096, (max_elems_ * elem_ + 4095) / 4096 * 4096);
  RankBuffers bufs;
  bufs.send.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  bufs.recv.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (bufs.send == nullptr || bufs.recv == nullptr) {
    Fail("rank " + std::to_string(rank) + ": cannot allocate 2 x " + std::to_string(bytes) +
         " bytes");
  } else {
    std::memset(bufs.send.get(), 0, bytes);
    std::memset(bufs.recv.get(), 0, bytes);
  }
  if (Sync()) return;
  for (size_t op_index = 0; op_index < cfg_.ops.size(); ++op_index) {
    if (rank == 0 && !cfg_.csv) PrintTableHeader(cfg_.ops[op_index]);
    for (const SizePoint& size : sizes_[op_index]) {
      if (!BenchSize(rank, op_index, size, bufs)) return;
    }
    if (rank == 0 && !cfg_.csv) std::printf("#\n");
  }
}

// Ends the process when no barrier completes for much longer than a call's deadline: a call that
// ignores its deadline must not hang the benchmark.
void BenchRun::Watch() {
  const auto limit = 2 * cfg_.timeout + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(watch_mu_);
  uint64_t seen = progress_.load();
  Clock::time_point since = Clock::now();
  bool aborted = false;
  while (!done_) {
    watch_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (done_) break;
    const uint64_t now_seen = progress_.load();
    if (now_seen != seen) {
      seen = now_seen;
      since = Clock::now();
      continue;
    }
    const Clock::duration stalled = Clock::now() - since;
    if (!aborted && stalled > limit) {
      std::fprintf(stderr, "chorus bench: no progress for %.0f s; aborting the group\n",
                   Seconds(stalled));
      Fail("watchdog: no progress for " + std::to_string(static_cast<int>(Seconds(stalled))) +
           " s");
      for (Communicator& comm : comms_) comm.Abort();
      aborted = true;
      since = Clock::now();
    } else if (aborted && stalled > std::chrono::seconds(10)) {
      std::fprintf(stderr, "chorus bench: ranks still stuck 10 s after Abort(); exiting\n");
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(kExitHung);
    }
  }
}

int BenchRun::Run() {
  if (cfg_.csv && cfg_.csv_header) {
    std::printf("lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,busbw_GBs\n");
  }
  std::thread watchdog([this] { Watch(); });
  std::vector<std::thread> threads;
  threads.reserve(ranks_);
  for (int r = 0; r < ranks_; ++r) threads.emplace_back([this, r] { RankMain(r); });
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    done_ = true;
  }
  watch_cv_.notify_all();
  watchdog.join();

  if (failed_.load()) {
    std::fflush(stdout);
    std::fprintf(stderr, "chorus bench: FAILED: %s\n", first_error_.c_str());
    return kExitFailed;
  }
  if (!cfg_.csv) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(total_wrong_),
                total_wrong_ ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n#\n",
                busbw_count_ > 0 ? busbw_sum_ / busbw_count_ : 0.0);
    std::fflush(stdout);
  }
  return total_wrong_ > 0 ? kExitWrong : 0;
}

int RunBench(const BenchConfig& cfg) {
  CommOptions options;
  options.timeout = cfg.timeout;
  options.transport = TransportKind::kThread;
  if (cfg.segment_bytes > 0) options.segment_bytes = cfg.segment_bytes;
  Result<std::vector<Communicator>> group = CreateLocalGroup(cfg.ranks, options);
  if (!group.ok()) {
    std::fprintf(stderr, "chorus bench: CreateLocalGroup(%d): %s\n", cfg.ranks,
                 group.status().ToString().c_str());
    return group.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  BenchRun run(cfg, *group);
  return run.Run();
}

}  // namespace

void AddBenchCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "nccl-tests-style benchmark of all-reduce, reduce-scatter and all-gather over "
      "thread ranks");
  sub->add_option("--op", flags->op,
                  "collective: allreduce, reducescatter or allgather (also all_reduce, ...)")
      ->capture_default_str();
  sub->add_option("--ops", flags->ops,
                  "comma-separated collectives run one after another, or 'all' (overrides --op)");
  sub->add_option("-n,--ranks", flags->ranks, "ranks (threads)")->capture_default_str();
  sub->add_option("-b,--minbytes", flags->min_bytes,
                  "smallest total buffer size in bytes; K, M, G are powers of 1024")
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", flags->max_bytes, "largest total buffer size in bytes")
      ->capture_default_str();
  sub->add_option("-f,--stepfactor", flags->step_factor, "multiply the size by this per step")
      ->capture_default_str();
  sub->add_option("-i,--stepbytes", flags->step_bytes, "add this many bytes per step instead");
  sub->add_option("-d,--datatype", flags->dtype,
                  "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64")
      ->capture_default_str();
  sub->add_option("-o,--reduce-op", flags->redop, "sum prod min max avg")->capture_default_str();
  sub->add_option("-w,--warmup_iters,--warmup-iters", flags->warmup, "untimed calls per size")
      ->capture_default_str();
  sub->add_option("--iters", flags->iters,
                  "timed calls per size; 0 = enough for 0.2 s, 20..10000, capped near 2 s")
      ->capture_default_str();
  flags->check_option =
      sub->add_option("-c,--check", flags->check,
                      "check every output element: -c or --check=1 enables, --check=0 disables")
          ->expected(0, 1);
  sub->add_flag("--csv", flags->csv,
                "print only CSV rows lib,op,ranks,count,bytes,median_us,min_us,algbw_GBs,"
                "busbw_GBs (out-of-place; count and bytes of the total buffer)");
  sub->add_flag("--header", flags->csv_header, "with --csv, print the CSV header line first");
  sub->add_option("--lib", flags->lib, "the CSV lib column")->capture_default_str();
  sub->add_option("--timeout-ms", flags->timeout_ms, "deadline of every collective call")
      ->capture_default_str();
  sub->add_option("--segment-bytes", flags->segment_bytes,
                  "CommOptions::segment_bytes (K, M, G allowed); default: the library's");
  sub->footer(
      "Time = median over iterations of the slowest rank's time; GB = 1e9; busbw = algbw x "
      "2(p-1)/p for allreduce, (p-1)/p otherwise.\nExit status: 0 ok, 1 wrong results, 2 bad "
      "arguments, 3 a chorus call failed, 4 ranks hung.");
  sub->callback([flags, &exit_code] {
    Result<BenchConfig> cfg = MakeConfig(*flags);
    if (!cfg.ok()) {
      std::fprintf(stderr, "chorus bench: %s\n", cfg.status().message().c_str());
      exit_code = kExitUsage;
      return;
    }
    exit_code = RunBench(*cfg);
  });
}

}  // namespace chorus::cli
