// Communicator::Create: ranks in separate processes meet through a store and pick a transport.
//
//   1. Rank 0 starts the store server when asked to (options.host_store).
//   2. Every rank publishes who it is ("join/<rank>": host id, pid) under the communicator's
//      prefix and waits for all the others; a missing rank is named in the deadline error.
//   3. The transport follows from where the ranks are: one process -> thread; one host -> shm;
//      several hosts -> TCP. CommOptions::transport may force shm or TCP.
//   4. The transport connects through the same store.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "core/comm_state.h"
#include "core/meet.h"
#include "core/validate.h"
#include "model/tuning.h"
#include "net/auth.h"
#include "net/interface.h"
#include "rendezvous/bootstrap.h"
#include "transport/hybrid/hybrid_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/wire.h"
#include "transport/thread/thread_transport.h"

namespace chorus {
namespace {

using internal::Clock;
using internal::Deadline;
using internal::Remaining;

std::string ReadLine(const char* path) {
  std::string line;
  std::ifstream(path) >> line;
  return line;
}

// Ranks are on the same host when they see the same hostname and the same boot.
std::string HostId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + ReadLine("/proc/sys/kernel/random/boot_id");
}

Status ValidateCreate(const CommOptions& o) {
  CHORUS_RETURN_IF_ERROR(internal::ValidateCommOptions(o, o.size, "Create"));
  if (o.rank < 0 || o.rank >= o.size) {
    return InvalidArgument("Create: options.rank (" + std::to_string(o.rank) +
                           ") must be in [0, options.size (" + std::to_string(o.size) + "))");
  }
  if (!o.store && o.store_url.empty()) {
    return InvalidArgument(
        "Create: no store: set options.store or options.store_url (or use "
        "CommOptionsFromEnvironment under a launcher)");
  }
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return InvalidArgument("Create: options.name (\"" + o.name +
                           "\") must be non-empty and contain no '/'");
  }
  if (o.job_id.find('/') != std::string::npos || o.job_id.find('\n') != std::string::npos) {
    return InvalidArgument("Create: options.job_id (\"" + o.job_id +
                           "\") must contain no '/' and no newline");
  }
  return Status::Ok();
}

int64_t WallMsAfter(std::chrono::milliseconds left) {
  // A timeout meant as "none" (milliseconds::max()) must not overflow into the past, where every
  // record would look expired: ten years is as good as never.
  constexpr std::chrono::milliseconds kNever = std::chrono::hours(24 * 3650);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch() + std::min(left, kNever))
      .count();
}

// The options every rank must pass alike, compared as text in the meeting.
std::string Settings(const CommOptions& o) {
  return "transport=" + std::string(TransportKindName(o.transport)) +
         " segment_bytes=" + std::to_string(o.segment_bytes) +
         " pipeline_depth=" + std::to_string(o.pipeline_depth) +
         " algorithm=" + (o.algorithm.empty() ? "-" : o.algorithm) +
         " wire=" + std::string(WireModeName(o.wire));
}

// Under host_store (torchrun's MASTER_ADDR:MASTER_PORT) the store belongs to the job whose rank 0
// serves it. Rank 0 says so in the store; a rank of another job that reached it (given the same
// port) fails at once, naming the job that holds it, instead of waiting for a rank 0 that will
// never come.
constexpr char kStoreHostKey[] = "chorus/store-host";

Status ClaimHostedStore(Store& store, const CommOptions& options, bool hosting,
                        const internal::MemberRecord& me, Deadline deadline) {
  if (hosting) return store.Set(kStoreHostKey, me.Encode());
  if (!options.host_store || options.job_id.empty()) return Status::Ok();
  auto text = store.Get(kStoreHostKey, std::min<std::chrono::milliseconds>(
                                           Remaining(deadline), std::chrono::seconds(2)));
  if (!text.ok()) return Status::Ok();  // not yet said, or said by nobody: the meeting decides
  internal::MemberRecord host;
  if (!internal::MemberRecord::Decode(*text, &host) || host.job == options.job_id) {
    return Status::Ok();
  }
  return FailedPrecondition(
      "Create: the store at " + store.address() + " is served by rank 0 of another job (pid " +
      std::to_string(host.pid) + " on host " + host.host.substr(0, host.host.find('/')) + ", job " +
      (host.job.empty() ? "without an id" : host.job) + "), not by this job's (job " +
      options.job_id + "): were two jobs given the same MASTER_ADDR:MASTER_PORT?");
}

// Every rank uses rank 0's tuning, so that all pick the same algorithm for a call: rank 0
// reads its file (or takes the defaults) and publishes the result, or why it could not.
Result<model::Tuning> AgreeOnTuning(Store& scoped, const CommOptions& options, Deadline deadline) {
  if (options.rank == 0) {
    auto tuning = model::TuningFromFile(options.tuning_file);
    const std::string published = tuning.ok()
                                      ? "ok " + tuning->source + "\n" + model::FormatTuning(*tuning)
                                      : "error\n" + tuning.status().message();
    CHORUS_RETURN_IF_ERROR(scoped.Set("tuning", published));
    if (!tuning.ok()) return Status(tuning.status().code(), "Create: " + tuning.status().message());
    return tuning;
  }
  auto text = scoped.Get("tuning", Remaining(deadline));
  if (!text.ok()) return text.status();
  const size_t nl = text->find('\n');
  const std::string head = text->substr(0, nl);
  const std::string body = nl == std::string::npos ? "" : text->substr(nl + 1);
  if (head == "error") return InvalidArgument("Create: rank 0's tuning: " + body);
  auto tuning = model::ParseTuning(body, "rank 0's tuning (" + head.substr(3) + ")");
  if (!tuning.ok()) return Status(tuning.status().code(), "Create: " + tuning.status().message());
  return tuning;
}

// "tcp://host:port" -> {host, port}.
Result<TcpStoreServer::Options> ServerOptions(const std::string& url) {
  const std::string scheme = "tcp://";
  const size_t colon = url.rfind(':');
  if (url.rfind(scheme, 0) != 0 || colon == std::string::npos || colon < scheme.size()) {
    return InvalidArgument("Create: options.host_store needs a tcp://host:port store_url, not \"" +
                           url + "\"");
  }
  const std::string port = url.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 1 || value > 65535) {
    return InvalidArgument("Create: bad port in store_url \"" + url + "\"");
  }
  return TcpStoreServer::Options{url.substr(scheme.size(), colon - scheme.size()),
                                 static_cast<uint16_t>(value)};
}

// The IPv4 address TCP ranks listen on: `listen` (an address or an interface name), else
// loopback when every rank is on this host, else the first non-loopback interface that is up.
Result<std::string> ListenAddress(const std::string& listen, bool one_host) {
  in_addr parsed{};
  if (!listen.empty() && inet_pton(AF_INET, listen.c_str(), &parsed) == 1) return listen;
  if (listen.empty() && one_host) return std::string("127.0.0.1");
  Result<std::optional<std::string>> found = internal::InterfaceIpv4(listen);
  if (!found.ok()) return Unavailable("Create: " + found.status().message());
  if (!*found) {
    return InvalidArgument(listen.empty()
                               ? std::string("Create: the ranks span hosts but this host has no "
                                             "IPv4 interface up to listen on besides loopback")
                               : "Create: options.listen (\"" + listen +
                                     "\") is neither an IPv4 address nor an interface with one");
  }
  return **found;
}

// The host layout when every host holds the same number (> 1) of ranks; else nullopt.
std::optional<internal::HostLayout> LayoutOf(const std::vector<internal::MemberRecord>& members,
                                             int rank) {
  std::vector<std::string> hosts;  // in order of their lowest rank
  std::vector<std::vector<int>> ranks;
  for (int r = 0; r < static_cast<int>(members.size()); ++r) {
    const std::string& host = members[static_cast<size_t>(r)].host;
    const auto it = std::find(hosts.begin(), hosts.end(), host);
    if (it == hosts.end()) {
      hosts.push_back(host);
      ranks.push_back({r});
    } else {
      ranks[static_cast<size_t>(it - hosts.begin())].push_back(r);
    }
  }
  internal::HostLayout layout;
  layout.hosts = static_cast<int>(hosts.size());
  layout.local_size = static_cast<int>(ranks[0].size());
  for (const auto& on_host : ranks) {
    if (static_cast<int>(on_host.size()) != layout.local_size) return std::nullopt;
  }
  if (layout.hosts < 2 || layout.local_size < 2) return std::nullopt;
  for (int h = 0; h < layout.hosts; ++h) {
    const auto& on_host = ranks[static_cast<size_t>(h)];
    const auto me = std::find(on_host.begin(), on_host.end(), rank);
    if (me == on_host.end()) continue;
    layout.host_index = h;
    layout.local_index = static_cast<int>(me - on_host.begin());
    layout.local = on_host;
  }
  for (const auto& on_host : ranks) {
    layout.cross.push_back(on_host[static_cast<size_t>(layout.local_index)]);
  }
  return layout;
}

}  // namespace

std::string_view WireModeName(WireMode mode) {
  switch (mode) {
    case WireMode::kAuthenticate:
      return "authenticate";
    case WireMode::kIntegrity:
      return "integrity";
    case WireMode::kEncrypt:
      return "encrypt";
  }
  return "unknown";
}

std::string_view SlotStoresName(SlotStores stores) {
  switch (stores) {
    case SlotStores::kAuto:
      return "auto";
    case SlotStores::kCached:
      return "cached";
    case SlotStores::kStream:
      return "stream";
  }
  return "unknown";
}

std::string_view WaitModeName(WaitMode mode) {
  switch (mode) {
    case WaitMode::kAuto:
      return "auto";
    case WaitMode::kSleep:
      return "sleep";
    case WaitMode::kSleepChecked:
      return "sleep-checked";
  }
  return "unknown";
}

std::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kThread:
      return "thread";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kMpi:
      return "mpi";
  }
  return "unknown";
}

Result<Communicator> Communicator::Create(const CommOptions& options) {
  CHORUS_RETURN_IF_ERROR(ValidateCreate(options));
  // '#' and '~' name the communicators Split and Shrink make (core/split.cpp).
  if (options.name.find_first_of("#~") != std::string::npos) {
    return InvalidArgument("Create: options.name (\"" + options.name +
                           "\") must contain no '#' or '~': those name Split's and Shrink's "
                           "communicators");
  }
  return internal::CreateUntil(options, internal::DeadlineAfter(options.timeout), options.timeout);
}

Result<Communicator> internal::CreateUntil(const CommOptions& options, Deadline deadline,
                                           std::chrono::milliseconds timeout,
                                           std::shared_ptr<TcpStoreServer> kept_server) {
  CHORUS_RETURN_IF_ERROR(ValidateCreate(options));
  if (options.transport == TransportKind::kMpi) {
    return InvalidArgument(
        "Create: options.transport is kMpi: use chorus::CreateMpiCommunicator (chorus/mpi.h, "
        "built with CHORUS_WITH_MPI)");
  }

  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store = options.store;
  std::string secret = options.secret;
  const bool bootstrap = !store && options.store_url.rfind(internal::kBootstrapScheme, 0) == 0;
  if (bootstrap) {
    std::string host = internal::BootstrapHost(options.store_url);
    if (host.empty() && options.rank == 0) {
      auto address = ListenAddress(options.listen, false);
      if (!address.ok()) return address.status();
      host = *address;
    }
    auto booted = internal::Bootstrap(options.store_url, options.rank, secret, host, deadline);
    if (!booted.ok()) return booted.status();
    store = std::move(booted->store);
    server = std::move(booted->server);
    secret = std::move(booted->secret);
  }
  const bool hosting = options.host_store && options.rank == 0 && !store;
  if (hosting) {
    auto server_options = ServerOptions(options.store_url);
    if (!server_options.ok()) return server_options.status();
    server_options->secret = secret;
    auto started = TcpStoreServer::Start(*server_options);
    if (!started.ok()) {
      return Status(started.status().code(),
                    started.status().message() +
                        (started.status().message().find("in use") != std::string::npos
                             ? " (is another job serving its store on this port, the same "
                               "MASTER_ADDR:MASTER_PORT?)"
                             : ""));
    }
    server = std::move(started).value();
  }
  if (!store) {
    auto opened =
        OpenStore(options.store_url, {.connect_timeout = Remaining(deadline), .secret = secret});
    if (!opened.ok()) return opened.status();
    store = std::move(opened).value();
  }

  internal::MeetRequest request{.rank = options.rank,
                                .size = options.size,
                                .name = options.name,
                                .store_address = store->address(),
                                .me = {},
                                .deadline = deadline,
                                .timeout = timeout};
  request.me.token = internal::NewToken();
  request.me.host = options.host_id.empty() ? HostId() : options.host_id;
  request.me.pid = getpid();
  request.me.size = options.size;
  request.me.job = options.job_id;
  request.me.expires_ms = WallMsAfter(Remaining(deadline));
  request.me.cpus = internal::UsableCpus();
  request.me.settings = Settings(options);
  request.me.caps = internal::tcp::HasAesGcm() ? "aesgcm" : "";
  if (const int cpu = internal::BoundCpu(); cpu >= 0) {
    request.me.caps += (request.me.caps.empty() ? "cpu=" : " cpu=") + std::to_string(cpu);
  }
  CHORUS_RETURN_IF_ERROR(ClaimHostedStore(*store, options, hosting, request.me, deadline));

  // The communicator's own corner of the store; its meetings are numbered rounds (core/meet.h).
  const std::string scope =
      "chorus/" + (options.job_id.empty() ? "" : options.job_id + "/") + options.name + "/";
  const std::shared_ptr<Store> communicator_scope = MakePrefixStore(store, scope);
  auto meeting = internal::Meet(*communicator_scope, request);
  if (!meeting.ok()) return meeting.status();
  if (bootstrap && options.rank == 0) internal::FinishBootstrap(options.store_url);
  const std::shared_ptr<Store> scoped =
      MakePrefixStore(communicator_scope, std::to_string(meeting->round) + "/");
  auto tuning = AgreeOnTuning(*scoped, options, deadline);
  if (!tuning.ok()) return tuning.status();
  const std::vector<internal::MemberRecord>& members = meeting->members;

  const internal::MemberRecord& me = members[static_cast<size_t>(options.rank)];
  bool one_host = true;
  bool one_process = true;
  int ranks_on_host = 0;
  for (const internal::MemberRecord& m : members) {
    one_host = one_host && m.host == members[0].host;
    one_process = one_process && m.pid == members[0].pid && m.host == members[0].host;
    ranks_on_host += m.host == me.host ? 1 : 0;
  }
  TransportKind kind = options.transport;
  if (kind == TransportKind::kAuto) {
    kind = one_process ? TransportKind::kThread
           : one_host  ? TransportKind::kShm
                       : TransportKind::kTcp;
  }
  if (kind == TransportKind::kThread && !one_process) {
    return InvalidArgument(
        "Create: options.transport is kThread but the ranks are in different processes");
  }
  if (kind == TransportKind::kShm && !one_host) {
    return InvalidArgument(
        "Create: options.transport is kShm but the ranks span hosts (rank 0 on " + members[0].host +
        ", rank " + std::to_string(options.rank) + " on " + me.host + ")");
  }

  const internal::ConnectConfig connect{options.rank, options.size, options.segment_bytes,
                                        options.pipeline_depth, deadline};
  Result<std::unique_ptr<internal::Transport>> transport = Internal("Create: no transport");
  if (kind == TransportKind::kThread) {
    transport = internal::ConnectThreads(*scoped, connect);
  } else if (kind == TransportKind::kShm) {
    transport = internal::ConnectShm(*scoped, connect, options.shm_dir);
  } else {
    if (secret.empty()) {
      return InvalidArgument(
          "Create: the TCP transport needs the job's secret: set options.secret (or "
          "CHORUS_SECRET / CHORUS_SECRET_FILE; chorus launch sets one)");
    }
    auto key = internal::Secret::FromText(secret, "options.secret");
    if (!key.ok()) return key.status();
    auto address = ListenAddress(options.listen, one_host);
    if (!address.ok()) return address.status();
    internal::TcpConfig tcp{
        connect, *address, *key, ranks_on_host,
        std::min<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(10))};
    bool aes_everywhere = true;
    for (const internal::MemberRecord& m : members) {
      aes_everywhere = aes_everywhere && m.caps.find("aesgcm") != std::string::npos;
    }
    tcp.cipher = internal::tcp::CipherFor(options.wire, aes_everywhere);
    // Ranks that share a host reach each other through shared memory (transport/hybrid).
    std::optional<internal::HostLayout> layout = LayoutOf(members, options.rank);
    if (!layout) {
      transport = internal::ConnectTcp(*scoped, tcp);
    } else {
      const std::shared_ptr<Store> host_scope =
          MakePrefixStore(scoped, "host/" + std::to_string(layout->host_index) + "/");
      auto shm = internal::ConnectShm(*host_scope,
                                      {layout->local_index, layout->local_size,
                                       options.segment_bytes, options.pipeline_depth, deadline},
                                      options.shm_dir);
      if (!shm.ok()) return shm.status();
      tcp.bell = &(*shm)->doorbell();
      tcp.beacon = &(*shm)->beacon();
      auto network = internal::ConnectTcp(*scoped, tcp);
      if (!network.ok()) return network.status();
      transport = std::unique_ptr<internal::Transport>(std::make_unique<internal::HybridTransport>(
          std::move(shm).value(), std::move(network).value(), std::move(*layout)));
    }
  }
  if (!transport.ok()) return transport.status();
  auto state = std::make_unique<internal::CommState>(std::move(transport).value(), kind, options,
                                                     tuning->For(kind), internal::JobCores(members),
                                                     internal::OwnCpu(members, options.rank));
  state->KeepStore(
      std::move(store), std::move(secret),
      server ? std::shared_ptr<TcpStoreServer>(std::move(server)) : std::move(kept_server));
  return Communicator(std::move(state));
}

}  // namespace chorus
