// chorus tune: measures the cost model's alpha, beta and gamma on this machine and saves them in
// the tuning file that the library and `chorus model` read (src/model/tuning.h).
//
//   chorus tune                                 # thread, shm and tcp; writes the default file
//   chorus tune --transport shm --dry-run       # measure and print only
//   chorus tune --output /tmp/tuning.conf
//   chorus tune --save-samples t.txt            # also keep the timings it measured
//   chorus tune --samples t.txt --dry-run       # fit recorded timings (no measuring)
//
// alpha and beta, per transport: 2-rank ring all-gathers of 64 B to 4 MiB, timed by `chorus
// bench --algo ring --csv` in a child process (bench_child.h), so the ranks run and are timed
// exactly as the benchmark runs them. The sweep runs twice and each size keeps the lower median
// (other work on a shared machine only ever adds time). A 2-rank ring all-gather of n bytes is
// one step that moves n/2 bytes, so T(n) = alpha + n/2 * beta; the fit is least squares on the
// relative error (weights 1/T^2), so the few-byte sizes determine alpha and the large ones beta
// instead of the largest size drowning out the rest. A negative alpha is refitted as alpha = 0.
// The sizes stop at 4 MiB, where the buffers still fit in the last-level cache: beyond it the
// rate drops to what DRAM and the machine's other tenants allow, and varies by 2-3x from run to
// run (--max-bytes moves the limit).
//
// gamma: the float32 sum kernel (reduce.h) in place, a = a + b, timed on operands that fit in L2
// and on operands far larger than the last-level cache. Collectives reduce data that has just
// arrived from another rank or is about to be sent, mostly at memory speed, so the DRAM figure is
// the one saved; the reduction is the same code on every transport, so every transport gets it.
//
// Transports not measured keep their values from the existing file (or the built-in defaults
// when there is no valid file). Takes about 5 s on the 2-core development machine.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_child.h"
#include "bench_config.h"
#include "chorus/chorus.h"
#include "commands.h"
#include "core/env.h"
#include "model/tuning.h"
#include "rank_group.h"
#include "reduce/reduce.h"

namespace chorus::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
// All-gather sizes (total output bytes) for the alpha-beta fit.
constexpr size_t kFitSizes[] = {64, 1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
// Sweeps over the sizes; each size keeps its lowest median.
constexpr int kRounds = 2;
constexpr size_t kL2OperandBytes = size_t{256} << 10;   // two operands well inside a 2 MiB L2
constexpr size_t kDramOperandBytes = size_t{64} << 20;  // two operands, 4 x a 32 MiB L3

struct TuneFlags {
  std::string transports = "thread,shm,tcp";
  std::string output;
  std::string max_bytes = "4M";
  std::string samples;       // fit these recorded timings instead of measuring
  std::string save_samples;  // write the measured timings here
  bool dry_run = false;
};

// The fit's sizes up to max_bytes, the whole sweep `rounds` times over.
std::string SizeList(size_t max_bytes, int rounds) {
  std::string list;
  for (int round = 0; round < rounds; ++round) {
    for (size_t bytes : kFitSizes) {
      if (bytes > max_bytes) break;
      // Appended piece by piece: GCC 12 at -O3 warns -Wrestrict (a false positive, GCC bug
      // 105651) about a short literal + std::string temporary.
      if (!list.empty()) list += ',';
      list += std::to_string(bytes);
    }
  }
  return list;
}

// Prints the samples next to the fit, and the fit.
void PrintFit(const std::string& transport, const std::vector<model::FitSample>& samples,
              const model::AlphaBeta& fit) {
  std::printf("#  %12s  %12s  %12s\n", "bytes", "median_us", "fit_us");
  for (const model::FitSample& s : samples) {
    std::printf("   %12.0f  %12.2f  %12.2f\n", s.bytes, s.seconds * 1e6,
                (fit.alpha_s + s.bytes / 2 * fit.beta_s_per_byte) * 1e6);
  }
  std::printf("%s: alpha %.3g us, beta %.3g GB/s\n", transport.c_str(), fit.alpha_s * 1e6,
              1e-9 / fit.beta_s_per_byte);
  std::fflush(stdout);
}

// Times 2-rank ring all-gathers over `transport`: each size's lowest median over the rounds.
Result<std::vector<model::FitSample>> MeasureTransport(const std::string& transport,
                                                       size_t max_bytes) {
  std::printf("# %s: 2-rank ring all-gather, lowest of %d medians by chorus bench --algo ring\n",
              transport.c_str(), kRounds);
  std::fflush(stdout);
  Result<BenchChildOutput> out =
      RunBenchChild({"--transport", transport, "-n", "2", "--op", "allgather", "--algo", "ring",
                     "--sizes", SizeList(max_bytes, kRounds), "-w", "3"});
  if (!out.ok()) return out.status();
  std::vector<model::FitSample> samples;
  for (const BenchCsvRow& row : out->rows) {
    samples.push_back({static_cast<double>(row.bytes), row.median_us * 1e-6});
  }
  // The lower median of the rounds: a burst of load from elsewhere only ever adds time.
  return model::LowestPerSize(samples);
}

// Bytes per second of a = a + b (float32 sum) on operands of `bytes` each: the median over
// `samples` timings of `passes` back-to-back calls.
double ReduceRate(size_t bytes, int passes, int samples) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 0.0f);
  std::vector<float> b(n, 1.0f);
  const reduce::Kernel& kernel = reduce::GetKernel(DataType::kFloat32, ReduceOp::kSum);
  kernel.combine(a.data(), a.data(), b.data(), n);  // warm the cache and the page tables
  std::vector<double> times;
  for (int s = 0; s < samples; ++s) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < passes; ++i) kernel.combine(a.data(), a.data(), b.data(), n);
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / passes);
  }
  const double median = Median(times);
  return median > 0 ? static_cast<double>(bytes) / median : 0;
}

std::string Now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S %Z", &local);
  return buf;
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

int RunTune(const TuneFlags& flags) {
  std::vector<std::string> transports;
  size_t start = 0;
  while (start <= flags.transports.size()) {
    size_t end = flags.transports.find(',', start);
    if (end == std::string::npos) end = flags.transports.size();
    const std::string name = flags.transports.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    if (!ParseCliTransport(name)) {
      std::fprintf(stderr, "chorus tune: --transport: unknown transport '%s' (thread, shm, tcp)\n",
                   name.c_str());
      return kExitUsage;
    }
    if (std::find(transports.begin(), transports.end(), name) == transports.end()) {
      transports.push_back(name);
    }
  }
  if (transports.empty()) {
    std::fprintf(stderr, "chorus tune: --transport: no transport given\n");
    return kExitUsage;
  }
  const std::optional<size_t> max_bytes = ParseBytes(flags.max_bytes);
  if (!max_bytes || *max_bytes < kFitSizes[1]) {
    std::fprintf(stderr, "chorus tune: --max-bytes: '%s' is not a size of at least 1K\n",
                 flags.max_bytes.c_str());
    return kExitUsage;
  }
  const std::string path =
      flags.output.empty() ? internal::TuningPathFromEnvironment() : flags.output;
  if (path.empty() && !flags.dry_run) {
    std::fprintf(stderr,
                 "chorus tune: no place for the tuning file: set CHORUS_TUNING_FILE or HOME, or "
                 "pass --output\n");
    return kExitUsage;
  }

  // Start from what is there, so that transports not measured now keep their values.
  model::Tuning tuning = model::DefaultTuning();
  std::error_code ec;
  if (!path.empty() && std::filesystem::exists(path, ec)) {
    Result<model::Tuning> existing = model::LoadTuning(path);
    if (existing.ok()) {
      tuning = *existing;
    } else {
      std::fprintf(stderr, "chorus tune: replacing an unusable file: %s\n",
                   existing.status().message().c_str());
    }
  }

  // The timings: recorded ones from --samples, or measured now. The measurements name their
  // algorithm, so no tuning steers them; and a file that is not written yet (or is being
  // replaced) must not stop them.
  std::vector<std::pair<std::string, std::vector<model::FitSample>>> timings;
  double recorded_gamma_gbps = 0;
  if (!flags.samples.empty()) {
    std::ifstream in(flags.samples);
    std::stringstream text;
    if (in) text << in.rdbuf();
    if (!in || in.bad()) {
      std::fprintf(stderr, "chorus tune: --samples: cannot read %s\n", flags.samples.c_str());
      return kExitUsage;
    }
    Result<model::RecordedSamples> recorded = model::ParseSamples(text.str(), flags.samples);
    if (!recorded.ok()) {
      std::fprintf(stderr, "chorus tune: --samples: %s\n", recorded.status().message().c_str());
      return kExitUsage;
    }
    std::printf("# timings recorded in %s\n", flags.samples.c_str());
    transports.clear();
    for (auto& [kind, samples] : recorded->per_transport) {
      transports.emplace_back(TransportKindName(kind));
      timings.emplace_back(transports.back(), model::LowestPerSize(samples));
    }
    recorded_gamma_gbps = recorded->gamma_gbps;
  } else {
    setenv("CHORUS_TUNING_FILE", internal::kBuiltinTuning, 1);
    std::string measured_text;
    for (const std::string& name : transports) {
      Result<std::vector<model::FitSample>> samples = MeasureTransport(name, *max_bytes);
      if (!samples.ok()) {
        std::fprintf(stderr, "chorus tune: %s: %s\n", name.c_str(),
                     samples.status().message().c_str());
        return kExitFailed;
      }
      measured_text += model::FormatSamples(*ParseCliTransport(name), *samples);
      timings.emplace_back(name, std::move(*samples));
    }
    if (!flags.save_samples.empty()) {
      std::ofstream out(flags.save_samples);
      out << "# chorus tune timings: transport, 2-rank ring all-gather bytes, median us\n"
          << measured_text;
      out.close();
      if (!out) {
        std::fprintf(stderr, "chorus tune: --save-samples: cannot write %s\n",
                     flags.save_samples.c_str());
        return kExitFailed;
      }
      std::printf("timings saved in %s\n", flags.save_samples.c_str());
    }
  }
  for (const auto& [name, samples] : timings) {
    Result<model::AlphaBeta> fit = model::FitAlphaBeta(samples);
    if (!fit.ok()) {
      std::fprintf(stderr, "chorus tune: %s: %s\n", name.c_str(), fit.status().message().c_str());
      return kExitFailed;
    }
    PrintFit(name, samples, *fit);
    model::MachineParams& params = tuning.For(*ParseCliTransport(name));
    params.alpha_s = fit->alpha_s;
    params.beta_s_per_byte = fit->beta_s_per_byte;
  }

  double dram = 0;
  if (recorded_gamma_gbps > 0) {
    dram = recorded_gamma_gbps * 1e9;
    std::printf("gamma %.3g GB/s (recorded) -> gamma of every transport\n", dram / 1e9);
  } else {
    std::printf("# reduction kernel: float32 sum, a = a + b in place, GB/s of one operand\n");
    const double l2 = ReduceRate(kL2OperandBytes, 50, 15);
    dram = ReduceRate(kDramOperandBytes, 1, 9);
    std::printf("L2   (%zu KiB operands): %.3g GB/s\n", kL2OperandBytes >> 10, l2 / 1e9);
    std::printf("DRAM (%zu MiB operands): %.3g GB/s  -> gamma of every transport\n",
                kDramOperandBytes >> 20, dram / 1e9);
  }
  if (!(dram > 0)) {
    std::fprintf(stderr, "chorus tune: the reduction kernel could not be timed\n");
    return kExitFailed;
  }
  for (TransportKind kind : {TransportKind::kThread, TransportKind::kShm, TransportKind::kTcp}) {
    tuning.For(kind).gamma_s_per_byte = 1.0 / dram;
  }

  std::string measured;
  for (const std::string& name : transports) measured += (measured.empty() ? "" : ",") + name;
  const std::string comment =
      "written by chorus tune on host " + HostName() + ", " + Now() +
      (flags.samples.empty()
           ? "\nmeasured: " + measured + " (alpha, beta) and gamma"
           : "\nfitted: " + measured + " (alpha, beta) from the timings in " + flags.samples +
                 (recorded_gamma_gbps > 0 ? ", gamma recorded there" : "; gamma measured"));
  std::printf("# tuning\n%s", model::FormatTuning(tuning, comment).c_str());
  if (flags.dry_run) {
    std::printf("dry run: nothing written%s\n",
                path.empty() ? "" : (" (would write " + path + ")").c_str());
    return 0;
  }
  const Status saved = model::SaveTuning(path, tuning, comment);
  if (!saved.ok()) {
    std::fprintf(stderr, "chorus tune: %s\n", saved.message().c_str());
    return kExitFailed;
  }
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace

void AddTuneCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<TuneFlags>();
  CLI::App* sub = app.add_subcommand(
      "tune",
      "Measure the cost model's alpha, beta (per transport) and gamma on this machine and save "
      "them in the tuning file");
  sub->add_option("-t,--transport", flags->transports,
                  "comma-separated transports to measure: thread, shm, tcp")
      ->capture_default_str();
  sub->add_option("-o,--output", flags->output,
                  "write here instead of $CHORUS_TUNING_FILE, $XDG_CONFIG_HOME/chorus/tuning.conf "
                  "or ~/.config/chorus/tuning.conf");
  sub->add_option("--max-bytes", flags->max_bytes,
                  "largest all-gather of the alpha-beta fit (K, M, G allowed)")
      ->capture_default_str();
  CLI::Option* samples =
      sub->add_option("--samples", flags->samples,
                      "fit the timings recorded in this file (lines: TRANSPORT BYTES MEDIAN_US, "
                      "optionally gamma_gbps RATE) instead of measuring");
  sub->add_option("--save-samples", flags->save_samples,
                  "also write the measured timings here, in the form --samples reads")
      ->excludes(samples);
  sub->add_flag("--dry-run", flags->dry_run, "measure (or read --samples) and print, write nothing");
  sub->footer("Exit status: 0 ok, 1 a measurement or the write failed, 2 bad arguments.");
  sub->callback([flags, &exit_code] { exit_code = RunTune(*flags); });
}

}  // namespace chorus::cli
