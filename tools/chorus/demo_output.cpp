// demo_output.cpp: rank 0's last steps of `chorus demo` (demo.h): the two-rank ownership table,
// the JSON record of the run and the plots drawn from it by scripts/plot_demo.py.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "demo.h"
#include "rank_group.h"

extern char** environ;  // NOLINT: handed to posix_spawn

namespace chorus::cli::demo {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr char kChorusVersion[] = "0.1.0";

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

}  // namespace

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

}  // namespace chorus::cli::demo
