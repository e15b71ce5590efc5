// job.h: what `chorus launch` (launch.cpp) decides once per job before any rank starts: the
// path of PROG (or of the agent), the store's address, the job's secret and its id.
//
// Thread safety: plain functions; they read the environment and must not race with setenv().
#pragma once

#include <optional>
#include <string>

#include "chorus/status.h"

namespace chorus::cli::launch {

// ------------------------------------------------------------------ program lookup

struct Resolved {
  std::string path;
  int exit_code = 0;  // non-zero: `error` explains why PROG cannot run
  std::string error;
};

// Finds PROG the way a shell does: a name with a '/' is used as given, anything else is looked up
// on PATH. Resolving once in the launcher reports a typo once, not N times, and lets the children
// use execve() (async-signal-safe, unlike execvp()).
Resolved ResolveProgram(const std::string& prog);

// 16 random hex digits from /dev/urandom: CHORUS_JOB_ID.
Result<std::string> MakeJobId();

// ------------------------------------------------------------------ store, secret

// The IPv4 address the store binds and the ranks dial: --store-host as an address or the name
// of an interface; without it, loopback for a one-host job, else the first non-loopback IPv4
// interface that is up. Names are never looked up in DNS: the store must be on this host.
Result<std::string> StoreAddress(const std::string& flag, bool multi_host);

struct JobSecret {
  std::string text;        // what the store and the ranks derive the key from
  bool generated = false;  // made up here: the launcher must hand it to the ranks
};

// The value of the environment variable `name`, unless it is unset or empty.
std::optional<std::string> NonEmptyEnv(const char* name);

// The job's secret, decided as the ranks' CommOptionsFromEnvironment will: CHORUS_SECRET, else
// the text of CHORUS_SECRET_FILE (internal::ReadSecretFile), else a fresh one.
Result<JobSecret> DecideSecret();

}  // namespace chorus::cli::launch
