// chorus/options.h: aggregate options for communicators and for single calls.
//
// Options are plain aggregates with defaults; set what you need with designated initialisers:
//
//   chorus::CommOptions opts{.timeout = std::chrono::seconds(5)};
//   auto group = chorus::CreateLocalGroup(4, opts);
//   comm.AllReduce(send, recv, chorus::ReduceOp::kSum, {.timeout =
//   std::chrono::milliseconds(200)});
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "chorus/store.h"

namespace chorus {

// How ranks exchange data.
//   kThread  threads of one process (CreateLocalGroup)
//   kShm     processes on one host, through a shared-memory segment
//   kTcp     hosts, over authenticated TCP connections (any ranks, also on one host)
//   kMpi     an existing MPI's point-to-point (chorus/mpi.h, built with CHORUS_WITH_MPI)
//   kAuto    CreateLocalGroup: thread. Communicator::Create: thread when every rank is a thread
//            of this process, shm when every rank is on this host (same hostname and boot id),
//            otherwise TCP (hierarchical where several ranks share a host)
enum class TransportKind : uint8_t { kAuto, kThread, kShm, kTcp, kMpi };
std::string_view TransportKindName(TransportKind kind);

struct CommOptions {
  // Every wait inside a collective ends by this deadline; the call then returns
  // kDeadlineExceeded and the communicator stays failed.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Large buffers move in segments of at most this many bytes, so neighbours work on different
  // segments at the same time. Also the size of each staging slot, allocated once.
  size_t segment_bytes = size_t{1} << 20;
  // Staging slots per link: how many segments a sender may run ahead of its receiver.
  int pipeline_depth = 4;
  TransportKind transport = TransportKind::kAuto;
  // The algorithm every call uses unless CallOptions::algorithm says otherwise; empty lets the
  // selection table choose per call (`chorus bench --list-algos` prints it).
  std::string algorithm;

  // Communicator::Create only (CreateLocalGroup ignores them); CommOptionsFromEnvironment fills
  // them in from a launcher's variables.
  int rank = -1;
  int size = 0;
  // Where the ranks meet: a Store object, or the URL of one ("tcp://host:port",
  // "file:///path"). A given `store` wins over `store_url`.
  std::shared_ptr<Store> store;
  std::string store_url;
  // Rank 0 serves `store_url` itself (a TcpStoreServer on its port), as torchrun's MASTER_PORT.
  bool host_store = false;
  // Communicators that meet through the same store need distinct names.
  std::string name = "world";
  // The job's shared secret: every TCP connection (to the store and between ranks) proves it
  // knows it before any data moves. Required by the TCP store and transport; the environment
  // gives it as CHORUS_SECRET or CHORUS_SECRET_FILE, and `chorus launch` makes one up.
  std::string secret;
  // Where TCP ranks listen: an IPv4 address or an interface name ("eth0"). Empty: loopback when
  // every rank is on this host, else this host's first non-loopback IPv4 interface that is up.
  // CHORUS_SOCKET_IFNAME in the environment.
  std::string listen;
};

struct CallOptions {
  // Overrides CommOptions::timeout for this call.
  std::optional<std::chrono::milliseconds> timeout;
  // Overrides CommOptions::segment_bytes for this call; must not exceed it.
  std::optional<size_t> segment_bytes;
  // Runs this algorithm ("ring", "oneshot", "direct", ...) instead of the selected one.
  std::string algorithm;
};

}  // namespace chorus
