// Communicator::Create: ranks in separate processes meet through a store and pick a transport.
//
//   1. Rank 0 starts the store server when asked to (options.host_store).
//   2. Every rank publishes who it is ("join/<rank>": host id, pid) under the communicator's
//      prefix and waits for all the others; a missing rank is named in the deadline error.
//   3. The transport follows from where the ranks are: one process -> thread; one host -> shm;
//      several hosts -> TCP (not in this build yet, so a clear error).
//   4. The transport connects through the same store.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "core/comm_state.h"
#include "core/validate.h"
#include "transport/shm/shm_transport.h"
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
  }
  return "unknown";
}

Result<Communicator> Communicator::Create(const CommOptions& options) {
  CHORUS_RETURN_IF_ERROR(ValidateCreate(options));
  const Deadline deadline = internal::DeadlineAfter(options.timeout);

  std::unique_ptr<TcpStoreServer> server;
  if (options.host_store && options.rank == 0 && !options.store) {
    auto server_options = ServerOptions(options.store_url);
    if (!server_options.ok()) return server_options.status();
    auto started = TcpStoreServer::Start(*server_options);
    if (!started.ok()) return started.status();
    server = std::move(started).value();
  }
  std::shared_ptr<Store> store = options.store;
  if (!store) {
    auto opened = OpenStore(options.store_url, {.connect_timeout = Remaining(deadline)});
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
  for (int r = 0; r < options.size; ++r) {
    const Member& m = (*members)[static_cast<size_t>(r)];
    if (m.host != (*members)[0].host) {
      return Unimplemented("Create: ranks span hosts (rank 0 on " + (*members)[0].host + ", rank " +
                           std::to_string(r) + " on " + m.host +
                           "): that needs the TCP transport, which this build does not have yet");
    }
  }
  if (options.transport == TransportKind::kTcp) {
    return Unimplemented("Create: the TCP transport is not in this build yet");
  }
  bool one_process = true;
  for (const Member& m : *members) one_process = one_process && m.pid == (*members)[0].pid;
  if (options.transport == TransportKind::kThread && !one_process) {
    return InvalidArgument(
        "Create: options.transport is kThread but the ranks are in different processes");
  }

  const bool threads = one_process && options.transport != TransportKind::kShm;
  Result<std::unique_ptr<internal::Transport>> transport =
      threads
          ? internal::ConnectThreads(*scoped, {options.rank, options.size, options.segment_bytes,
                                               options.pipeline_depth, deadline})
          : internal::ConnectShm(*scoped, {options.rank, options.size, options.segment_bytes,
                                           options.pipeline_depth, deadline});
  if (!transport.ok()) return transport.status();
  auto state = std::make_unique<internal::CommState>(
      std::move(transport).value(), threads ? TransportKind::kThread : TransportKind::kShm,
      options);
  state->HostStore(std::move(server));
  return Communicator(std::move(state));
}

}  // namespace chorus
