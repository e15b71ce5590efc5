// What the library and the CLI take from the environment, beyond CommOptionsFromEnvironment
// (chorus/communicator.h). core/env.cpp is the only place in the library that reads
// environment variables.
#pragma once

#include <string>

#include "chorus/status.h"

namespace chorus::internal {

// Where the tuning file belongs: $CHORUS_TUNING_FILE if set (and not empty), else
// $XDG_CONFIG_HOME/chorus/tuning.conf, else $HOME/.config/chorus/tuning.conf; "" when none of
// the three is set. Whether the file exists is not checked (chorus tune writes it there).
std::string TuningPathFromEnvironment();

// CHORUS_TUNING_FILE=builtin asks for the built-in defaults whatever files there are.
inline constexpr char kBuiltinTuning[] = "builtin";

// The tuning file a communicator should use: CHORUS_TUNING_FILE, which must then exist (an error
// names the variable), else the XDG or HOME file when it exists, else "" (the defaults).
Result<std::string> TuningFileFromEnvironment();

}  // namespace chorus::internal
