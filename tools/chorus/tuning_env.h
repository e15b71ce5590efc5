// The tuning file the CLI's communicators use: the one the environment names (core/env.h).
// A CHORUS_TUNING_FILE that does not exist is passed on as it is, so that Create or
// CreateLocalGroup fails naming it rather than quietly measuring with the defaults.
#pragma once

#include <string>

#include "core/env.h"

namespace chorus::cli {

inline std::string TuningFileFromEnvironment() {
  auto file = internal::TuningFileFromEnvironment();
  return file.ok() ? *file : internal::TuningPathFromEnvironment();
}

}  // namespace chorus::cli
