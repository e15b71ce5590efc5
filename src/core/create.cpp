// Communicator::Create: ranks in separate processes meet through a store and pick a transport.
//
//   1. Rank 0 starts the store server when asked to (options.host_store).
//   2. Every rank publishes who it is ("join/<rank>": host id, pid) under the communicator's
//      prefix and waits for all the others; a missing rank is named in the deadline error.
//   3. The transport follows from where the ranks are: one process -> thread; one host -> shm;
//      several hosts -> TCP. CommOptions::transport may force shm or TCP.
//   4. The transport connects through the same store.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
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
#include "core/validate.h"
#include "model/tuning.h"
#include "rendezvous/auth.h"
#include "rendezvous/bootstrap.h"
#include "transport/hybrid/hybrid_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
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

struct Member {
  std::string host;  // hostname and boot id
  std::string pid;   // for error messages and debugging
};

// Publishes this rank and waits for every other one.
Result<std::vector<Member>> Join(Store& store, const std::string& address, int rank, int size,
                                 Deadline deadline, std::chrono::milliseconds timeout) {
  CHORUS_RETURN_IF_ERROR(
      store.Set("join/" + std::to_string(rank), HostId() + "\n" + std::to_string(getpid())));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("join/" + std::to_string(r));
  if (Status s = store.Wait(keys, Remaining(deadline)); !s.ok()) {
    if (s.code() != StatusCode::kDeadlineExceeded) return s;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.Wait({keys[static_cast<size_t>(r)]}, std::chrono::milliseconds(1)).ok()) {
        missing.push_back(r);
      }
    }
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%g s", static_cast<double>(timeout.count()) / 1000);
    return DeadlineExceeded("Create: waited " + std::string(waited) + " for " +
                            (missing.size() == 1 ? "rank " : "ranks ") + list + " to join store " +
                            address);
  }
  std::vector<Member> members;
  for (const std::string& key : keys) {
    auto value = store.Get(key, Remaining(deadline));
    if (!value.ok()) return value.status();
    const size_t newline = value->find('\n');
    members.push_back({value->substr(0, newline), value->substr(newline + 1)});
  }
  return members;
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
  return Status::Ok();
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
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Unavailable("Create: getifaddrs failed");
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP)) continue;
    const bool wanted = listen.empty() ? !(i->ifa_flags & IFF_LOOPBACK) : listen == i->ifa_name;
    if (!wanted) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    found = text;
  }
  freeifaddrs(list);
  if (found.empty()) {
    return InvalidArgument(listen.empty()
                               ? std::string("Create: the ranks span hosts but this host has no "
                                             "IPv4 interface up to listen on besides loopback")
                               : "Create: options.listen (\"" + listen +
                                     "\") is neither an IPv4 address nor an interface with one");
  }
  return found;
}

// The host layout when every host holds the same number (> 1) of ranks; else nullopt.
std::optional<internal::HostLayout> LayoutOf(const std::vector<Member>& members, int rank) {
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
  if (options.transport == TransportKind::kMpi) {
    return InvalidArgument(
        "Create: options.transport is kMpi: use chorus::CreateMpiCommunicator (chorus/mpi.h, "
        "built with CHORUS_WITH_MPI)");
  }
  // Before anything is sent: a malformed tuning file stops every rank the same way.
  auto tuning = model::ActiveTuning();
  if (!tuning.ok()) return Status(tuning.status().code(), "Create: " + tuning.status().message());
  const Deadline deadline = internal::DeadlineAfter(options.timeout);

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
  if (options.host_store && options.rank == 0 && !store) {
    auto server_options = ServerOptions(options.store_url);
    if (!server_options.ok()) return server_options.status();
    server_options->secret = secret;
    auto started = TcpStoreServer::Start(*server_options);
    if (!started.ok()) return started.status();
    server = std::move(started).value();
  }
  if (!store) {
    auto opened =
        OpenStore(options.store_url, {.connect_timeout = Remaining(deadline), .secret = secret});
    if (!opened.ok()) return opened.status();
    store = std::move(opened).value();
  }
  // Each rank counts its own Creates of this name, so ranks that recreate a communicator after
  // a failure meet in a fresh namespace instead of reading the last one's keys.
  auto generation =
      store->Add("chorus/" + options.name + "/creates/" + std::to_string(options.rank), 1);
  if (!generation.ok()) return generation.status();
  const std::shared_ptr<Store> scoped =
      MakePrefixStore(store, "chorus/" + options.name + "/" + std::to_string(*generation) + "/");

  auto members =
      Join(*scoped, store->address(), options.rank, options.size, deadline, options.timeout);
  if (!members.ok()) return members.status();
  if (bootstrap && options.rank == 0) internal::FinishBootstrap(options.store_url);

  const Member& me = (*members)[static_cast<size_t>(options.rank)];
  bool one_host = true;
  bool one_process = true;
  int ranks_on_host = 0;
  for (const Member& m : *members) {
    one_host = one_host && m.host == (*members)[0].host;
    one_process = one_process && m.pid == (*members)[0].pid;
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
        "Create: options.transport is kShm but the ranks span hosts (rank 0 on " +
        (*members)[0].host + ", rank " + std::to_string(options.rank) + " on " + me.host + ")");
  }

  const internal::ConnectConfig connect{options.rank, options.size, options.segment_bytes,
                                        options.pipeline_depth, deadline};
  Result<std::unique_ptr<internal::Transport>> transport = Internal("Create: no transport");
  if (kind == TransportKind::kThread) {
    transport = internal::ConnectThreads(*scoped, connect);
  } else if (kind == TransportKind::kShm) {
    transport = internal::ConnectShm(*scoped, connect);
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
    // Ranks that share a host reach each other through shared memory (transport/hybrid).
    std::optional<internal::HostLayout> layout = LayoutOf(*members, options.rank);
    if (!layout) {
      transport = internal::ConnectTcp(*scoped, tcp);
    } else {
      const std::shared_ptr<Store> host_scope =
          MakePrefixStore(scoped, "host/" + std::to_string(layout->host_index) + "/");
      auto shm = internal::ConnectShm(
          *host_scope, {layout->local_index, layout->local_size, options.segment_bytes,
                        options.pipeline_depth, deadline});
      if (!shm.ok()) return shm.status();
      tcp.bell = &(*shm)->doorbell();
      auto network = internal::ConnectTcp(*scoped, tcp);
      if (!network.ok()) return network.status();
      transport = std::unique_ptr<internal::Transport>(std::make_unique<internal::HybridTransport>(
          std::move(shm).value(), std::move(network).value(), std::move(*layout)));
    }
  }
  if (!transport.ok()) return transport.status();
  auto state = std::make_unique<internal::CommState>(std::move(transport).value(), kind, options,
                                                     tuning->For(kind));
  state->HostStore(std::move(server));
  return Communicator(std::move(state));
}

}  // namespace chorus
