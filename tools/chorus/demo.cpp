// `chorus demo`: the distributed-03 lesson (all-reduce versus reduce-scatter + all-gather) run
// for real on a group of thread ranks. Every printed number comes from the run: a data-parallel
// gradient checked against a float64 reference, the result buffer sizes, the traffic counters
// (which must equal the ring cost model), the latencies and a two-rank ownership table.
//
//   chorus demo --ranks 4 --count 8 --json demo.json --plot out/
//
// stdout holds exactly the lesson's lines (the JSON record embeds it); notes go to stderr.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <barrier>
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
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "commands.h"
#include "model/cost_model.h"

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

struct DemoFlags {
  int ranks = 4;
  int count = 8;
  std::string dtype = "float32";
  int reps = 2000;
  std::string json_path;
  std::string plot_dir;
  int timeout_ms = 10000;
};

// What the run observed; the order of the arrays is all-reduce, reduce-scatter, then gather.
struct DemoRecord {
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

// Runs body(comm, rank) on one thread per rank. A failing rank aborts the group so that its
// peers stop waiting; the root cause (the first failure that is not a kAborted echo) is returned.
Status RunOnRanks(std::vector<Communicator>& group,
                  const std::function<Status(Communicator&, int)>& body) {
  std::vector<Status> results(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      results[r] = body(group[r], static_cast<int>(r));
      if (!results[r].ok()) group[r].Abort();
    });
  }
  for (std::thread& t : threads) t.join();
  int culprit = -1;
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].ok()) continue;
    if (culprit < 0 || (results[culprit].code() == StatusCode::kAborted &&
                        results[r].code() != StatusCode::kAborted)) {
      culprit = static_cast<int>(r);
    }
  }
  if (culprit < 0) return Status::Ok();
  return {results[culprit].code(),
          "rank " + std::to_string(culprit) + ": " + results[culprit].message()};
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

Status Gradient(std::vector<Communicator>& group, int count, DemoRecord& rec) {
  const int ranks = static_cast<int>(group.size());
  const int rows_per_rank = (kMinBatchRows + ranks - 1) / ranks;
  std::vector<std::vector<float>> local(ranks);
  const Status run = RunOnRanks(group, [&](Communicator& comm, int r) {
    local[r] = MseGradient<float>(r * rows_per_rank, (r + 1) * rows_per_rank, count);
    return comm.AllReduce(std::span<float>(local[r]), ReduceOp::kAvg);
  });
  if (!run.ok()) return run;
  const std::vector<double> reference = MseGradient<double>(0, ranks * rows_per_rank, count);
  double worst = 0;
  std::vector<std::string> shown;
  for (int c = 0; c < count; ++c) {
    shown.push_back(PyFloat(reference[c]));
    for (int r = 0; r < ranks; ++r) worst = std::max(worst, std::abs(local[r][c] - reference[c]));
  }
  Emit(rec, "Gradient reference: " + ListString(shown));
  Emit(rec, "Gradient max abs difference vs all-reduce: " + PyFloat(worst));
  if (!(worst <= kGradientTolerance)) {
    rec.failed_checks.push_back("gradient differs from the float64 reference by " + PyFloat(worst) +
                                " > " + PyFloat(kGradientTolerance));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- 2-4. the three collectives
// One rank's buffers for --dtype. Zero bytes are a valid zero in every chorus dtype.
struct RankBuffers {
  std::vector<std::byte> input, reduced, shard, gathered;
};

struct Workload {
  DataType dtype;
  std::vector<RankBuffers> ranks;
  // Empty: the fastest algorithm the selection table picks. The byte count uses "ring", the
  // algorithm the seed's idealized model describes.
  CallOptions call;

  Workload(DataType t, int n, size_t count) : dtype(t), ranks(n) {
    const size_t bytes = count * DataTypeSize(t);
    for (RankBuffers& b : ranks) {
      b.input.assign(bytes, std::byte{0});
      b.reduced.assign(bytes, std::byte{0});
      b.shard.assign(bytes / n, std::byte{0});
      b.gathered.assign(bytes, std::byte{0});
    }
  }
  MutableBuffer Buf(std::vector<std::byte>& v) const {
    return {v.data(), v.size() / DataTypeSize(dtype), dtype};
  }
  // The all-gather sends the reduce-scatter's output, as in the lesson.
  Status RunAll(Communicator& comm, int rank) {
    for (Kind kind : kKinds) {
      if (Status s = Run(comm, rank, kind); !s.ok()) return s;
    }
    return Status::Ok();
  }
  Status Run(Communicator& comm, int rank, Kind kind) {
    RankBuffers& b = ranks[rank];
    switch (kind) {
      case Kind::kAllReduce:
        return comm.AllReduce(Buf(b.input), Buf(b.reduced), ReduceOp::kSum, call);
      case Kind::kReduceScatter:
        return comm.ReduceScatter(Buf(b.input), Buf(b.shard), ReduceOp::kSum, call);
      case Kind::kAllGather:
        return comm.AllGather(Buf(b.shard), Buf(b.gathered), call);
    }
    return Internal("demo: unknown collective kind");
  }
};

std::string Shape(size_t n) { return "(" + std::to_string(n) + ",)"; }

Status Shapes(std::vector<Communicator>& group, Workload& work, DemoRecord& rec) {
  CHORUS_RETURN_IF_ERROR(
      RunOnRanks(group, [&](Communicator& comm, int r) { return work.RunAll(comm, r); }));
  RankBuffers& b = work.ranks[0];  // every rank has the same sizes; read rank 0's
  rec.shapes = {work.Buf(b.reduced).count, work.Buf(b.shard).count, work.Buf(b.gathered).count};
  Emit(rec, "Local result shapes: replicated " + Shape(rec.shapes[0]) + ", reduce-scatter " +
                Shape(rec.shapes[1]) + ", gathered " + Shape(rec.shapes[2]));
  return Status::Ok();
}

std::string PyBytes(uint64_t bytes) { return PyFloat(static_cast<double>(bytes)); }

Status Bytes(std::vector<Communicator>& group, Workload& work, size_t count, DemoRecord& rec) {
  const int ranks = static_cast<int>(group.size());
  std::vector<TrafficCounters> traffic(ranks);
  work.call.algorithm = "ring";
  CHORUS_RETURN_IF_ERROR(RunOnRanks(group, [&](Communicator& comm, int r) {
    comm.ResetTraffic();
    const Status s = work.RunAll(comm, r);
    traffic[r] = comm.traffic();
    return s;
  }));
  work.call.algorithm.clear();
  // The slowest rank sets the pace, so "per rank" means the maximum over ranks.
  rec.modeled_bytes = {};
  rec.measured_bytes = {};
  for (int r = 0; r < ranks; ++r) {
    const auto sent = [&](Kind k) { return traffic[r].of(k).bytes_sent; };
    const auto model = [&](Kind k) { return model::RingBytesSent(k, ranks, r, count, work.dtype); };
    const std::array<uint64_t, 3> modeled = {model(Kind::kAllReduce), model(Kind::kReduceScatter),
                                             model(Kind::kReduceScatter) + model(Kind::kAllGather)};
    const std::array<uint64_t, 3> measured = {sent(Kind::kAllReduce), sent(Kind::kReduceScatter),
                                              sent(Kind::kReduceScatter) + sent(Kind::kAllGather)};
    for (int i = 0; i < 3; ++i) {
      rec.modeled_bytes[i] = std::max(rec.modeled_bytes[i], modeled[i]);
      rec.measured_bytes[i] = std::max(rec.measured_bytes[i], measured[i]);
    }
    for (Kind k : kKinds) {
      if (traffic[r].of(k).calls != 1) {
        rec.failed_checks.push_back("rank " + std::to_string(r) + " counted " +
                                    std::to_string(traffic[r].of(k).calls) + " " +
                                    std::string(CollectiveKindName(k)) + " calls, expected 1");
      }
    }
  }
  Emit(rec, "Idealized ring bytes per rank: " + PyBytes(rec.modeled_bytes[0]) + " " +
                PyBytes(rec.modeled_bytes[1]));
  Emit(rec, "Measured ring bytes per rank: " + PyBytes(rec.measured_bytes[0]) + " " +
                PyBytes(rec.measured_bytes[1]));
  if (rec.modeled_bytes != rec.measured_bytes) {
    rec.failed_checks.push_back(
        "traffic counters disagree with the ring model (all-reduce, reduce-scatter, "
        "scatter + gather): measured " +
        ListString(std::vector(rec.measured_bytes.begin(), rec.measured_bytes.end())) +
        ", modeled " + ListString(std::vector(rec.modeled_bytes.begin(), rec.modeled_bytes.end())));
  }
  return Status::Ok();
}

// Times `reps` calls of `kind` after a warm-up. An untimed barrier lines the ranks up before
// each call; a call's time is the slowest rank's, and the result is the median of those.
Result<double> MedianMicros(std::vector<Communicator>& group, Workload& work, Kind kind, int reps) {
  const size_t ranks = group.size();
  std::vector<double> micros(static_cast<size_t>(reps) * ranks);
  std::barrier sync(static_cast<std::ptrdiff_t>(ranks));
  CHORUS_RETURN_IF_ERROR(RunOnRanks(group, [&](Communicator& comm, int r) {
    for (int i = -kWarmupReps; i < reps; ++i) {
      sync.arrive_and_wait();
      const auto start = std::chrono::steady_clock::now();
      const Status s = work.Run(comm, r, kind);
      const auto stop = std::chrono::steady_clock::now();
      if (!s.ok()) {
        sync.arrive_and_drop();  // let the other ranks reach their failing call
        return s;
      }
      if (i >= 0)
        micros[i * ranks + r] = std::chrono::duration<double, std::micro>(stop - start).count();
    }
    return Status::Ok();
  }));
  std::vector<double> slowest(reps);
  for (int i = 0; i < reps; ++i) {
    slowest[i] = *std::max_element(micros.begin() + i * ranks, micros.begin() + (i + 1) * ranks);
  }
  std::sort(slowest.begin(), slowest.end());
  return reps % 2 ? slowest[reps / 2] : (slowest[reps / 2 - 1] + slowest[reps / 2]) / 2;
}

Status Latencies(std::vector<Communicator>& group, Workload& work, int reps, DemoRecord& rec) {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    Result<double> median = MedianMicros(group, work, kKinds[i], reps);
    CHORUS_RETURN_IF_ERROR(median.status());
    rec.latency_us[i] = *median;
  }
  Emit(rec, "Completed CPU median microseconds: {'all_reduce': " + PyFloat(rec.latency_us[0]) +
                ", 'reduce_scatter': " + PyFloat(rec.latency_us[1]) +
                ", 'all_gather_only': " + PyFloat(rec.latency_us[2]) + "}");
  return Status::Ok();
}

// ---------------------------------------------------------------- 5. who owns what
Status OwnershipTable(const CommOptions& options, DemoRecord& rec) {
  Result<std::vector<Communicator>> pair = CreateLocalGroup(2, options);
  CHORUS_RETURN_IF_ERROR(pair.status());
  std::vector<std::vector<int32_t>> contribution = {{1, 2}, {3, 4}};
  std::vector<std::vector<int32_t>> shard(2, std::vector<int32_t>(1));
  std::vector<std::vector<int32_t>> gathered(2, std::vector<int32_t>(2));
  CHORUS_RETURN_IF_ERROR(RunOnRanks(*pair, [&](Communicator& comm, int r) {
    const Status s = comm.ReduceScatter(std::span<const int32_t>(contribution[r]),
                                        std::span<int32_t>(shard[r]), ReduceOp::kSum);
    if (!s.ok()) return s;
    return comm.AllGather(std::span<const int32_t>(shard[r]), std::span<int32_t>(gathered[r]));
  }));
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
  const std::string reading =
      "Participant 0 contributed " + t[1][1] + " and participant 1 contributed " + t[1][2] +
      ". Reduce-scatter summed them and left participant 0 with " + t[2][1] +
      " and participant 1 with " + t[2][2] +
      ", so at that point neither held the whole result. All-gather then gave each " + t[3][1] +
      ". The values were read back from the buffers of a real two-rank chorus group; the table "
      "shows who owns what, not the order in which bytes moved.";
  Json panel_table = {
      {"kind", "table"}, {"headers", t[0]}, {"rows", std::vector(t.begin() + 1, t.end())}};
  Json out;
  out["schemaVersion"] = 1;
  out["lessonId"] = "distributed-03";
  out["kind"] = "executed";
  out["generatedAt"] = UtcNow();
  out["provenance"] = "chorus demo";
  out["environment"] = {{"backend", "cpu"},
                        {"deviceCount", flags.ranks},
                        {"transport", "thread"},
                        {"chorus", kChorusVersion}};
  out["stdout"] = rec.stdout_text;
  out["data"]["config"] = {{"ranks", flags.ranks},
                           {"count", flags.count},
                           {"dtype", flags.dtype},
                           {"reps", flags.reps},
                           {"warmupReps", kWarmupReps}};
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

// The script ships in <repo>/scripts and the binary is built into <build>/chorus, one level
// below the repository; CHORUS_PLOT_SCRIPT points elsewhere (an install, a modified copy).
fs::path FindPlotScript() {
  if (const char* env = std::getenv("CHORUS_PLOT_SCRIPT"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return fs::weakly_canonical(exe.parent_path() / ".." / "scripts" / "plot_demo.py", ec);
}

// Runs the plot script with its stdout sent to our stderr, so our stdout stays the lesson.
bool RunPlotScript(const fs::path& json_path, const fs::path& dir) {
  const fs::path script = FindPlotScript();
  if (script.empty() || !fs::exists(script)) {
    std::cerr << "chorus demo: plot script not found at '" << script.string()
              << "'; set CHORUS_PLOT_SCRIPT to scripts/plot_demo.py\n";
    return false;
  }
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

int Fail(const char* step, const Status& s) {
  std::cerr << "chorus demo: " << step << " failed: " << s << '\n';
  return 1;
}

int RunDemo(const DemoFlags& flags) {
  const DataType dtype = *ParseDataType(flags.dtype);  // the flag's validator accepted it
  if (flags.count % flags.ranks != 0) {
    std::cerr << "chorus demo: --count (" << flags.count << ") must be a multiple of --ranks ("
              << flags.ranks << "): reduce-scatter gives every rank count/ranks values\n";
    return 2;
  }
  const CommOptions options{.timeout = std::chrono::milliseconds(flags.timeout_ms)};
  Result<std::vector<Communicator>> group = CreateLocalGroup(flags.ranks, options);
  if (!group.ok()) return Fail("CreateLocalGroup", group.status());

  DemoRecord rec;
  Workload work(dtype, flags.ranks, static_cast<size_t>(flags.count));
  if (Status s = Gradient(*group, flags.count, rec); !s.ok()) return Fail("gradient", s);
  if (Status s = Shapes(*group, work, rec); !s.ok()) return Fail("shapes", s);
  if (Status s = Bytes(*group, work, flags.count, rec); !s.ok()) return Fail("bytes", s);
  if (Status s = Latencies(*group, work, flags.reps, rec); !s.ok()) return Fail("latency", s);
  if (Status s = OwnershipTable(options, rec); !s.ok()) return Fail("ownership table", s);

  // A record of a run that failed its checks would look like a good one: write none.
  if (!rec.failed_checks.empty()) {
    for (const std::string& f : rec.failed_checks)
      std::cerr << "chorus demo: check failed: " << f << '\n';
    return 1;
  }
  const Json record = ToJson(rec, flags);
  if (!flags.json_path.empty() && !WriteJson(record, flags.json_path)) return 1;
  if (!flags.plot_dir.empty()) {
    const fs::path dir = flags.plot_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      std::cerr << "chorus demo: cannot create " << dir << ": " << ec.message() << '\n';
      return 1;
    }
    if (!WriteJson(record, dir / "demo.json") || !RunPlotScript(dir / "demo.json", dir)) return 1;
  }
  return 0;
}

}  // namespace

void AddDemoCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the reduce-scatter / all-gather lesson on thread ranks and check it against "
      "the ring cost model");
  cmd->add_option("--ranks", flags->ranks, "ranks (threads) in the group")
      ->check(CLI::Range(1, 4096))
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
  cmd->callback([flags, &exit_code] { exit_code = RunDemo(*flags); });
}

}  // namespace chorus::cli
