// CommOptionsFromEnvironment: the only place in the library that reads environment variables.
// The precedence is documented in chorus/communicator.h.
#include "core/env.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

#include "chorus/communicator.h"
#include "net/auth.h"
#include "rendezvous/bootstrap.h"

namespace chorus {
namespace {

std::optional<std::string> Var(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// Sets *value to the one of `values` whose name the variable holds; unset leaves it.
template <typename Enum>
Status NamedVar(const char* name, std::initializer_list<Enum> values,
                std::string_view (*name_of)(Enum), Enum* value) {
  const auto text = Var(name);
  if (!text) return Status::Ok();
  std::string names;
  for (Enum e : values) {
    if (*text == name_of(e)) {
      *value = e;
      return Status::Ok();
    }
    names += (names.empty() ? "" : ", ") + std::string(name_of(e));
  }
  return InvalidArgument("environment: " + std::string(name) + "=\"" + *text +
                         "\" is not one of " + names);
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

// The job's identity, the same on every rank of it and different for another job: the launcher
// knows it. MPICH's hydra is not asked: what it sets differs between hosts.
std::optional<std::string> JobId() {
  if (auto id = Var("CHORUS_JOB_ID")) return *id;
  if (auto id = Var("TORCHELASTIC_RUN_ID")) return "torchrun-" + *id;
  if (auto id = Var("SLURM_JOB_ID"))
    return "slurm-" + *id + "." + Var("SLURM_STEP_ID").value_or("0");
  if (auto id = Var("OMPI_MCA_ess_base_jobid")) return "ompi-" + *id;
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

// The bootstrap store of a job whose launcher gave no store (rendezvous/bootstrap.h): rank 0
// serves it on loopback when every rank is on this host, else on its network interface, and
// publishes where in a file of CHORUS_BOOTSTRAP_DIR (default /tmp) named by this user and `key`.
std::string BootstrapUrl(bool single_host, const std::string& key) {
  return std::string(internal::kBootstrapScheme) + (single_host ? "127.0.0.1" : "") +
         Var("CHORUS_BOOTSTRAP_DIR").value_or("/tmp") + "/chorus-bootstrap-" +
         std::to_string(getuid()) + "-" + key;
}

bool SecretGiven(const CommOptions& base) {
  return !base.secret.empty() || Var("CHORUS_SECRET") || Var("CHORUS_SECRET_FILE");
}

// Under torchrun with every rank on this host (LOCAL_WORLD_SIZE = WORLD_SIZE) and no secret,
// a name for the bootstrap file that the ranks of this run alone derive: its torchrun agent
// holds MASTER_PORT on this host while it runs, so no other running job has that port, and a
// restart gets a fresh file. (Not the parent's pid: a rank may run under a wrapper script.)
std::optional<std::string> TorchrunLocalJobKey(const CommOptions& base, long master_port) {
  if (!Var("TORCHELASTIC_RUN_ID") || SecretGiven(base)) return std::nullopt;
  if (Var("LOCAL_WORLD_SIZE").value_or("") != std::to_string(base.size)) return std::nullopt;
  std::string run = *Var("TORCHELASTIC_RUN_ID");
  for (char& c : run) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
  return "torchrun-" + std::to_string(master_port) + "-" + run + "-" +
         Var("TORCHELASTIC_RESTART_COUNT").value_or("0");
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

namespace internal {

std::string TuningPathFromEnvironment() {
  if (auto file = Var("CHORUS_TUNING_FILE")) return *file;
  if (auto xdg = Var("XDG_CONFIG_HOME")) return *xdg + "/chorus/tuning.conf";
  if (auto home = Var("HOME")) return *home + "/.config/chorus/tuning.conf";
  return {};
}

Result<std::string> TuningFileFromEnvironment() {
  const std::string path = TuningPathFromEnvironment();
  if (path.empty() || path == kBuiltinTuning) return std::string();
  std::error_code ec;
  const bool present = std::filesystem::exists(path, ec);
  if (ec || present) return path;  // when existence cannot be checked, loading it says why
  if (Var("CHORUS_TUNING_FILE")) {
    return InvalidArgument("environment: CHORUS_TUNING_FILE=\"" + path +
                           "\": no such file (chorus tune writes it; unset the variable for "
                           "the built-in defaults)");
  }
  return std::string();
}

}  // namespace internal

Result<CommOptions> LocalOptionsFromEnvironment(CommOptions base) {
  if (auto timeout = IntVar("CHORUS_TIMEOUT_MS", 1, 1L << 40); !timeout.ok()) {
    return timeout.status();
  } else if (timeout->has_value()) {
    base.timeout = std::chrono::milliseconds(**timeout);
  }
  if (base.algorithm.empty()) base.algorithm = Var("CHORUS_ALGO").value_or("");
  if (base.wait == WaitMode::kAuto) {
    Status status = NamedVar<WaitMode>(
        "CHORUS_WAIT", {WaitMode::kAuto, WaitMode::kSleep, WaitMode::kSleepChecked},
        &WaitModeName, &base.wait);
    if (!status.ok()) return status;
  }
  if (base.slot_stores == SlotStores::kAuto) {
    Status status = NamedVar<SlotStores>(
        "CHORUS_SLOT_STORES", {SlotStores::kAuto, SlotStores::kCached, SlotStores::kStream},
        &SlotStoresName, &base.slot_stores);
    if (!status.ok()) return status;
  }
  if (base.tuning_file.empty()) {
    auto file = internal::TuningFileFromEnvironment();
    if (!file.ok()) return file.status();
    base.tuning_file = std::move(file).value();
  }
  return base;
}

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
    if (**rank >= **size) {
      return InvalidArgument(std::string("environment: ") + source.rank + "=" +
                             std::to_string(**rank) + " is not below " + source.size + "=" +
                             std::to_string(**size));
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
      if (auto key = TorchrunLocalJobKey(base, **port)) {
        // Every rank on this host and no secret given: rank 0 serves a store on loopback and
        // hands its address and a fresh secret to the others in a 0600 file, as under mpirun.
        base.store_url = BootstrapUrl(true, *key);
      } else {
        // torchrun's own agent store already listens on MASTER_PORT.
        const long chorus_port = **port + (Var("TORCHELASTIC_RUN_ID") ? 1 : 0);
        base.store_url = "tcp://" + *addr + ":" + std::to_string(chorus_port);
        base.host_store = true;
      }
    } else if (auto job = LauncherJobKey()) {
      // Rank 0 hosts the store and publishes where through a file (rendezvous/bootstrap.h).
      base.store_url = BootstrapUrl(LauncherSingleHost(base.size), *job);
    } else {
      return InvalidArgument(
          "environment: no store to meet through (set CHORUS_STORE=tcp://host:port or "
          "file:///path, or MASTER_ADDR and MASTER_PORT)");
    }
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
  if (base.job_id.empty()) base.job_id = JobId().value_or("");
  if (auto wire = Var("CHORUS_WIRE"); wire && base.wire == WireMode::kAuthenticate) {
    bool known = false;
    for (WireMode m : {WireMode::kAuthenticate, WireMode::kIntegrity, WireMode::kEncrypt}) {
      if (*wire == WireModeName(m)) {
        base.wire = m;
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("environment: CHORUS_WIRE=\"" + *wire +
                             "\" is not one of authenticate, integrity, encrypt");
    }
  }
  if (base.host_id.empty()) base.host_id = Var("CHORUS_HOST_ID").value_or("");
  if (base.shm_dir.empty()) base.shm_dir = Var("CHORUS_SHM_DIR").value_or("");
  if (auto name = Var("CHORUS_TRANSPORT"); name && base.transport == TransportKind::kAuto) {
    auto kind = TransportFromName(*name);
    if (!kind.ok()) return kind.status();
    base.transport = *kind;
  }
  return LocalOptionsFromEnvironment(std::move(base));
}

}  // namespace chorus
