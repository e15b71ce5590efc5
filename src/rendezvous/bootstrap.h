// Bootstrap for ranks that a foreign launcher started (mpirun, srun) with no store given.
//
// CommOptionsFromEnvironment names a file every rank can see, as "bootstrap://HOST/path":
// rank 0 starts a TcpStoreServer on HOST (empty: this host's first non-loopback interface),
// then writes the server's URL, and a freshly generated secret if the job has none, to `path`
// (mode 0600, atomically renamed into place). The other ranks poll for the file and connect.
// Rank 0 removes the file once every rank has joined. On one host /tmp serves; across hosts
// the directory must be shared (CHORUS_BOOTSTRAP_DIR), or the job sets CHORUS_STORE instead.
//
// Thread safety: functions of their arguments.
#pragma once

#include <memory>
#include <string>

#include "base/wait.h"
#include "chorus/store.h"

namespace chorus::internal {

inline constexpr char kBootstrapScheme[] = "bootstrap://";

struct Bootstrapped {
  std::shared_ptr<Store> store;
  std::unique_ptr<TcpStoreServer> server;  // rank 0's
  std::string secret;                      // the job's (given, or rank 0's fresh one)
};

// `bind_host` is where rank 0's server listens when the URL names no host.
Result<Bootstrapped> Bootstrap(const std::string& url, int rank, const std::string& secret,
                               const std::string& bind_host, Deadline deadline);
// The host part of a bootstrap URL ("" for "bootstrap:///tmp/x").
std::string BootstrapHost(const std::string& url);
// Rank 0, once every rank joined: removes the file.
void FinishBootstrap(const std::string& url);

}  // namespace chorus::internal
