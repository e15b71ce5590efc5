// CommOptionsFromEnvironment: the only place in the library that reads environment variables.
// The precedence is documented in chorus/communicator.h.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include "chorus/communicator.h"
#include "rendezvous/auth.h"
#include "rendezvous/bootstrap.h"

namespace chorus {
namespace {

std::optional<std::string> Var(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The integer in variable `name`, if set. Errors name the variable and its value.
Result<std::optional<long>> IntVar(const char* name, long min, long max) {
  const auto text = Var(name);
  if (!text) return std::optional<long>();
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text->c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) {
    return InvalidArgument(std::string("environment: ") + name + "=\"" + *text +
                           "\" is not an integer in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  return std::optional<long>(value);
}

struct Source {
  const char* launcher;
  const char* rank;
  const char* size;
};

constexpr Source kSources[] = {
    {"chorus", "CHORUS_RANK", "CHORUS_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"MPICH/PMI", "PMI_RANK", "PMI_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
};

// A name for this job that every rank derives alike, for the bootstrap file.
std::optional<std::string> LauncherJobKey() {
  if (auto id = Var("OMPI_MCA_ess_base_jobid")) return "ompi-" + *id;
  if (auto id = Var("SLURM_JOB_ID"))
    return "slurm-" + *id + "." + Var("SLURM_STEP_ID").value_or("0");
  // MPICH's hydra starts every rank of a host from one proxy process.
  if (Var("PMI_RANK")) return "pmi-" + std::to_string(getppid());
  return std::nullopt;
}

// True when the launcher says every rank runs on this host.
bool LauncherSingleHost(int size) {
  const auto local = [](const char* name) { return Var(name).value_or(""); };
  const std::string world = std::to_string(size);
  if (local("OMPI_COMM_WORLD_LOCAL_SIZE") == world) return true;
  if (local("MPI_LOCALNRANKS") == world) return true;
  return local("SLURM_NNODES") == "1" || local("SLURM_JOB_NUM_NODES") == "1";
}

Result<TransportKind> TransportFromName(const std::string& name) {
  for (TransportKind kind :
       {TransportKind::kAuto, TransportKind::kThread, TransportKind::kShm, TransportKind::kTcp}) {
    if (name == TransportKindName(kind)) return kind;
  }
  return InvalidArgument("environment: CHORUS_TRANSPORT=\"" + name +
                         "\" is not one of auto, thread, shm, tcp");
}

}  // namespace

Result<CommOptions> CommOptionsFromEnvironment(CommOptions base) {
  for (const Source& source : kSources) {
    auto rank = IntVar(source.rank, 0, 1 << 20);
    if (!rank.ok()) return rank.status();
    auto size = IntVar(source.size, 1, 1 << 20);
    if (!size.ok()) return size.status();
    if (!rank->has_value() && !size->has_value()) continue;
    if (!rank->has_value() || !size->has_value()) {
      return InvalidArgument(std::string("environment: ") + source.launcher + " sets " +
                             (rank->has_value() ? source.rank : source.size) + " but not " +
                             (rank->has_value() ? source.size : source.rank));
    }
    if (base.rank < 0) base.rank = static_cast<int>(**rank);
    if (base.size <= 0) base.size = static_cast<int>(**size);
    break;
  }
  if (base.rank < 0 || base.size <= 0) {
    return InvalidArgument(
        "environment: no rank and world size found (set CHORUS_RANK and CHORUS_WORLD_SIZE, or "
        "start the program with chorus launch, torchrun, mpirun or srun)");
  }

  if (!base.store && base.store_url.empty()) {
    if (auto url = Var("CHORUS_STORE")) {
      base.store_url = *url;
    } else if (auto addr = Var("MASTER_ADDR")) {
      auto port = IntVar("MASTER_PORT", 1, 65535);
      if (!port.ok()) return port.status();
      if (!port->has_value()) {
        return InvalidArgument("environment: MASTER_ADDR is set but MASTER_PORT is not");
      }
      // torchrun's own agent store already listens on MASTER_PORT.
      const long chorus_port = **port + (Var("TORCHELASTIC_RUN_ID") ? 1 : 0);
      base.store_url = "tcp://" + *addr + ":" + std::to_string(chorus_port);
      base.host_store = true;
    } else if (auto job = LauncherJobKey()) {
      // Rank 0 hosts the store and publishes where through a file (rendezvous/bootstrap.h).
      const std::string dir = Var("CHORUS_BOOTSTRAP_DIR").value_or("/tmp");
      base.store_url = std::string(internal::kBootstrapScheme) +
                       (LauncherSingleHost(base.size) ? "127.0.0.1" : "") + dir +
                       "/chorus-bootstrap-" + std::to_string(getuid()) + "-" + *job;
    } else {
      return InvalidArgument(
          "environment: no store to meet through (set CHORUS_STORE=tcp://host:port or "
          "file:///path, or MASTER_ADDR and MASTER_PORT)");
    }
  }
  if (auto timeout = IntVar("CHORUS_TIMEOUT_MS", 1, 1L << 40); !timeout.ok()) {
    return timeout.status();
  } else if (timeout->has_value()) {
    base.timeout = std::chrono::milliseconds(**timeout);
  }
  if (base.secret.empty()) {
    if (auto secret = Var("CHORUS_SECRET")) {
      base.secret = *secret;
    } else if (auto file = Var("CHORUS_SECRET_FILE")) {
      auto text = internal::ReadSecretFile(*file);
      if (!text.ok()) return text.status();
      base.secret = std::move(text).value();
    }
  }
  if (base.listen.empty()) base.listen = Var("CHORUS_SOCKET_IFNAME").value_or("");
  if (auto name = Var("CHORUS_TRANSPORT"); name && base.transport == TransportKind::kAuto) {
    auto kind = TransportFromName(*name);
    if (!kind.ok()) return kind.status();
    base.transport = *kind;
  }
  if (base.algorithm.empty()) base.algorithm = Var("CHORUS_ALGO").value_or("");
  return base;
}

}  // namespace chorus
