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
// The ownership table, the JSON record and the plots: demo_output.cpp.
//
// stdout holds exactly the lesson's lines (the JSON record embeds it); notes go to stderr.
#include "demo.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/collectives.h"
#include "chorus/chorus.h"
#include "commands.h"
#include "model/cost_model.h"
#include "rank_group.h"
#include "tuning_env.h"

namespace chorus::cli {
namespace demo {

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

Status InStep(const char* step, const Status& s) {
  return s.ok() ? s : Status(s.code(), std::string(step) + ": " + s.message());
}

int Fail(const Status& s) {
  std::cerr << "chorus demo: failed: " << s << '\n';
  return kExitFailed;
}

namespace {

using Kind = CollectiveKind;

constexpr int kMinBatchRows = 64;
constexpr double kGradientTolerance = 1e-6;
constexpr std::array<Kind, 3> kKinds = {Kind::kAllReduce, Kind::kReduceScatter, Kind::kAllGather};
constexpr int kExitUsage = 2;

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
  Status Run(Communicator& comm, Kind kind);
};

// The buffers each of the lesson's calls reads and writes, found by kind rather than by a switch
// over it: the all-gather sends the reduce-scatter's output.
struct LessonCall {
  Kind kind;
  std::vector<std::byte> Workload::*send;
  std::vector<std::byte> Workload::*recv;
};
constexpr std::array<LessonCall, 3> kLessonCalls = {{
    {Kind::kAllReduce, &Workload::input, &Workload::reduced},
    {Kind::kReduceScatter, &Workload::input, &Workload::shard},
    {Kind::kAllGather, &Workload::shard, &Workload::gathered},
}};

Status Workload::Run(Communicator& comm, Kind kind) {
  for (const LessonCall& lesson : kLessonCalls) {
    if (lesson.kind != kind) continue;
    // The op is ignored by the collectives that do not reduce, as in Communicator::AllGather.
    const internal::CallArgs args{
        kind, Buf(this->*lesson.send), Buf(this->*lesson.recv), ReduceOp::kSum, 0, {}, {}};
    return internal::RunCollective(comm, args, call);
  }
  return Internal("demo: the lesson has no " + std::string(CollectiveKindName(kind)));
}

std::string Shape(size_t n) { return "(" + std::to_string(n) + ",)"; }
std::string PyBytes(uint64_t bytes) { return PyFloat(static_cast<double>(bytes)); }

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

}  // namespace demo

void AddDemoCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<demo::DemoFlags>();
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
  cmd->callback([flags, &exit_code] { exit_code = demo::RunDemo(*flags); });
}

}  // namespace chorus::cli
