// `chorus bench` flags -> BenchConfig, and the size sweep (see bench_config.h).
#include "bench_config.h"

#include <algorithm>
#include <cctype>

#include "algo/select.h"
#include "rank_group.h"

namespace chorus::cli {

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

CollectiveKind KindOf(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce:
      return CollectiveKind::kAllReduce;
    case BenchOp::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case BenchOp::kAllGather:
      break;
  }
  return CollectiveKind::kAllGather;
}

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

double BusFactor(BenchOp op, int ranks) {
  const double p = ranks;
  return op == BenchOp::kAllReduce ? 2.0 * (p - 1) / p : (p - 1) / p;
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
      ops.insert(ops.end(), {BenchOp::kAllReduce, BenchOp::kReduceScatter, BenchOp::kAllGather});
      return Status::Ok();
    }
    const std::optional<BenchOp> op = ParseBenchOp(name);
    if (!op) {
      return InvalidArgument("unknown collective '" + std::string(name) +
                             "' (allreduce, reducescatter, allgather, all)");
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

// --algo must name an algorithm of every collective the run times.
Status CheckAlgorithm(const std::string& algo, const std::vector<BenchOp>& ops) {
  if (algo.empty()) return Status::Ok();
  for (BenchOp op : ops) {
    std::string names;
    bool found = false;
    for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
      if (info.kind != KindOf(op)) continue;
      found = found || info.name == algo;
      names += (names.empty() ? "" : ", ") + std::string(info.name);
    }
    if (!found) {
      return InvalidArgument("--algo " + algo + ": no such algorithm for " +
                             std::string(BenchOpName(op)) + " (" + names + "; see --list-algos)");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<BenchConfig> MakeConfig(const BenchFlags& f) {
  BenchConfig cfg;
  CHORUS_RETURN_IF_ERROR(ParseOpList(f.ops.empty() ? f.op : f.ops, cfg.ops));
  const std::optional<TransportKind> transport = ParseCliTransport(f.transport);
  if (!transport) {
    return InvalidArgument("--transport must be thread, shm or tcp, got '" + f.transport + "'");
  }
  cfg.transport = *transport;
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
  CHORUS_RETURN_IF_ERROR(CheckAlgorithm(f.algo, cfg.ops));
  cfg.algo = f.algo;
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
  };
  const auto optional = [&args](const char* flag, const std::string& value) {
    if (!value.empty()) args.push_back(std::string(flag) + "=" + value);
  };
  optional("--stepbytes", f.step_bytes);
  optional("--sizes", f.sizes);
  optional("--segment-bytes", f.segment_bytes);
  optional("--algo", f.algo);
  if (f.check_option != nullptr && f.check_option->count() > 0) {
    args.push_back("--check=" + (f.check.empty() ? std::string("1") : f.check));
  }
  if (f.csv) args.push_back("--csv");
  if (f.csv_header) args.push_back("--header");
  return args;
}

std::vector<SizePoint> MakeSizes(const BenchConfig& cfg, BenchOp op, int ranks) {
  const size_t elem = DataTypeSize(cfg.dtype);
  const size_t p = static_cast<size_t>(ranks);
  std::vector<SizePoint> sizes;
  const auto add = [&](size_t bytes) {
    SizePoint point;
    if (op == BenchOp::kAllReduce) {
      point.block = std::max<size_t>(1, bytes / elem);
      point.total = point.block;
    } else {
      point.block = std::max<size_t>(1, bytes / (p * elem));
      point.total = point.block * p;
    }
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

}  // namespace chorus::cli
