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

}  // namespace chorus::model
