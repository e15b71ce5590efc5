// Calibrated machine parameters per transport: built-in defaults measured on the development
// machine, and the tuning file that `chorus tune` writes for the machine it runs on.
//
//   Result<Tuning> tuning = TuningFromFile(options.tuning_file);   // "" = the defaults
//   if (!tuning.ok()) ...                     // the file is missing or malformed
//   const MachineParams& shm = tuning->For(TransportKind::kShm);
//
// The file (where CommOptions::tuning_file points; core/env.h finds the default one) is text, one
// line per transport; '#' starts a comment line:
//
//   # written by chorus tune on host vm, 2026-11-30 06:58:02 UTC
//   thread alpha_us=0.38 beta_gbps=25 gamma_gbps=12.5
//   shm alpha_us=0.43 beta_gbps=11 gamma_gbps=12.5
//   tcp alpha_us=23 beta_gbps=3.5 gamma_gbps=12.5
//
// alpha_us is the latency of one message in microseconds, beta_gbps and gamma_gbps are the rates
// (GB/s, 1e9 bytes) at which one rank moves and reduces bytes. Each line must give all three
// keys, once each; a transport without a line keeps its default, and a transport given twice is
// an error. MPI ranks use the tcp line.
//
// Thread safety: Tuning is a value; the functions touch only the named file.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/options.h"
#include "chorus/status.h"
#include "model/cost_model.h"

namespace chorus::model {

struct Tuning {
  MachineParams thread;
  MachineParams shm;
  MachineParams tcp;
  // Where the values came from: the file's path, or "built-in defaults".
  std::string source = "built-in defaults";

  // thread, shm, tcp; kMpi uses tcp; kAuto (no transport chosen yet) uses shm.
  const MachineParams& For(TransportKind transport) const;
  MachineParams& For(TransportKind transport);
};

// The values measured on the development machine (2-core AMD EPYC VM; docs/algorithms.md).
Tuning DefaultTuning();

// Parses a tuning file. Errors name the file, the line and what is wrong:
//   "tuning.conf:3: beta_gbps: \"fast\" is not a positive number".
Result<Tuning> LoadTuning(const std::string& path);

// Parses the text of a tuning file; `source` names it in errors and becomes Tuning::source.
Result<Tuning> ParseTuning(std::string_view text, const std::string& source);

// Writes `tuning` to `path` (creating its directory), replacing the file atomically.
// `comment` (may hold several lines) goes into '#' lines at the top.
Status SaveTuning(const std::string& path, const Tuning& tuning, std::string_view comment = {});

// The text SaveTuning writes.
std::string FormatTuning(const Tuning& tuning, std::string_view comment = {});

// The tuning CommOptions::tuning_file names: the built-in defaults for "", else the file, which
// must exist and parse ("options.tuning_file (PATH): no such file").
Result<Tuning> TuningFromFile(const std::string& path);

// ---------------------------------------------------------------- fitting (chorus tune)
//
// `chorus tune` times 2-rank ring all-gathers of n total bytes: one step that moves n/2 bytes,
// so T(n) = alpha + n/2 * beta. The fit is least squares on the relative error (weights 1/T^2),
// so the few-byte sizes determine alpha and the large ones beta; a negative alpha is refitted
// as alpha = 0. Times that do not grow with the size (a machine so busy that every call takes a
// scheduler tick) fit no positive beta and are refused, with the times in the error.

// One timing: a 2-rank ring all-gather of `bytes` total output bytes took `seconds`.
struct FitSample {
  double bytes = 0;
  double seconds = 0;
};

struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
};

// Keeps the lowest time of each size, in the order sizes first appear: other work on a shared
// machine only ever adds time.
std::vector<FitSample> LowestPerSize(const std::vector<FitSample>& samples);

// Fits T = alpha + n/2 * beta to `samples`; kUnavailable when the times do not grow with the
// size ("the all-gather times do not grow with the size, ... (64 B: 4000.0 us; ...)").
Result<AlphaBeta> FitAlphaBeta(const std::vector<FitSample>& samples);

// Recorded timings for `chorus tune --samples`, one per line, '#' starts a comment line:
//
//   thread 64 0.62            transport, all-gather bytes, median microseconds
//   gamma_gbps 9.5            optional: the reduction rate instead of timing the kernel
//
// `per_transport` keeps the transports in the order they first appear. Errors name the source
// and the line.
struct RecordedSamples {
  std::vector<std::pair<TransportKind, std::vector<FitSample>>> per_transport;
  double gamma_gbps = 0;  // 0: not given
};
Result<RecordedSamples> ParseSamples(std::string_view text, const std::string& source);

// The text ParseSamples reads, for `samples` of `transport` (no gamma line).
std::string FormatSamples(TransportKind transport, const std::vector<FitSample>& samples);

}  // namespace chorus::model
