// `chorus bench` flags -> BenchConfig, and the size sweep (see bench_config.h).
#include "bench_config.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "algo/select.h"
#include "base/collectives.h"
#include "rank_group.h"

namespace chorus::cli {

namespace {

double One(int /*p*/) { return 1.0; }

// sendrecv in the table's terms. `kind` is unused: RunOp sends messages, not a collective.
constexpr internal::CollectiveInfo kSendRecvInfo{
    .kind = CollectiveKind::kAllReduce,
    .name = "sendrecv",
    .csv_name = "sendrecv",
    .aliases = {"send_recv", "", ""},
    .reduces = false,
    .rooted = false,
    .send_only_at_root = false,
    .recv_only_at_root = false,
    .counts = internal::Counts::kSame,
    .varied = false,
    .outcome = internal::Outcome::kMoved,
    .source = nullptr,  // rank r's one block is rank (r - 1) mod p's, which needs p: Verify
    .in_place = "",
    .model_bytes = One,
    .bus_factor = One,
};

}  // namespace

const internal::CollectiveInfo& InfoOf(BenchOp op) {
  if (IsCollectiveOp(op)) return internal::Collective(KindOf(op));
  return kSendRecvInfo;
}

std::string_view BenchOpName(BenchOp op) { return InfoOf(op).csv_name; }

std::optional<BenchOp> ParseBenchOp(std::string_view name) {
  if (const std::optional<CollectiveKind> kind = internal::FindCollective(name)) {
    return OpOf(*kind);
  }
  std::string plain;
  for (char c : name) {
    if (c != '_' && c != '-') plain += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (plain == "sendrecv") return kSendRecv;
  return std::nullopt;
}

std::vector<BenchOp> AllBenchOps() {
  std::vector<BenchOp> ops;
  for (const internal::CollectiveInfo& c : internal::Collectives()) ops.push_back(OpOf(c.kind));
  ops.push_back(kSendRecv);
  return ops;
}

std::string BenchOpNames(bool collectives_only) {
  std::string names;
  for (const internal::CollectiveInfo& c : internal::Collectives()) {
    if (!names.empty()) names += ", ";
    names += c.name;
  }
  if (!collectives_only) names += ", " + std::string(kSendRecvInfo.name);
  return names;
}

double BusFactor(BenchOp op, int ranks) {
  return ranks <= 1 ? 0.0 : InfoOf(op).bus_factor(ranks);
}

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

namespace {

// Calls `each` with every non-empty item of a comma-separated list.
template <typename Fn>
Status ForEachItem(std::string_view list, Fn each) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) CHORUS_RETURN_IF_ERROR(each(list.substr(start, end - start)));
    start = end + 1;
  }
  return Status::Ok();
}

Status ParseOpList(std::string_view list, std::vector<BenchOp>& ops) {
  CHORUS_RETURN_IF_ERROR(ForEachItem(list, [&ops](std::string_view name) {
    if (name == "all") {
      const std::vector<BenchOp> all = AllBenchOps();
      ops.insert(ops.end(), all.begin(), all.end());
      return Status::Ok();
    }
    const std::optional<BenchOp> op = ParseBenchOp(name);
    if (!op) {
      return InvalidArgument("unknown collective '" + std::string(name) + "' (" + BenchOpNames() +
                             ", all)");
    }
    ops.push_back(*op);
    return Status::Ok();
  }));
  if (ops.empty()) return InvalidArgument("no collective given");
  return Status::Ok();
}

Result<size_t> ParseBytesFlag(std::string_view flag, std::string_view text) {
  const std::optional<size_t> bytes = ParseBytes(text);
  if (!bytes) {
    return InvalidArgument(std::string(flag) + ": cannot read '" + std::string(text) +
                           "' as a byte count (digits, optional K, M or G)");
  }
  return *bytes;
}

// --algo applies to the collectives of the run that have an algorithm of that name (as
// CommOptions::algorithm does); it must name one of at least one of them.
Status CheckAlgorithm(const std::string& algo, const std::vector<BenchOp>& ops) {
  if (algo.empty()) return Status::Ok();
  std::string names;
  for (BenchOp op : ops) {
    if (!IsCollectiveOp(op)) continue;  // messages have no algorithms
    if (internal::Implements(KindOf(op), algo)) return Status::Ok();
    for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
      if (info.kind == KindOf(op)) names += (names.empty() ? "" : ", ") + std::string(info.name);
    }
  }
  return InvalidArgument(
      "--algo " + algo + ": no such algorithm for " +
      (ops.size() == 1 ? std::string(BenchOpName(ops[0])) : "these collectives") + " (" +
      (names.empty() ? std::string("it has none") : names) +
      "; see --list-algos)");
}

}  // namespace

Result<BenchConfig> MakeConfig(const BenchFlags& f) {
  BenchConfig cfg;
  CHORUS_RETURN_IF_ERROR(ParseOpList(f.ops.empty() ? f.op : f.ops, cfg.ops));
  if (f.transport == "mpi") {
    if (!CliHasMpi()) {
      return InvalidArgument(
          "--transport mpi is not available in this build: the CLI is linked with chorus::mpi "
          "only when CMake finds an MPI (Debian: libopenmpi-dev), and not in sanitizer builds");
    }
    cfg.transport = TransportKind::kMpi;
  } else {
    const std::optional<TransportKind> transport = ParseCliTransport(f.transport);
    if (!transport) {
      return InvalidArgument("--transport must be thread, shm, tcp or mpi, got '" + f.transport +
                             "'");
    }
    cfg.transport = *transport;
  }
  if (f.ranks < 1) return InvalidArgument("--ranks must be >= 1, got " + std::to_string(f.ranks));
  cfg.ranks = f.ranks;

  Result<size_t> min_bytes = ParseBytesFlag("--minbytes", f.min_bytes);
  if (!min_bytes.ok()) return min_bytes.status();
  Result<size_t> max_bytes = ParseBytesFlag("--maxbytes", f.max_bytes);
  if (!max_bytes.ok()) return max_bytes.status();
  cfg.min_bytes = *min_bytes;
  cfg.max_bytes = *max_bytes;
  if (!f.sizes.empty()) {
    CHORUS_RETURN_IF_ERROR(ForEachItem(f.sizes, [&cfg](std::string_view item) {
      Result<size_t> bytes = ParseBytesFlag("--sizes", item);
      if (!bytes.ok()) return bytes.status();
      cfg.sizes.push_back(*bytes);
      return Status::Ok();
    }));
    if (cfg.sizes.empty()) return InvalidArgument("--sizes: no size given");
    std::sort(cfg.sizes.begin(), cfg.sizes.end());
    cfg.min_bytes = cfg.sizes.front();
    cfg.max_bytes = cfg.sizes.back();
  }
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
  if (!redop) {
    return InvalidArgument("unknown --reduce-op '" + f.redop + "' (sum prod min max avg)");
  }
  cfg.redop = *redop;

  if (f.warmup < 0) return InvalidArgument("--warmup_iters must be >= 0");
  if (f.iters < 0) return InvalidArgument("--iters must be >= 1 (or 0 for automatic)");
  cfg.warmup = f.warmup;
  cfg.iters = f.iters;
  if (!(f.min_seconds >= 0) || f.min_seconds > 3600) {
    return InvalidArgument("--min-seconds must be between 0 and 3600, got " +
                           std::to_string(f.min_seconds));
  }
  if (f.busy < 0 || f.busy > 64) {
    return InvalidArgument("--busy must be between 0 and 64, got " + std::to_string(f.busy));
  }
  cfg.busy = f.busy;
  cfg.min_seconds = f.min_seconds > 0 ? f.min_seconds
                    : f.busy > 0      ? kBusyMinSeconds
                                      : kDefaultMinSeconds;
  cfg.mean = f.mean || f.busy > 0;

  if (f.check_given && f.check_given()) {
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
  CHORUS_RETURN_IF_ERROR(CheckAlgorithm(f.algo, cfg.ops));
  cfg.algo = f.algo;
  if (f.root < 0 || (!f.rank_worker && f.transport != "mpi" && f.root >= f.ranks)) {
    return InvalidArgument("--root " + std::to_string(f.root) + " is not a rank of the " +
                           std::to_string(f.ranks) + "-rank job");
  }
  cfg.root = f.root;
  if (f.split != "uneven" && f.split != "even") {
    return InvalidArgument("--split " + f.split + ": expected uneven or even");
  }
  cfg.even_split = f.split == "even";
  return cfg;
}

std::vector<std::string> WorkerArgs(const BenchFlags& f) {
  // The name=value form keeps a value that starts with '-' (a --lib name) a value.
  std::vector<std::string> args = {
      "bench",
      "--rank-worker",
      "--ops=" + (f.ops.empty() ? f.op : f.ops),
      "--minbytes=" + f.min_bytes,
      "--maxbytes=" + f.max_bytes,
      "--stepfactor=" + std::to_string(f.step_factor),
      "--datatype=" + f.dtype,
      "--reduce-op=" + f.redop,
      "--warmup-iters=" + std::to_string(f.warmup),
      "--iters=" + std::to_string(f.iters),
      "--lib=" + f.lib,
      "--timeout-ms=" + std::to_string(f.timeout_ms),
      "--transport=" + f.transport,
      "--root=" + std::to_string(f.root),
      "--split=" + f.split,
  };
  const auto optional = [&args](const char* flag, const std::string& value) {
    if (!value.empty()) args.push_back(std::string(flag) + "=" + value);
  };
  optional("--stepbytes", f.step_bytes);
  optional("--sizes", f.sizes);
  optional("--segment-bytes", f.segment_bytes);
  optional("--algo", f.algo);
  if (f.check_given && f.check_given()) {
    args.push_back("--check=" + (f.check.empty() ? std::string("1") : f.check));
  }
  if (f.csv) args.push_back("--csv");
  if (f.csv_header) args.push_back("--header");
  // The parent runs the busy processes; its workers know of them (the table says so, and the
  // timing defaults follow) but start none (--rank-worker).
  if (f.busy > 0) args.push_back("--busy=" + std::to_string(f.busy));
  if (f.min_seconds > 0) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.17g", f.min_seconds);
    args.push_back(std::string("--min-seconds=") + seconds);
  }
  if (f.mean) args.push_back("--mean");
  return args;
}

std::vector<SizePoint> MakeSizes(const BenchConfig& cfg, BenchOp op, int ranks) {
  const size_t elem = DataTypeSize(cfg.dtype);
  std::vector<SizePoint> sizes;
  const auto add = [&](size_t bytes) {
    SizePoint point;
    const internal::Counts counts = InfoOf(op).counts;
    if (counts == internal::Counts::kNone) {  // a barrier moves nothing: one row
      if (sizes.empty()) sizes.push_back(point);
      return;
    }
    // A v-collective's size is its total, split unevenly (LayoutAt).
    if (InfoOf(op).varied) {
      point.total = std::max<size_t>(1, bytes / elem);
      point.block = point.total;
      if (sizes.empty() || sizes.back().total != point.total) sizes.push_back(point);
      return;
    }
    // The size is the large buffer's, as in nccl-tests; it holds `blocks` blocks.
    const size_t blocks =
        std::max(internal::SendBlocks(counts, ranks), internal::RecvBlocks(counts, ranks));
    point.block = std::max<size_t>(1, bytes / (blocks * elem));
    point.total = point.block * blocks;
    if (sizes.empty() || sizes.back().total != point.total) sizes.push_back(point);
  };
  if (!cfg.sizes.empty()) {
    for (size_t bytes : cfg.sizes) add(bytes);
    return sizes;
  }
  size_t bytes = cfg.min_bytes;
  while (true) {
    add(bytes);
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

void UnevenCounts(size_t n, int p, std::vector<size_t>* counts) {
  const auto ranks = static_cast<size_t>(p);
  const size_t ramp = ranks * (ranks - 1) / 2;
  counts->resize(ranks);
  size_t sum = 0;
  for (size_t r = 0; r < ranks; ++r) {
    (*counts)[r] = n >= ramp ? (n - ramp) / ranks + r : n / ranks;
    sum += (*counts)[r];
  }
  counts->back() += n - sum;
}

void LayoutAt(BenchOp op, const SizePoint& size, int ranks, int rank, bool even,
              BlockLayout* layout) {
  const internal::CollectiveInfo& c = InfoOf(op);
  const auto p = static_cast<size_t>(ranks);
  const size_t send_blocks = internal::SendBlocks(c.counts, ranks);
  const size_t recv_blocks = internal::RecvBlocks(c.counts, ranks);
  if (!c.varied) {
    layout->send.assign(send_blocks, size.block);
    layout->recv.assign(recv_blocks, size.block);
    return;
  }
  const bool send_per_rank = internal::SendIsPerRank(c.counts);
  std::vector<size_t>& split = send_per_rank ? layout->send : layout->recv;
  if (even) {
    split.assign(p, size.total / p);
    split.back() += size.total % p;
  } else {
    UnevenCounts(size.total, ranks, &split);
  }
  const auto r = static_cast<size_t>(rank);
  if (c.counts == internal::Counts::kBothAreP) {
    layout->recv.resize(p);
    std::rotate(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(r), split.end());
    for (size_t q = 0; q < p; ++q) layout->recv[q] = split[q];  // rank q sends r entry q + r too
  } else if (send_per_rank) {
    layout->recv.assign(1, split[r]);
  } else {
    layout->send.assign(1, split[r]);
  }
}

size_t OffsetOf(const std::vector<size_t>& blocks, size_t j) {
  size_t offset = 0;
  for (size_t i = 0; i < j; ++i) offset += blocks[i];
  return offset;
}

}  // namespace chorus::cli
