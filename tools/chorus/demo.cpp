// `chorus demo`: the distributed-03 lesson (all-reduce versus reduce-scatter + all-gather) run
// for real on a group of chorus ranks, threads of this process (--transport thread) or processes
// on this host (--transport shm). Every printed number comes from the run: a data-parallel
// gradient checked against a float64 reference, the result buffer sizes, the traffic counters
// (which must equal the ring cost model), the latencies and a two-rank ownership table.
//
//   chorus demo --ranks 4 --count 8 --json demo.json --plot out/
//   chorus demo --transport shm --ranks 4
//
// Each rank runs the same code on its own Communicator (see rank_group.h); what rank 0 prints
// needs the other ranks' numbers, which it gets through the group's max and sum. With
// --transport shm this program re-executes itself under `chorus launch --no-prefix`, one worker
// process per rank, and rank 0's process prints and writes --json / --plot.
//
// stdout holds exactly the lesson's lines (the JSON record embeds it); notes go to stderr.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "commands.h"
#include "model/cost_model.h"
#include "rank_group.h"
#include "tuning_env.h"

extern char** environ;  // NOLINT: handed to posix_spawn

namespace chorus::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Kind = CollectiveKind;

constexpr char kChorusVersion[] = "0.1.0";
constexpr int kWarmupReps = 100;
constexpr int kMinBatchRows = 64;
constexpr double kGradientTolerance = 1e-6;
constexpr std::array<Kind, 3> kKinds = {Kind::kAllReduce, Kind::kReduceScatter, Kind::kAllGather};
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct DemoFlags {
  std::string transport = "thread";
  int ranks = 4;
  int count = 8;
  std::string dtype = "float32";
  int reps = 2000;
  std::string json_path;
  std::string plot_dir;
  int timeout_ms = 10000;
  bool rank_worker = false;  // internal: this process is one rank under chorus launch
};

// What the run observed, as rank 0 sees it; the order of the arrays is all-reduce,
// reduce-scatter, then gather.
struct DemoRecord {
  int ranks = 0;
  TransportKind transport = TransportKind::kThread;
  std::array<size_t, 3> shapes{};
  std::array<uint64_t, 3> modeled_bytes{};      // third: reduce-scatter + all-gather
  std::array<uint64_t, 3> measured_bytes{};     // third: reduce-scatter + all-gather
  std::array<double, 3> latency_us{};           // third: the all-gather alone
  std::vector<std::vector<std::string>> table;  // rows of the ownership table
  std::string stdout_text;
  std::vector<std::string> failed_checks;
};

void Emit(DemoRecord& rec, const std::string& line) {
  std::cout << line << '\n' << std::flush;
  rec.stdout_text += line + '\n';
}

// Python's repr of a float: shortest round-trip digits, scientific below 1e-4 and from 1e16.
std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  const std::string sign = s[0] == '-' ? "-" : "";
  std::string mantissa = s.substr(sign.size(), e - sign.size());
  if (exp < -4 || exp >= 16) {
    return sign + mantissa + "e" + (exp < 0 ? "-" : "+") + (std::abs(exp) < 10 ? "0" : "") +
           std::to_string(std::abs(exp));
  }
  std::string digits = mantissa;
  std::erase(digits, '.');
  if (exp < 0) return sign + "0." + std::string(-exp - 1, '0') + digits;
  if (digits.size() <= static_cast<size_t>(exp) + 1) digits.resize(exp + 1, '0');
  const std::string frac = digits.substr(exp + 1);
  return sign + digits.substr(0, exp + 1) + "." + (frac.empty() ? "0" : frac);
}

template <typename T>
std::string ListString(const std::vector<T>& values) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << ']';
  return os.str();
}

// ---------------------------------------------------------------- 1. data-parallel gradient
// Least squares y ~ X w, evaluated at w = w_true + offset with y = X w_true + noise. All inputs
// are small dyadic rationals, so float32 holds them exactly and the check measures the float32
// arithmetic and the all-reduce rather than input rounding.
double Feature(int64_t row, int64_t col) { return ((3 * row + 5 * col + row * col) % 9 - 4) / 4.0; }
double TrueWeight(int64_t col) { return ((7 * col) % 11 - 5) / 16.0; }
double Weight(int64_t col) { return TrueWeight(col) + ((col % 8) * 2 - 7) / 512.0; }
double Target(int64_t row, int cols) {
  double y = ((row * 37) % 11 - 5) / 1024.0;
  for (int c = 0; c < cols; ++c) y += Feature(row, c) * TrueWeight(c);
  return y;
}

// Gradient of the mean squared error over rows [begin, end). Averaging the equal-sized shards'
// means over the ranks gives the mean over the whole batch, which is why kAvg is the right op.
template <typename T>
std::vector<T> MseGradient(int begin, int end, int cols) {
  std::vector<T> grad(cols, T{0});
  for (int row = begin; row < end; ++row) {
    T residual = -static_cast<T>(Target(row, cols));
    for (int c = 0; c < cols; ++c) residual += static_cast<T>(Feature(row, c) * Weight(c));
    for (int c = 0; c < cols; ++c) grad[c] += static_cast<T>(Feature(row, c)) * residual;
  }
  const T scale = T{2} / static_cast<T>(end - begin);
  for (T& g : grad) g *= scale;
  return grad;
}

// ---------------------------------------------------------------- 2-4. the three collectives
// One rank's buffers for --dtype. Zero bytes are a valid zero in every chorus dtype.
struct Workload {
  DataType dtype;
  std::vector<std::byte> input, reduced, shard, gathered;
  // Empty: the fastest algorithm the selection table picks. The byte count uses "ring", the
  // algorithm the seed's idealized model describes.
  CallOptions call;

  Workload(DataType t, int ranks, size_t count, std::chrono::milliseconds timeout) : dtype(t) {
    call.timeout = timeout;  // a process rank's communicator may have a longer default
    const size_t bytes = count * DataTypeSize(t);
    input.assign(bytes, std::byte{0});
    reduced.assign(bytes, std::byte{0});
    shard.assign(bytes / static_cast<size_t>(ranks), std::byte{0});
    gathered.assign(bytes, std::byte{0});
  }
  MutableBuffer Buf(std::vector<std::byte>& v) const {
    return {v.data(), v.size() / DataTypeSize(dtype), dtype};
  }
  // The all-gather sends the reduce-scatter's output, as in the lesson.
  Status RunAll(Communicator& comm) {
    for (Kind kind : kKinds) CHORUS_RETURN_IF_ERROR(Run(comm, kind));
    return Status::Ok();
  }
  Status Run(Communicator& comm, Kind kind) {
    switch (kind) {
      case Kind::kAllReduce:
        return comm.AllReduce(Buf(input), Buf(reduced), ReduceOp::kSum, call);
      case Kind::kReduceScatter:
        return comm.ReduceScatter(Buf(input), Buf(shard), ReduceOp::kSum, call);
      case Kind::kAllGather:
        return comm.AllGather(Buf(shard), Buf(gathered), call);
      default:  // the lesson runs the three above
        break;
    }
    return Internal("demo: the lesson has no " + std::string(CollectiveKindName(kind)));
  }
};

std::string Shape(size_t n) { return "(" + std::to_string(n) + ",)"; }
std::string PyBytes(uint64_t bytes) { return PyFloat(static_cast<double>(bytes)); }

Status InStep(const char* step, const Status& s) {
  return s.ok() ? s : Status(s.code(), std::string(step) + ": " + s.message());
}

// One rank's part of the lesson (everything but the ownership table). Only rank 0 prints and
// fills the record; the others compute and contribute to the group's max and sum.
class DemoRank {
 public:
  DemoRank(RankGroup& group, DataType dtype, int count, int reps, std::chrono::milliseconds timeout,
           DemoRecord& rec)
      : group_(group),
        rank_(group.rank()),
        ranks_(group.size()),
        count_(count),
        reps_(reps),
        work_(dtype, group.size(), static_cast<size_t>(count), timeout),
        rec_(rec) {}

  Status Run() {
    rec_.ranks = ranks_;
    rec_.transport = group_.transport();
    CHORUS_RETURN_IF_ERROR(InStep("gradient", Gradient()));
    CHORUS_RETURN_IF_ERROR(InStep("shapes", Shapes()));
    CHORUS_RETURN_IF_ERROR(InStep("bytes", Bytes()));
    return InStep("latency", Latencies());
  }

 private:
  void Say(const std::string& line) {
    if (rank_ == 0) Emit(rec_, line);
  }
  void Check(bool ok, const std::string& what) {
    if (rank_ == 0 && !ok) rec_.failed_checks.push_back(what);
  }

  Status Gradient();
  Status Shapes();
  Status Bytes();
  Status Latencies();
  Result<double> MedianMicros(Kind kind);

  RankGroup& group_;
  const int rank_;
  const int ranks_;
  const int count_;
  const int reps_;
  Workload work_;
  DemoRecord& rec_;
};

// 1. Each rank's shard of the batch, averaged over ranks, against the whole batch in float64.
Status DemoRank::Gradient() {
  const int rows_per_rank = (kMinBatchRows + ranks_ - 1) / ranks_;
  std::vector<float> local =
      MseGradient<float>(rank_ * rows_per_rank, (rank_ + 1) * rows_per_rank, count_);
  CHORUS_RETURN_IF_ERROR(group_.comm().AllReduce(std::span<float>(local), ReduceOp::kAvg,
                                                 {.timeout = work_.call.timeout}));
  const std::vector<double> reference = MseGradient<double>(0, ranks_ * rows_per_rank, count_);
  double worst = 0;
  for (int c = 0; c < count_; ++c) worst = std::max(worst, std::abs(local[c] - reference[c]));
  // A NaN would vanish in the maximum; make it the worst possible difference instead.
  if (std::isnan(worst)) worst = std::numeric_limits<double>::infinity();
  CHORUS_RETURN_IF_ERROR(group_.MaxOverRanks(std::span<double>(&worst, 1)));
  std::vector<std::string> shown;
  for (double g : reference) shown.push_back(PyFloat(g));
  Say("Gradient reference: " + ListString(shown));
  Say("Gradient max abs difference vs all-reduce: " + PyFloat(worst));
  Check(worst <= kGradientTolerance, "gradient differs from the float64 reference by " +
                                         PyFloat(worst) + " > " + PyFloat(kGradientTolerance));
  return Status::Ok();
}

// 2. Every rank has the same sizes; rank 0 reports its own.
Status DemoRank::Shapes() {
  CHORUS_RETURN_IF_ERROR(work_.RunAll(group_.comm()));
  rec_.shapes = {work_.Buf(work_.reduced).count, work_.Buf(work_.shard).count,
                 work_.Buf(work_.gathered).count};
  Say("Local result shapes: replicated " + Shape(rec_.shapes[0]) + ", reduce-scatter " +
      Shape(rec_.shapes[1]) + ", gathered " + Shape(rec_.shapes[2]));
  return Status::Ok();
}

// 3. Each rank's traffic counters after one ring call of each kind, against the cost model.
Status DemoRank::Bytes() {
  Communicator& comm = group_.comm();
  comm.ResetTraffic();
  work_.call.algorithm = "ring";
  const Status run = work_.RunAll(comm);
  work_.call.algorithm.clear();
  CHORUS_RETURN_IF_ERROR(run);
  const TrafficCounters traffic = comm.traffic();
  // Rank r fills row r and leaves the others zero, so the sum over ranks gives rank 0 every
  // rank's row: [sent per kind..., calls per kind...].
  const size_t row = 2 * kKinds.size();
  std::vector<uint64_t> table(row * static_cast<size_t>(ranks_), 0);
  for (size_t k = 0; k < kKinds.size(); ++k) {
    table[static_cast<size_t>(rank_) * row + k] = traffic.of(kKinds[k]).bytes_sent;
    table[static_cast<size_t>(rank_) * row + kKinds.size() + k] = traffic.of(kKinds[k]).calls;
  }
  CHORUS_RETURN_IF_ERROR(group_.SumOverRanks(table));
  if (rank_ != 0) return Status::Ok();

  // The slowest rank sets the pace, so "per rank" means the maximum over ranks.
  const size_t count = static_cast<size_t>(count_);
  rec_.modeled_bytes = {};
  rec_.measured_bytes = {};
  for (int r = 0; r < ranks_; ++r) {
    const uint64_t* sent = &table[static_cast<size_t>(r) * row];
    const uint64_t* calls = sent + kKinds.size();
    const auto model = [&](Kind k) {
      return model::RingBytesSent(k, ranks_, r, count, work_.dtype);
    };
    const std::array<uint64_t, 3> modeled = {model(Kind::kAllReduce), model(Kind::kReduceScatter),
                                             model(Kind::kReduceScatter) + model(Kind::kAllGather)};
    const std::array<uint64_t, 3> measured = {sent[0], sent[1], sent[1] + sent[2]};
    for (size_t i = 0; i < 3; ++i) {
      rec_.modeled_bytes[i] = std::max(rec_.modeled_bytes[i], modeled[i]);
      rec_.measured_bytes[i] = std::max(rec_.measured_bytes[i], measured[i]);
      Check(calls[i] == 1, "rank " + std::to_string(r) + " counted " + std::to_string(calls[i]) +
                               " " + std::string(CollectiveKindName(kKinds[i])) +
                               " calls, expected 1");
    }
  }
  Say("Idealized ring bytes per rank: " + PyBytes(rec_.modeled_bytes[0]) + " " +
      PyBytes(rec_.modeled_bytes[1]));
  Say("Measured ring bytes per rank: " + PyBytes(rec_.measured_bytes[0]) + " " +
      PyBytes(rec_.measured_bytes[1]));
  Check(rec_.modeled_bytes == rec_.measured_bytes,
        "traffic counters disagree with the ring model (all-reduce, reduce-scatter, "
        "scatter + gather): measured " +
            ListString(std::vector(rec_.measured_bytes.begin(), rec_.measured_bytes.end())) +
            ", modeled " +
            ListString(std::vector(rec_.modeled_bytes.begin(), rec_.modeled_bytes.end())));
  return Status::Ok();
}

// 4. Times `reps_` calls of `kind` after a warm-up. An untimed start (a barrier, then a
// one-element all-reduce that releases the ranks close together, as in chorus bench) lines the
// ranks up before each call; a call's time is the slowest rank's (one max over ranks after the
// loop), and the result is the median of those.
Result<double> DemoRank::MedianMicros(Kind kind) {
  std::vector<double> micros(static_cast<size_t>(reps_));
  for (int i = -kWarmupReps; i < reps_; ++i) {
    CHORUS_RETURN_IF_ERROR(group_.StartTogether());
    const auto start = std::chrono::steady_clock::now();
    const Status s = work_.Run(group_.comm(), kind);
    const auto stop = std::chrono::steady_clock::now();
    CHORUS_RETURN_IF_ERROR(s);
    if (i >= 0) {
      micros[static_cast<size_t>(i)] =
          std::chrono::duration<double, std::micro>(stop - start).count();
    }
  }
  CHORUS_RETURN_IF_ERROR(group_.MaxOverRanks(micros));
  return Median(micros);
}

Status DemoRank::Latencies() {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    Result<double> median = MedianMicros(kKinds[i]);
    CHORUS_RETURN_IF_ERROR(median.status());
    rec_.latency_us[i] = *median;
  }
  Say("Completed CPU median microseconds: {'all_reduce': " + PyFloat(rec_.latency_us[0]) +
      ", 'reduce_scatter': " + PyFloat(rec_.latency_us[1]) +
      ", 'all_gather_only': " + PyFloat(rec_.latency_us[2]) + "}");
  return Status::Ok();
}

// ---------------------------------------------------------------- 5. who owns what
// A two-rank group of threads in the calling process, on every transport: rank 0 must read both
// participants' buffers to print the table, and with --transport shm it is the only process
// that prints. The JSON record says so (data.config.ownershipTableTransport).
Status OwnershipTable(const CommOptions& options, DemoRecord& rec) {
  std::vector<std::vector<int32_t>> contribution = {{1, 2}, {3, 4}};
  std::vector<std::vector<int32_t>> shard(2, std::vector<int32_t>(1));
  std::vector<std::vector<int32_t>> gathered(2, std::vector<int32_t>(2));
  CHORUS_RETURN_IF_ERROR(RunThreadRanks(
      2, options,
      [&](RankGroup& pair) {
        Communicator& comm = pair.comm();
        const size_t r = static_cast<size_t>(pair.rank());
        CHORUS_RETURN_IF_ERROR(comm.ReduceScatter(std::span<const int32_t>(contribution[r]),
                                                  std::span<int32_t>(shard[r]), ReduceOp::kSum));
        return comm.AllGather(std::span<const int32_t>(shard[r]), std::span<int32_t>(gathered[r]));
      },
      {.program = "chorus demo",
       .stall = 2 * options.timeout + std::chrono::seconds(10),
       .exit_code = kExitFailed}));
  rec.table = {{"Stage", "Participant 0", "Participant 1"},
               {"Contribution", ListString(contribution[0]), ListString(contribution[1])},
               {"Reduce-scatter", ListString(shard[0]), ListString(shard[1])},
               {"All-gather", ListString(gathered[0]), ListString(gathered[1])}};
  std::array<size_t, 3> width{};
  for (const auto& row : rec.table) {
    for (size_t c = 0; c < 3; ++c) width[c] = std::max(width[c], row[c].size());
  }
  const auto pad = [](const std::string& s, size_t w) {
    return s + std::string(w - s.size(), ' ');
  };
  Emit(rec, "Reduce-scatter followed by all-gather");
  for (size_t i = 0; i < rec.table.size(); ++i) {
    const auto& row = rec.table[i];
    std::string line = pad(row[0], width[0]) + " | " + pad(row[1], width[1]) + " | " + row[2];
    Emit(rec, line);
    if (i == 0) {
      Emit(rec, std::string(width[0] + 1, '-') + "+" + std::string(width[1] + 2, '-') + "+" +
                    std::string(width[2] + 1, '-'));
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- artifacts
std::string UtcNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lld+00:00", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

Json ToJson(const DemoRecord& rec, const DemoFlags& flags) {
  const auto as_doubles = [](const std::array<uint64_t, 3>& v) {
    return Json::array(
        {static_cast<double>(v[0]), static_cast<double>(v[1]), static_cast<double>(v[2])});
  };
  const auto& t = rec.table;
  // The table always comes from thread ranks (see OwnershipTable); say so when the rest did not.
  const std::string where =
      rec.transport == TransportKind::kThread
          ? ""
          : " (two thread ranks inside rank 0's process; the rest of the run used " +
                std::string(TransportKindName(rec.transport)) + ")";
  const std::string reading =
      "Participant 0 contributed " + t[1][1] + " and participant 1 contributed " + t[1][2] +
      ". Reduce-scatter summed them and left participant 0 with " + t[2][1] +
      " and participant 1 with " + t[2][2] +
      ", so at that point neither held the whole result. All-gather then gave each " + t[3][1] +
      ". The values were read back from the buffers of a real two-rank chorus group" + where +
      "; the table shows who owns what, not the order in which bytes moved.";
  Json panel_table = {
      {"kind", "table"}, {"headers", t[0]}, {"rows", std::vector(t.begin() + 1, t.end())}};
  Json out;
  out["schemaVersion"] = 1;
  out["lessonId"] = "distributed-03";
  out["kind"] = "executed";
  out["generatedAt"] = UtcNow();
  out["provenance"] = "chorus demo";
  out["environment"] = {{"backend", "cpu"},
                        {"deviceCount", rec.ranks},
                        {"transport", TransportKindName(rec.transport)},
                        {"chorus", kChorusVersion}};
  out["stdout"] = rec.stdout_text;
  out["data"]["config"] = {{"ranks", rec.ranks},        {"count", flags.count},
                           {"dtype", flags.dtype},      {"reps", flags.reps},
                           {"warmupReps", kWarmupReps}, {"ownershipTableTransport", "thread"}};
  out["data"]["panels"] =
      Json::array({{{"kind", "bar"},
                    {"labels", {"all-reduce", "reduce-scatter", "after gather"}},
                    {"ylabel", "values stored per device"},
                    {"series", {{{"label", "observed local shape"}, {"y", rec.shapes}}}}},
                   {{"kind", "bar"},
                    {"labels", {"all-reduce", "reduce-scatter", "scatter + gather"}},
                    {"ylabel", "modeled bytes per rank"},
                    {"series",
                     {{{"label", "idealized ring payload"}, {"y", as_doubles(rec.modeled_bytes)}},
                      {{"label", "measured bytes (traffic counters)"},
                       {"y", as_doubles(rec.measured_bytes)}}}}}});
  out["data"]["latency_us"] = {{"all_reduce", rec.latency_us[0]},
                               {"reduce_scatter", rec.latency_us[1]},
                               {"all_gather_only", rec.latency_us[2]}};
  out["diagram"] = {
      {"title", "Reduce-scatter followed by all-gather"},
      {"prediction",
       "Right after reduce-scatter, does any participant hold the whole reduced "
       "array?"},
      {"reading", reading},
      {"alt", "Table with one column per participant and one row per stage. " + reading},
      {"scope", "Ownership of reduced data across two ranks, from an executed run."},
      {"height", 3.8},
      {"panel", panel_table}};
  return out;
}

bool WriteJson(const Json& record, const fs::path& path) {
  std::ofstream out(path);
  out << record.dump(2) << '\n';
  out.close();
  if (!out) std::cerr << "chorus demo: cannot write " << path << '\n';
  return static_cast<bool>(out);
}

// Where scripts/plot_demo.py is, first found of: $CHORUS_PLOT_SCRIPT (a modified copy wins over
// everything), the installed copy at the same place relative to this binary as at install time
// (<prefix>/bin/chorus -> <prefix>/share/chorus/plot_demo.py, so a moved prefix still works),
// and the source tree this binary was built from (any build directory). `tried` lists the
// paths looked at, for the error.
fs::path FindPlotScript(std::vector<std::string>& tried) {
  if (const char* env = std::getenv("CHORUS_PLOT_SCRIPT"); env != nullptr && *env != '\0') {
    tried.push_back(std::string(env) + " (CHORUS_PLOT_SCRIPT)");
    return fs::exists(env) ? fs::path(env) : fs::path();
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back((exe.parent_path() / CHORUS_PLOT_SCRIPT_FROM_BINDIR).lexically_normal());
  }
  candidates.emplace_back(CHORUS_PLOT_SCRIPT_IN_SOURCE);
  for (const fs::path& candidate : candidates) {
    tried.push_back(candidate.string());
    if (fs::exists(candidate, ec)) return candidate;
  }
  return {};
}

// Runs the plot script with its stdout sent to our stderr, so our stdout stays the lesson.
bool RunPlotScript(const fs::path& json_path, const fs::path& dir) {
  std::vector<std::string> tried;
  const fs::path script = FindPlotScript(tried);
  if (script.empty()) {
    std::cerr << "chorus demo: plot script not found; looked at:\n";
    for (const std::string& path : tried) std::cerr << "  " << path << '\n';
    std::cerr << "set CHORUS_PLOT_SCRIPT to scripts/plot_demo.py of a chorus checkout\n";
    return false;
  }
  // Which copy drew the figures matters when there are several (installed, source, modified).
  std::cerr << "chorus demo: plotting with " << script.string() << '\n';
  std::string python = "/usr/bin/python3";
  std::vector<std::string> args = {python, script.string(), json_path.string(), dir.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int wstatus = 0;
  if (err != 0 || waitpid(pid, &wstatus, 0) < 0) {
    std::cerr << "chorus demo: cannot run " << python << ": " << std::strerror(err) << '\n';
    return false;
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::cerr << "chorus demo: " << script.string() << " failed\n";
    return false;
  }
  return true;
}

int Fail(const Status& s) {
  std::cerr << "chorus demo: failed: " << s << '\n';
  return kExitFailed;
}

// Rank 0's last steps: the ownership table, the verdict, the record and the plots.
int Finish(const DemoFlags& flags, const CommOptions& options, DemoRecord& rec) {
  if (Status s = OwnershipTable(options, rec); !s.ok()) return Fail(InStep("ownership table", s));
  // A record of a run that failed its checks would look like a good one: write none.
  if (!rec.failed_checks.empty()) {
    for (const std::string& f : rec.failed_checks) {
      std::cerr << "chorus demo: check failed: " << f << '\n';
    }
    return kExitFailed;
  }
  const Json record = ToJson(rec, flags);
  if (!flags.json_path.empty() && !WriteJson(record, flags.json_path)) return kExitFailed;
  if (!flags.plot_dir.empty()) {
    const fs::path dir = flags.plot_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      std::cerr << "chorus demo: cannot create " << dir << ": " << ec.message() << '\n';
      return kExitFailed;
    }
    if (!WriteJson(record, dir / "demo.json") || !RunPlotScript(dir / "demo.json", dir)) {
      return kExitFailed;
    }
  }
  return 0;
}

// What a worker process needs to repeat this run as one rank; the launcher sets the group.
std::vector<std::string> WorkerArgs(const DemoFlags& flags) {
  std::vector<std::string> args = {"demo",
                                   "--rank-worker",
                                   "--count=" + std::to_string(flags.count),
                                   "--dtype=" + flags.dtype,
                                   "--reps=" + std::to_string(flags.reps),
                                   "--timeout-ms=" + std::to_string(flags.timeout_ms),
                                   "--transport=" + flags.transport};
  if (!flags.json_path.empty()) args.push_back("--json=" + flags.json_path);
  if (!flags.plot_dir.empty()) args.push_back("--plot=" + flags.plot_dir);
  return args;
}

int RunDemo(const DemoFlags& flags) {
  const DataType dtype = *ParseDataType(flags.dtype);  // the flags' validators accepted them
  TransportKind transport = *ParseCliTransport(flags.transport);
  // A worker is one of a launcher's processes (ours, or mpirun's / srun's): shared memory on
  // one host, TCP across hosts, unless tcp was asked for.
  const bool worker = flags.rank_worker || StartedByForeignLauncher();
  if (worker && transport == TransportKind::kThread) transport = TransportKind::kAuto;
  if (!worker) {
    if (flags.count % flags.ranks != 0) {
      std::cerr << "chorus demo: --count (" << flags.count << ") must be a multiple of --ranks ("
                << flags.ranks << "): reduce-scatter gives every rank count/ranks values\n";
      return kExitUsage;
    }
    if (transport != TransportKind::kThread) {
      return ExecUnderLauncher("chorus demo", flags.ranks, WorkerArgs(flags), kExitFailed);
    }
  }
  const CommOptions options{.timeout = std::chrono::milliseconds(flags.timeout_ms),
                            .tuning_file = TuningFileFromEnvironment()};
  DemoRecord rec;  // rank 0's
  bool rank_zero_here = false;
  const RankBody body = [&](RankGroup& group) -> Status {
    if (flags.count % group.size() != 0) {
      return InvalidArgument("--count (" + std::to_string(flags.count) +
                             ") is not a multiple of the group size (" +
                             std::to_string(group.size()) + ")");
    }
    DemoRecord ignored;
    const bool zero = group.rank() == 0;
    if (zero) rank_zero_here = true;  // only rank 0 writes it: thread ranks share it
    return DemoRank(group, dtype, flags.count, flags.reps, options.timeout, zero ? rec : ignored)
        .Run();
  };
  const Watchdog::Options watch{.program = "chorus demo",
                                .stall = 2 * options.timeout + std::chrono::seconds(10),
                                .exit_code = kExitFailed};
  CommOptions processes = options;
  processes.transport = transport;
  const Status status = transport == TransportKind::kThread
                            ? RunThreadRanks(flags.ranks, options, body, watch)
                            : RunProcessRank(processes, body, watch);
  if (!status.ok()) return Fail(status);
  if (!rank_zero_here) return 0;  // a worker process other than rank 0's
  return Finish(flags, options, rec);
}

}  // namespace

void AddDemoCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the reduce-scatter / all-gather lesson on thread or process ranks and check it "
      "against the ring cost model");
  cmd->add_option("-t,--transport", flags->transport,
                  "thread: ranks are threads of this process; shm: ranks are processes on this "
                  "host (started through chorus launch); tcp: processes over TCP on loopback")
      ->check(CLI::IsMember({"thread", "shm", "tcp"}))
      ->capture_default_str();
  cmd->add_option("-n,--ranks", flags->ranks, "ranks (threads or processes) in the group")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--count", flags->count,
                  "elements per buffer and parameters of the gradient model; a multiple of --ranks")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--dtype", flags->dtype,
                  "element type of the shape, bytes and latency parts (the gradient is float32)")
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            if (ParseDataType(name)) return {};
            return "unknown dtype '" + name +
                   "' (try float32, float64, float16, bfloat16, int8, "
                   "uint8, int32, uint32, int64, uint64)";
          },
          "DTYPE"))
      ->capture_default_str();
  cmd->add_option("--reps", flags->reps, "timed repetitions per collective (after 100 warm-up)")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  cmd->add_option("--json", flags->json_path, "write the JSON record to FILE")->type_name("FILE");
  cmd->add_option("--plot", flags->plot_dir,
                  "write DIR/demo.json and render panel1.png, panel2.png and table.png there")
      ->type_name("DIR");
  cmd->add_option("--timeout-ms", flags->timeout_ms, "deadline of every collective call")
      ->check(CLI::Range(1, 3'600'000))
      ->capture_default_str();
  // Internal: set by the parent for each process it starts through chorus launch.
  cmd->add_flag("--rank-worker", flags->rank_worker, "")->group("");
  cmd->callback([flags, &exit_code] { exit_code = RunDemo(*flags); });
}

}  // namespace chorus::cli
